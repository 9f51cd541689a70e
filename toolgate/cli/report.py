"""What ``toolgate run`` and ``resume`` print about a thread, and the seeds' check lines.

`report` prints the thread, its pending proposals, this task turn's tokens and the answer. With
``--request-state`` it adds, from real facts (never constants):

- the request-state line of the last model request::

    model= tool_release= tools_exposed= parallel_tool_calls= max_tool_calls= response_items_preserved= transport_status=

  ``tools_exposed`` is how many tools were bound (the ``model.response`` audit event's offer);
  ``parallel_tool_calls`` is what the gateway's binding of exactly those tools carries;
  ``response_items_preserved`` compares every earlier model response as the thread first
  checkpointed it (content items, opaque reasoning included, and tool calls) with what the last
  request sent back, in the same order, each call followed by its result; ``transport_status`` is
  the provider's status (or finish reason) of the last response, else what the audit log recorded.

- one continuation line per tool result of this task turn::

    call_id= operation_id= output_bytes= redaction=PASS|FAIL instructions_in_output=
    remaining_tool_calls= authoritative_status=

  ``redaction=PASS`` when nothing secret-looking remains and the redactor changes nothing more
  (it ran: it is idempotent); ``instructions_in_output=IGNORED_AS_DATA`` when the tool's data is
  nested under ``data`` with the untrusted-data provenance label (``NO_TOOL_DATA``: a gateway
  message, ``NOT_WRAPPED``: neither); ``remaining_tool_calls`` counts the thread's calls in the
  audit log (the store) and prints ``budget_state=MISMATCH`` when the checkpoint's counter
  differs; ``authoritative_status`` is the operation's status (writes) or the call's last audit
  result (reads), never the message's own word.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

import typer
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from toolgate.canonical import digest
from toolgate.cli.lines import kv_line
from toolgate.graph.bootstrap import App
from toolgate.graph.gateway import Gateway
from toolgate.graph.messages import PROVENANCE_NOTE
from toolgate.graph.state import gateway_state
from toolgate.policy.authorization import visible_tools
from toolgate.policy.output import count_secrets, redact
from toolgate.policy.principal import Principal
from toolgate.store import AuditEvent
from toolgate.telemetry import model_name
from toolgate.telemetry.tokens import task_messages_total
from toolgate.tools.spec import ToolSpec

UNCOUNTED = frozenset({"budget_exhausted", "too_many_calls"})
"""Rejection codes of calls the tool-call budget does not count (dispatch's rule)."""
_FINISHED = {"stop": "completed", "tool_calls": "completed", "end_turn": "completed", "tool_use": "completed"}
_FINISHED |= {"length": "incomplete", "max_tokens": "incomplete", "content_filter": "incomplete"}

Print = Callable[[str], None]


_kv = kv_line


def report(
    application: App | None, thread_id: str, result: dict[str, Any], print_line: Print, history: Any = None
) -> None:
    """The thread's lines; the check lines too when ``application`` and ``history`` (the thread's
    checkpoints, newest first, as `graph.get_state_history` gives them) are given."""
    result = gateway_state(result)  # a run's output or a thread's values: grouped keys as keys
    interrupts = result.get("__interrupt__") or []
    print_line(
        _kv(
            thread=thread_id, status=result.get("status", "unknown"), release=result.get("release", "unknown")
        )
    )
    for item in interrupts:
        for proposal in item.value.get("toolgate", {}).get("proposals", []):
            print_line(
                _kv(
                    proposal=proposal["proposal_id"],
                    tool=proposal["tool"],
                    status="pending_approval",
                    digest=proposal["digest"],
                    expires_at=proposal["expires_at"],
                    execution_started="false",
                )
            )
    # this task turn's tokens, after the lines scripts index (the thread, then its proposals)
    typer.echo(task_messages_total(list(result.get("messages") or [])).line())
    if application is not None and history is not None:
        events = [e for e in application.gateway.store.audit.events() if e.thread_id == thread_id]
        print_line(request_state_line(application, result, list(history), events))
        for line in continuation_lines(application, result, events):
            print_line(line)
    if not interrupts and result.get("messages"):
        print_line(str(result["messages"][-1].content))


# ---- the request-state line --------------------------------------------------------------


def response_items(message: AIMessage) -> list[str]:
    """One digest per item of a model response: content blocks (reasoning included), the
    provider's opaque reasoning, then each tool call (id, name, arguments)."""
    content = message.content
    blocks: Sequence[Any] = content if isinstance(content, list) else ([content] if content else [])
    items = [digest(block) for block in blocks]
    for key in ("reasoning", "reasoning_content"):
        if message.additional_kwargs.get(key) is not None:
            items.append(f"{key}:{digest(message.additional_kwargs[key])}")
    items += [f"call:{c.get('id')}:{c.get('name')}:{digest(c.get('args'))}" for c in message.tool_calls]
    items += [f"invalid:{c.get('id')}:{digest(c.get('args'))}" for c in message.invalid_tool_calls]
    return items


def items_preserved(history: Sequence[Any]) -> bool:
    """Whether the last model request sent back every earlier response item, in order (see the
    module docstring); ``history`` is the thread's checkpoints, newest first."""
    received: dict[str, tuple[int, list[str]]] = {}  # response id -> (order, items as first checkpointed)
    request: list[BaseMessage] | None = None
    last_ai: str | None = None
    for snapshot in history:  # newest first: the request is the state just before the last response
        messages = list(snapshot.values.get("messages") or [])
        ai_ids = [m.id for m in messages if isinstance(m, AIMessage) and m.id]
        if last_ai is None and ai_ids:
            last_ai = ai_ids[-1]
        if last_ai is not None and request is None and last_ai not in ai_ids:
            request = messages
    for snapshot in reversed(list(history)):  # oldest first: each response as it was first kept
        for message in snapshot.values.get("messages") or []:
            if isinstance(message, AIMessage) and message.id and message.id not in received:
                received[message.id] = (len(received), response_items(message))
    sent = request or []
    order = [received.get(m.id or "", (-1, []))[0] for m in sent if isinstance(m, AIMessage)]
    if order != sorted(order) or -1 in order:
        return False
    for index, message in enumerate(sent):
        if not isinstance(message, AIMessage):
            continue
        if response_items(message) != received[message.id or ""][1]:
            return False
        answered = set()
        for later in sent[index + 1 :]:
            if isinstance(later, AIMessage | HumanMessage):
                break
            if isinstance(later, ToolMessage):
                answered.add(later.tool_call_id)
        if any(c.get("id") not in answered for c in message.tool_calls):
            return False
    return True


def transport_status(result: dict[str, Any], events: Sequence[AuditEvent]) -> str:
    """The last response's provider status, its finish reason, else the last model audit event."""
    last = next((m for m in reversed(result.get("messages") or []) if isinstance(m, AIMessage)), None)
    metadata = last.response_metadata if last is not None else {}
    if isinstance(metadata.get("status"), str):
        return str(metadata["status"])
    reason = metadata.get("finish_reason") or metadata.get("stop_reason")
    if isinstance(reason, str):
        return _FINISHED.get(reason, reason)
    model_events = [e for e in events if e.event.startswith("model.") and e.event != "model.retry"]
    if not model_events:
        return "none"
    return "completed" if model_events[-1].event == "model.response" else model_events[-1].result


class _Recorder:
    """Stands in for the provider model while the gateway binds tools: records the options."""

    def __init__(self, kind: Any) -> None:
        self._llm_type = kind
        self.options: dict[str, Any] = {}

    def bind_tools(self, tools: Sequence[Any], **options: Any) -> _Recorder:
        self.options = dict(options)
        return self


def requested_options(gw: Gateway, specs: Sequence[ToolSpec], choice: Any) -> dict[str, Any]:
    """The request options the gateway's own binding (`Gateway.model_for`) sends with ``specs``,
    recorded in place of the provider's client (which may ignore them, as the offline model does)."""
    recorder = _Recorder(getattr(gw.model, "_llm_type", None))
    probe = SimpleNamespace(model=recorder, registry=gw.registry, instructions=gw.instructions, _bound={})
    Gateway.model_for(probe, specs, *([str(choice)] if choice else []))  # type: ignore[arg-type]
    return recorder.options


def request_state_line(
    application: App, result: dict[str, Any], history: Sequence[Any], events: Sequence[AuditEvent]
) -> str:
    """The seeds' request-state line for the thread's last model request."""
    result = gateway_state(result)
    gw = application.gateway
    response = next((e for e in reversed(events) if e.event == "model.response"), None)
    detail = response.detail if response is not None and isinstance(response.detail, dict) else {}
    names = detail.get("tools_offered")
    if isinstance(names, list):  # the offer this request bound
        specs = [s for s in gw.registry.tools.values() if s.name in names]
    else:  # a release that binds every visible tool records only their count
        principal = Principal.from_dict(result["principal"]) if result.get("principal") else None
        specs = visible_tools(gw.registry, principal) if principal is not None else []
        if len(specs) != int(detail.get("tools_exposed", -1)):
            specs = []
    parallel: Any = "none"  # no tools bound: nothing to call in parallel
    if specs:
        parallel = requested_options(gw, specs, detail.get("tool_choice")).get(
            "parallel_tool_calls", "provider_default"
        )
    budget = result.get("budget") or {}
    return _kv(
        model=model_name(gw.model),
        tool_release=result.get("release", "unknown"),
        tools_exposed=len(specs) if specs or isinstance(names, list) else detail.get("tools_exposed", 0),
        parallel_tool_calls=str(parallel).lower(),
        max_tool_calls=budget.get("max_tool_calls", "unknown"),
        response_items_preserved=str(items_preserved(history)).lower(),
        transport_status=transport_status(result, events),
    )


# ---- the continuation lines ---------------------------------------------------------------


def calls_counted(events: Sequence[AuditEvent]) -> int:
    """The thread's tool calls the budget counts, from the audit log (the store)."""
    counted = {
        e.call_id
        for e in events
        if e.call_id
        and (e.event == "call.accepted" or (e.event == "call.rejected" and (e.code or "") not in UNCOUNTED))
    }
    return len(counted)


def redaction(content: str) -> str:
    """PASS when nothing secret-looking remains and the redactor would change nothing more."""
    try:
        payload: Any = json.loads(content)
    except ValueError:
        payload = content
    return "PASS" if count_secrets(content) == 0 and redact(payload) == payload else "FAIL"


def wrapped_as_data(content: str) -> str:
    """How the result presents tool data: nested under ``data`` with the untrusted-data label."""
    try:
        payload = json.loads(content)
    except ValueError:
        return "NOT_WRAPPED"
    if not isinstance(payload, dict) or "data" not in payload:
        return "NO_TOOL_DATA" if isinstance(payload, dict) and "status" in payload else "NOT_WRAPPED"
    note = (payload.get("provenance") or {}).get("note")
    return "IGNORED_AS_DATA" if note == PROVENANCE_NOTE else "NOT_WRAPPED"


def continuation_lines(application: App, result: dict[str, Any], events: Sequence[AuditEvent]) -> list[str]:
    """One line per tool result of this task turn (after the last user message)."""
    result = gateway_state(result)
    messages = list(result.get("messages") or [])
    start = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=-1)
    budget = result.get("budget") or {}
    used = calls_counted(events)
    limit = int(budget.get("max_tool_calls", 0))
    mismatch = {} if int(budget.get("tool_calls", used)) == used else {"budget_state": "MISMATCH"}
    outcomes = result.get("outcomes") or {}
    lines = []
    for message in messages[start + 1 :]:
        if not isinstance(message, ToolMessage):
            continue
        call_id = message.tool_call_id
        key = str((outcomes.get(call_id) or {}).get("operation_key") or "")
        operation = application.gateway.store.operations.get(key) if key else None
        if operation is not None:
            status: str = operation.status
        else:
            ends = [e.result for e in events if e.call_id == call_id and e.event.startswith("call.")]
            status = ends[-1] if ends else "none"
        content = str(message.content)
        lines.append(
            _kv(
                call_id=call_id,
                operation_id=key or "none",
                output_bytes=len(content.encode()),
                redaction=redaction(content),
                instructions_in_output=wrapped_as_data(content),
                remaining_tool_calls=max(0, limit - used),
                authoritative_status=status,
                **mismatch,
            )
        )
    return lines


__all__ = ["continuation_lines", "items_preserved", "report", "request_state_line", "response_items"]
