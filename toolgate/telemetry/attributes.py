"""The names and values telemetry carries: span and metric attribute keys, outcome classes.

GenAI semantic-convention names where a convention exists, ``toolgate.*`` names for the rest.
"""

from __future__ import annotations

# GenAI semantic conventions (https://opentelemetry.io/docs/specs/semconv/gen-ai/)
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_TOOL_TYPE = "gen_ai.tool.type"
ERROR_TYPE = "error.type"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_REASONING_OUTPUT_TOKENS = "gen_ai.usage.reasoning.output_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_TOKEN_TYPE = "gen_ai.token.type"

# toolgate's own attributes (no semantic convention exists for these)
RELEASE = "toolgate.releases.bundle"
THREAD_ID = "toolgate.thread_id"
TURN = "toolgate.turn"
OUTCOME = "toolgate.outcome"
OUTCOME_CLASS = "toolgate.outcome.class"
OPERATION_KEY = "toolgate.operation_key"
TOOL_KIND = "toolgate.tool.kind"
TOOL_VERSION = "toolgate.tool.version"
PRINCIPAL_HASH = "toolgate.principal.hash"  # the auditor's keyed actor hash, never the raw user id
TENANT_ID = "toolgate.tenant_id"
ARGUMENT_BYTES = "toolgate.tool.argument_bytes"
RESULT_BYTES = "toolgate.tool.result_bytes"
RETRY_COUNT = "toolgate.retry_count"
TOOL_CALLS = "toolgate.tool_calls"
LATENCY_MS = "toolgate.latency_ms"
DUPLICATE_DELIVERY = "toolgate.duplicate_delivery"
REJECTION_CODE = "toolgate.rejection_code"
TASK_STATUS = "toolgate.task.status"
TOKEN_SOURCE = "toolgate.usage.source"  # reported, estimated or unknown

# Outcome classes, each pointing to its own cause: a rising policy rate says "the schema or the policy is
# off", a rising execution_error rate says "the downstream is unhealthy"; never one failure rate.
_REJECTION_CLASS = {
    "unknown_tool": "validation",
    "malformed_arguments": "validation",
    "schema_invalid": "validation",
    "undeclared_argument": "validation",
    "semantic_invalid": "validation",
    "identity_in_arguments": "policy_violation",
    "caller_mismatch": "policy_violation",
    "cross_tenant": "policy_violation",
    "not_owner": "policy_violation",
    "unauthorized": "policy_violation",
    "policy_violation": "policy_violation",
    "rate_limited": "rate_limited",
    "budget_exhausted": "budget",
    "loop_detected": "budget",
}
_OUTCOME_CLASS = {
    "completed": "success",
    "failed": "execution_error",
    "error": "execution_error",
    "unknown": "unresolved",
    "dead_lettered": "unresolved",
    "executing": "unresolved",
    "pending_approval": "pending",
    "rejected": "not_approved",  # a reviewer's rejection; dispatch refusals go through record_rejection
    "expired": "not_approved",
    "approved": "not_approved",  # the approval could not be verified at delivery
}
ERROR_OUTCOMES = frozenset({"failed", "error", "unknown", "dead_lettered"})


def outcome_class(outcome: str, rejection_code: str | None = None) -> str:
    """Low-cardinality class of an outcome (success, validation, policy_violation, ...)."""
    if rejection_code is not None:
        return _REJECTION_CLASS.get(rejection_code, "policy_violation")
    return _OUTCOME_CLASS.get(outcome, "other")


__all__ = ["ERROR_OUTCOMES", "outcome_class"]
