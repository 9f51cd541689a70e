"""The respond node: the final answer, whose statement of what happened comes from the store.

The model's last text is kept as a summary, but every action's status is rendered from the
operation records (never from model prose): "the model said refunded" proves nothing. A write
whose outcome this thread's execute node recorded from its operation's row in a status the
database lets no operation leave (`toolgate.store.migrations.FINAL_STATUSES`: the outcome's own
transaction returned it) is not read again: the row says the same ever after. Every other
write's operation is read now.
"""

from __future__ import annotations

import json
import re
from typing import Any

from langchain_core.messages import AIMessage

from toolgate import telemetry
from toolgate.graph.gateway import Gateway
from toolgate.graph.nodes.execute_calls import AUTHORITATIVE
from toolgate.graph.state import CallRecord, GatewayState, Outcome, TaskStatus
from toolgate.policy.output import redact_text
from toolgate.store.migrations import FINAL_STATUSES

SETTLED = frozenset(AUTHORITATIVE.get(status, status) for status in FINAL_STATUSES)
"""Outcome statuses of operations in a final status: the store's row can no longer change."""


def settled_status(record: CallRecord, outcome: Outcome | None) -> str | None:
    """The status of ``record``'s operation as the execute node recorded it (``outcome``, from the
    operation's row) when that status is final for the same operation key; None: read the store."""
    key = record.get("operation_key")
    if outcome is None or not key or outcome.get("operation_key") != key:
        return None  # none recorded, a refusal (no key), or another operation's (before an edit)
    status = outcome.get("status")
    return status if status in SETTLED else None


def authoritative_outcomes(gw: Gateway, state: GatewayState) -> dict[str, Outcome]:
    """Per call (keyed as ``calls`` keys it: see `toolgate.graph.nodes.model.reused_ids_moved_aside`):
    the store's status for writes (read now unless recorded final: see the module), the recorded
    outcome for reads and refusals."""
    known = dict(state.get("outcomes", {}))
    out: dict[str, Outcome] = {}
    for held_as, record in state.get("calls", {}).items():
        call_id = record.get("call_id") or held_as  # the id the call's answer carried
        key = record.get("operation_key")
        if key:
            status = settled_status(record, known.get(held_as))
            if status is None:
                op = gw.store.operations.get(key)
                status = AUTHORITATIVE.get(op.status, op.status) if op else "missing"
            out[held_as] = Outcome(
                call_id=call_id,
                tool=record["tool"],
                status=status,
                operation_key=key,
                proposal_id=record.get("proposal_id", ""),
            )
        elif record.get("phase") == "rejected":
            out[held_as] = Outcome(
                call_id=call_id, tool=record["tool"], status="rejected", detail=record.get("code", "")
            )
        elif held_as in known:
            out[held_as] = known[held_as]
    return out


_PLAIN_ID = re.compile(r"[A-Za-z0-9_.:#-]+")
"""A call id written as it is in an outcome line; any other is written as a JSON string."""


def render(outcomes: dict[str, Outcome], summary: str, status: TaskStatus, reason: str) -> str:
    """Plain-text final answer: authoritative lines first, then the model's summary.

    Only the store's words start a line. A call id comes from the provider (some from the
    model's own tokens) and the summary is the model's: an id that is not a plain word is written
    as a JSON string, and every line of the summary is quoted (``> ``), so neither can start an
    outcome line or a second "Authoritative outcome" block of its own."""
    lines = ["Authoritative outcome (from the operation store):"]
    for outcome in outcomes.values():
        call_id = redact_text(outcome["call_id"])  # the provider's text: a secret-looking one is not shown
        shown = call_id if _PLAIN_ID.fullmatch(call_id) else json.dumps(call_id)
        extra = f", operation {outcome['operation_key']}" if outcome.get("operation_key") else ""
        detail = f" ({outcome['detail']})" if outcome.get("detail") else ""
        lines.append(f"- {outcome['tool']} [{shown}]: {outcome['status']}{detail}{extra}")
    if not outcomes:
        lines.append("- no tool calls were made")
    if status == "needs_review":
        lines.append(f"Task stopped for human review: {reason}.")
    said = summary.splitlines()  # at every line break Python knows, U+2028 and NEL included
    if len(said) == 1:
        lines.append(f"Assistant summary (not authoritative): {said[0]}")
    elif said:
        lines.append("Assistant summary (not authoritative):")
        lines.extend(f"> {line}" for line in said)
    return "\n".join(lines)


def make_respond_node(gw: Gateway) -> Any:
    """Build the ``respond`` node."""

    def respond(state: GatewayState) -> dict[str, Any]:
        if state.get("status") == "refused":
            # nothing recorded in this thread's state is trusted any more, not even to look records up
            text = (
                "This task was stopped: its saved state was changed outside the gateway "
                f"({state.get('status_reason', 'state tampered')}). Nothing further runs in it; "
                "start a new conversation."
            )
            return {"messages": [AIMessage(content=text, name="toolgate")], "status": "refused"}
        outcomes = authoritative_outcomes(gw, state)
        messages = state.get("messages", [])
        last = messages[-1] if messages else None
        # only the model's words: its content may also hold provider items (reasoning, encrypted);
        # never this node's own earlier answer (a thread answered again from the store)
        summary = (
            str(last.text)
            if isinstance(last, AIMessage) and not last.tool_calls and last.name != "toolgate"
            else ""
        )
        status: TaskStatus = (
            "needs_review"
            if state.get("status") == "needs_review"
            else (
                "awaiting_approval"
                if any(o["status"] == "pending_approval" for o in outcomes.values())
                else "done"
            )
        )
        text = render(outcomes, summary, status, state.get("status_reason", ""))
        if status in ("done", "needs_review"):  # finished (awaiting_approval comes back here later)
            release = state.get("release") or gw.registry.release
            telemetry.record_task_completed(len(state.get("calls", {})), status=status, release=release)
        return {
            "messages": [AIMessage(content=text, name="toolgate")],
            "outcomes": outcomes,
            "status": status,
        }

    return respond


__all__ = ["SETTLED", "authoritative_outcomes", "make_respond_node", "render", "settled_status"]
