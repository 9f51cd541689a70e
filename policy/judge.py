"""Judging one proposed tool call: the fixed order of checks every door applies.

The dispatch node judges each call a model proposes; a reviewer's edit and a rollback are judged
the same way, as calls by the original requester. The order is: registry lookup, exposure to the
principal, deprecation (a retired tool is refused ``tool_deprecated``), JSON shape, identity
fields, schema, repetition, resource ownership, inbound rate limit (the tool's own window
included), cross-field business validation, then policy. The first failure decides, as a `Rejection` with a
stable code; nothing here has an effect on the world (the rate limiter counts the call, unless
the judge only peeks: a candidate release judging in shadow).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from toolgate.canonical import canonical_json, sha256_hex
from toolgate.errors import ToolExecutionError
from toolgate.policy.authorization import check_resource, check_scopes, closest_visible
from toolgate.policy.decisions import Rejection
from toolgate.policy.output import redact_text
from toolgate.policy.principal import Principal
from toolgate.policy.ratelimit import InboundRateLimiter
from toolgate.policy.rules import PolicyRules
from toolgate.tools.registry import Registry
from toolgate.tools.spec import ArgumentsInvalid, HandlerContext, ToolSpec

MAX_ERRORS_SHOWN = 5


@dataclass(frozen=True)
class ProposedCall:
    """One call as the model emitted it, before any judgement."""

    call_id: str
    name: str
    args: Any
    parse_error: str | None


@dataclass(frozen=True)
class Verdict:
    """What the judge decided about one call."""

    spec: ToolSpec | None
    arguments: dict[str, Any]
    rejection: Rejection | None
    fingerprint: str = ""


def describe_invalid(exc: ArgumentsInvalid) -> str:
    """Field path and constraint for each problem, never the input values or a stack trace."""
    problems = [f"{path}: {problem}" for path, problem in exc.problems]
    more = f" (+{len(problems) - MAX_ERRORS_SHOWN} more)" if len(problems) > MAX_ERRORS_SHOWN else ""
    return redact_text("Invalid arguments: " + "; ".join(problems[:MAX_ERRORS_SHOWN]) + more)[:600]


def call_fingerprint(tool: str, arguments: dict[str, Any]) -> str:
    """Identity of a call for loop detection: tool name and canonical arguments."""
    return sha256_hex(canonical_json({"tool": tool, "args": arguments}))[:24]


def retired(spec: ToolSpec, now: datetime) -> Rejection | None:
    """``tool_deprecated`` once a deprecated tool's window has ended (``now``: the store's clock)."""
    found = spec.deprecation
    if found is None or found.state(now) != "retired":
        return None
    instead = f" Use {found.replacement} instead." if found.replacement else ""
    return Rejection(
        code="tool_deprecated",
        retryable=found.replacement is not None,  # only another tool can succeed
        message=f"This tool was retired at {found.sunset_at.isoformat()}.{instead}",
        suggestion=f"call {found.replacement}" if found.replacement else None,
    )


@dataclass(frozen=True)
class Judge:
    """The checks of one release: its registry (with the ownership resolver), rules and limits."""

    registry: Registry
    policy: PolicyRules
    rate_limiter: InboundRateLimiter

    def __call__(
        self,
        principal: Principal,
        call: ProposedCall,
        *,
        counts: dict[str, int],
        max_identical_calls: int,
        now: datetime,
        peek: bool = False,
    ) -> Verdict:
        """Judge one call; the first failing check decides. ``peek`` judges without counting the
        call against any rate limit (a shadow judgement writes nothing anywhere)."""
        spec = self.registry.get(call.name)
        if spec is None:
            suggestion = closest_visible(self.registry, call.name, principal, now)
            return Verdict(
                None,
                {},
                Rejection(
                    code="unknown_tool",
                    message="No tool with that name is available.",
                    retryable=True,
                    suggestion=f"did you mean {suggestion!r}?" if suggestion else None,
                ),
            )
        refused = check_scopes(spec, principal) or retired(spec, now)
        if refused:
            return Verdict(spec, {}, refused)
        if call.parse_error is not None or not isinstance(call.args, dict):
            return Verdict(
                spec,
                {},
                Rejection(
                    code="malformed_arguments",
                    message="Arguments must be one JSON object matching the tool schema.",
                    retryable=True,
                ),
            )
        smuggled = sorted(set(spec.identity_keys(call.args)))
        if smuggled:
            return Verdict(
                spec,
                {},
                Rejection(
                    code="identity_in_arguments",
                    retryable=False,
                    message="Identity and authority come from the signed-in session, never from arguments. "
                    f"Remove: {', '.join(redact_text(k)[:40] for k in smuggled[:5])}.",
                ),
            )
        try:
            arguments = spec.parse_arguments(call.args)
        except ArgumentsInvalid as exc:
            return Verdict(
                spec, {}, Rejection(code="schema_invalid", message=describe_invalid(exc), retryable=True)
            )
        fingerprint = call_fingerprint(spec.name, arguments)
        if not spec.pollable and counts.get(fingerprint, 0) >= max_identical_calls:
            return Verdict(
                spec,
                arguments,
                Rejection(
                    code="loop_detected",
                    retryable=False,
                    message="This exact call was already made in this task; a person will review the task.",
                ),
                fingerprint,
            )
        refused = check_resource(spec, principal, arguments, self.registry.resolver)
        if refused:
            return Verdict(spec, arguments, refused, fingerprint)
        limiter = self.rate_limiter.peek if peek else self.rate_limiter.check
        refused = limiter(principal, spec.name, spec.rate_limit)
        if refused:
            return Verdict(spec, arguments, refused, fingerprint)
        if spec.semantic_check is not None:
            try:
                problem = spec.semantic_check(
                    spec.handler_arguments(arguments),
                    HandlerContext(tenant_id=principal.tenant_id, user_id=principal.user_id),
                )
            except ToolExecutionError as exc:
                problem = exc.message
            if problem:
                rejection = Rejection(
                    code="semantic_invalid", message=redact_text(problem)[:300], retryable=True
                )
                return Verdict(spec, arguments, rejection, fingerprint)
        decision = self.policy.evaluate(spec.name, spec.is_write, principal, arguments, now)
        if decision.kind == "deny":
            assert decision.rejection is not None
            return Verdict(spec, arguments, decision.rejection, fingerprint)
        return Verdict(spec, arguments, None, fingerprint)


__all__ = ["Judge", "ProposedCall", "Verdict", "call_fingerprint", "describe_invalid", "retired"]
