"""What one case run did, as plain JSON-able facts read from trusted places.

Call outcomes come from the thread's checkpointed call records and authoritative outcomes (which
the execute node renders from the store), proposals and operations from the store, operation
transitions from the audit log, handler invocations and effects from the instrumented handlers.
Nothing here is taken from the model's prose.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from toolgate.policy.approvals import evaluate_decisions
from toolgate.policy.authority import Authority
from toolgate.store.base import Store
from toolgate.telemetry.tokens import (
    TokenUsage,
    estimate_tokens,
    message_text,
    request_text,
    total,
    usage_of,
)
from toolgate.testing import ModelRequest
from toolgate.tools.registry import Registry

EXECUTED = frozenset({"executing", "succeeded", "failed", "unknown", "dead_lettered"})
"""Operation statuses that mean a handler was (or may have been) started."""


@dataclass(kw_only=True)
class Observation:
    """Facts of one run of one case against one release."""

    case_id: str
    release: str
    thread_id: str
    calls: list[dict[str, Any]] = field(default_factory=list)
    """Tool calls the model proposed: turn, id, name, args (or raw text); with a live model the
    id is the scripted one it aligns to (`toolgate.evals.call_alignment`) and ``live_id`` its own."""
    call_ids: dict[str, str] = field(default_factory=dict)
    """Live runs: each live call id and the id it was scored under (empty for scripted runs)."""
    outcomes: dict[str, str] = field(default_factory=dict)
    """Per call id: accepted, failed, proposal, not_run or the rejection code."""
    arguments: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per accepted call id: the canonical arguments the gateway kept."""
    rules: dict[str, str] = field(default_factory=dict)
    """Per refused call id: the policy rule that refused it, when a rule did."""
    output_bytes: dict[str, int] = field(default_factory=dict)
    """Per call id: bytes of the tool message the model was sent for it (its last one)."""
    truncated: list[str] = field(default_factory=list)
    """Call ids whose result reached the model cut to the tool's output bound."""
    proposals: list[dict[str, Any]] = field(default_factory=list)
    """Proposals created in the thread: id, call id, tool, operation status."""
    approvals: list[dict[str, Any]] = field(default_factory=list)
    """Review steps taken: call id, reviewer, decision, ``recorded`` or the refusal code."""
    handler_calls: dict[str, int] = field(default_factory=dict)
    """Handler invocations per tool."""
    duplicate_effects: int = 0
    """Completed write-handler runs beyond the first for one operation key."""
    unapproved_executions: list[str] = field(default_factory=list)
    """Operation keys that executed without counted approval decisions."""
    operations: list[dict[str, Any]] = field(default_factory=list)
    """The thread's operations: key, tool, final status, transitions from the audit log."""
    status: str = ""
    """The thread's final status (``done``, ``awaiting_approval``, ``needs_review``, ``refused``)."""
    final_text: str = ""
    model_turns: int = 0
    tool_calls: int = 0
    tokens: dict[str, Any] = field(default_factory=dict)
    """``input``, ``output``, ``reasoning`` (``None``: not reported) and ``source``: ``reported``
    (provider usage), ``estimated`` (bytes / 4: the scripted model reports none) or ``unknown``
    (a live model whose provider left some response's usage out)."""
    messages: list[BaseMessage] = field(default_factory=list, repr=False)
    """The thread's messages (not part of `to_dict`; the LangSmith target converts them)."""
    errors: list[str] = field(default_factory=list)
    """Exceptions that ended the run early (the case then fails)."""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form (without the message objects)."""
        data = asdict(self)
        data.pop("messages", None)
        return data


def call_outcomes(state: dict[str, Any]) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
    """Outcome and canonical arguments per call id, from the thread's trusted records."""
    outcomes: dict[str, str] = {}
    arguments: dict[str, dict[str, Any]] = {}
    authoritative = state.get("outcomes", {})
    for call_id, record in state.get("calls", {}).items():
        final = authoritative.get(call_id, {})
        if record.get("phase") == "rejected":
            outcomes[call_id] = str(record.get("code") or "rejected")
        elif final.get("status") == "rejected" and not record.get("proposal_id"):
            outcomes[call_id] = str(final.get("detail") or "rejected")
        elif record.get("proposal_id"):
            outcomes[call_id] = "proposal"
        elif final.get("status") == "completed":
            outcomes[call_id] = "accepted"
        elif final.get("status") == "failed":
            outcomes[call_id] = "failed"
        else:
            outcomes[call_id] = "not_run"
        if "arguments" in record and record.get("phase") != "rejected":
            arguments[call_id] = dict(record["arguments"])
    return outcomes, arguments


def message_facts(obs: Observation, messages: list[BaseMessage]) -> None:
    """Fill the refusing rule and the size of what the model was sent, per call id."""
    for message in messages:
        if not isinstance(message, ToolMessage):
            continue
        text = str(message.content)
        obs.output_bytes[message.tool_call_id] = len(text.encode("utf-8"))
        if message.additional_kwargs.get("toolgate", {}).get("truncated"):
            obs.truncated.append(message.tool_call_id)
        try:
            payload = json.loads(text)
        except ValueError:
            continue
        rule = payload.get("rule_id") if isinstance(payload, dict) else None
        if isinstance(rule, str):
            obs.rules[message.tool_call_id] = rule


def store_facts(obs: Observation, store: Store, registry: Registry, authority: Authority) -> None:
    """Fill proposals, operations (with audit transitions) and unapproved executions from the store."""
    for proposal, operation in store.proposals.list():
        if proposal.thread_id != obs.thread_id:
            continue
        obs.proposals.append(
            {
                "proposal_id": proposal.proposal_id,
                "call_id": proposal.call_id,
                "tool": proposal.tool,
                "status": operation.status,
                "approval_class": proposal.approval_class,
                "escalation_rule": proposal.escalation_rule_id,
            }
        )
        events = store.audit.events(operation_key=proposal.operation_key)
        obs.operations.append(
            {
                "operation_key": proposal.operation_key,
                "tool": proposal.tool,
                "status": operation.status,
                "transitions": [f"{e.event}:{e.result}" for e in events],
            }
        )
        ran = operation.status in EXECUTED or any(e.event == "handler.started" for e in events)
        spec = registry.get(proposal.tool)
        if ran and spec is not None:
            verdict = evaluate_decisions(proposal, spec.approval, authority.counted_decisions(proposal))
            if verdict.status != "approved":
                obs.unapproved_executions.append(proposal.operation_key)


def usage(messages: list[BaseMessage], requests: list[ModelRequest]) -> dict[str, Any]:
    """Token use of the run: provider-reported when every response carries usage (reasoning
    ``None`` when any response left it out), else estimated (`estimate_tokens`) over what each
    model request really carried (instructions, history and tool definitions) and what each
    response said (the scripted model reports no usage)."""
    # the model's responses: not the final answers the gateway itself writes (named "toolgate")
    answers = [m for m in messages if isinstance(m, AIMessage) and m.name != "toolgate"]
    turns = [usage_of(m) for m in answers]
    if answers and all(u.source == "reported" for u in turns):
        summed = total(turns)
        return {
            "input": summed.input,
            "output": summed.output,
            "reasoning": summed.reasoning,
            "source": "reported",
        }
    return {
        "input": sum(estimate_tokens(request_text(r.messages, r.tools)) for r in requests),
        "output": sum(estimate_tokens(message_text(m)) for m in answers),
        "reasoning": None,  # an estimate cannot tell what a model reasoned
        "source": "estimated",
    }


def audited_turns(store: Store, thread_id: str) -> tuple[int, dict[str, Any]]:
    """Model turns and token use of a live run, from the ``model.response`` events the model node
    audited in the case's store: every worker's requests and a replayed turn included, each with
    the usage its provider reported. Tokens are ``unknown`` unless every response reported usage
    (none answered, as when the first request failed: nothing was used, 0)."""
    events = [e for e in store.audit.events() if e.event == "model.response" and e.thread_id == thread_id]
    turns = [TokenUsage.from_detail(e.detail.get("tokens")) for e in events]
    if not all(u.source == "reported" for u in turns):
        return len(events), {"input": None, "output": None, "reasoning": None, "source": "unknown"}
    summed = total(turns) if turns else total([TokenUsage(input=0, output=0, reasoning=0, source="reported")])
    figures = {"input": summed.input, "output": summed.output, "reasoning": summed.reasoning}
    return len(events), {**figures, "source": "reported"}


def model_failures(store: Store, thread_id: str) -> list[str]:
    """The model requests that failed in the thread (``model.failed`` audit events: a provider
    error after the retries the retry matrix allows), each as one error of the case."""
    return [
        f"model request failed ({e.code})"
        for e in store.audit.events()
        if e.event == "model.failed" and e.thread_id == thread_id
    ]


def final_text(messages: list[BaseMessage]) -> str:
    """The last non-tool message's text (the respond node's answer)."""
    for message in reversed(messages):
        if not isinstance(message, ToolMessage) and str(message.content):
            return str(message.content)[:2000]
    return ""


__all__ = [
    "EXECUTED",
    "Observation",
    "audited_turns",
    "call_outcomes",
    "final_text",
    "message_facts",
    "model_failures",
    "store_facts",
    "usage",
]
