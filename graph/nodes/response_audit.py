"""A tool-calling model turn's ``model.response`` event, linked with the thread's next audited step.

Appended on its own, the event of a turn that proposes tool calls was a write transaction of its
own (an fsync on SQLite, round trips on PostgreSQL) right before the step that audits what became
of those calls (issue 31). So the model node makes the event and leaves it waiting; the next step
of the thread that appends audit events links it first, in the same transaction: dispatch with
its refusals, execute with the first read's events, the proposal node with the first proposal. A
text answer and a refused or failed turn still append theirs at once (nothing follows them). A
thread refused as changed outside the gateway links it with ``state.tampered``
(`toolgate.graph.seals.guard`), and a model node that finds one still waiting (no step after its
turn appended anything) appends it on its own.

What waits is in checkpointed state only as a marker, ``unaudited_response``: a random 53-bit
token (the turn is the budget's count of model turns, which no step changes before the event is
linked), sealed like every key, so a dropped, changed or replayed marker is refused
``state_tampered``.
The event itself stays in this process (`DeferredResponses`), made by the model node with the
time the model answered (``answered_at``: the linking transaction's time is later). A thread
resumed elsewhere (the process died between the model node and the next step) rebuilds it from
the sealed message and the turn's offer, without that time.

Exactly once: the event's id is derived from the thread and the token (`response_event_id`), and
linking leaves out an event whose id the chain holds already (`toolgate.store.audit_records.KeyedEventIn`),
so a step LangGraph runs again after its transaction committed does not write it twice.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from toolgate import telemetry
from toolgate.graph.context import Context
from toolgate.graph.gateway import Gateway
from toolgate.graph.nodes._common import budget_of, context_of, principal_of, thread_id
from toolgate.graph.nodes.tool_offer import Offer, offer_detail, offer_for
from toolgate.graph.state import GatewayState
from toolgate.store.audit import Auditor
from toolgate.store.audit_records import AuditEventIn, KeyedEventIn
from toolgate.telemetry.tokens import TokenUsage, usage_of

MARKER = "unaudited_response"
"""The state key of the waiting event's token (`toolgate.graph.state.GatewayState`)."""

TOKEN_BITS = 53
"""Random bits of a token (an integer: 9 bytes in the checkpoint write that sets it): unique among
one thread's turns however its state was reset (a thread id used again with a fresh checkpointer
counts its turns from 1 again, which must not name the events of the first). Two turns of a
thread drawing the same token would store their events under one id, and the second would be
left out of the chain as linked already: with 32 bits that is about one thread in 3 million at
50 turns each (n^2 / 2^33), with 53 about one in 7 trillion. Not more: 53 bits is what every JSON
reader of the state (a JavaScript client's numbers) holds exactly."""


MAX_RESPONSE_ID_CHARS = 256
"""The longest response id audited as it is."""


def response_id(message: AIMessage) -> str | None:
    """Provider response id, for audit correlation without storing the prompt.

    The id is the provider's (or a proxy's) text: one that is not a short printable word (a NUL
    made the audit append fail on PostgreSQL, and so the run; a megabyte of it was stored every
    turn) is audited as ``sha256:<hex>`` of it, which still correlates."""
    meta = message.response_metadata or {}
    text = str(meta.get("id") or message.id or "")
    if len(text) > MAX_RESPONSE_ID_CHARS or not text.isprintable():
        return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return text or None


def response_event(
    auditor: Auditor,
    response: AIMessage,
    offer: Offer,
    *,
    turn: int,
    task: int,
    usage: TokenUsage,
    ids: dict[str, Any],
    extra: dict[str, Any] | None = None,
) -> AuditEventIn:
    """The ``model.response`` event of one model turn (``task``: the thread's user messages so
    far, by which a trace sums tokens per task; ``extra``: more detail, e.g. ``answered_at``)."""
    return auditor.event(
        "model.response",
        "received",
        response_id=response_id(response),
        detail={
            "tools_exposed": len(offer.visible),
            **offer_detail(offer),
            "tool_calls": len(response.tool_calls) + len(response.invalid_tool_calls),
            "turn": turn,
            "task": task,
            "tokens": usage.to_detail(),
            **(extra or {}),
        },
        **ids,
    )


def response_event_id(thread: str, token: int) -> str:
    """The id the ``model.response`` event named ``token`` in ``thread`` is stored under: the same
    in every process and at every re-run, so the chain holds it once."""
    digest = hashlib.sha256(f"toolgate-model-response\x00{thread}\x00{token}".encode()).hexdigest()
    return "evt_" + digest[:28]


class DeferredResponses:
    """The waiting events this process made, by event id; bounded (an event whose thread never
    goes on is dropped first; a step that finds none rebuilds it)."""

    def __init__(self, limit: int = 4096) -> None:
        self._events: OrderedDict[str, KeyedEventIn] = OrderedDict()
        self._lock = threading.Lock()
        self.limit = limit
        """How many events are kept at most."""

    def put(self, event: KeyedEventIn) -> None:
        """Keep ``event`` until a step of its thread links it."""
        with self._lock:
            self._events[event.event_id] = event
            while len(self._events) > self.limit:
                self._events.popitem(last=False)

    def get(self, event_id: str) -> KeyedEventIn | None:
        """The event kept under ``event_id``, or None."""
        with self._lock:
            return self._events.get(event_id)

    def drop(self, event_id: str) -> None:
        """Forget the event (linked, or given up)."""
        with self._lock:
            self._events.pop(event_id, None)

    def clear(self) -> None:
        """Forget every event (what a new process holds)."""
        with self._lock:
            self._events.clear()


DEFERRED = DeferredResponses()
"""This process's waiting events."""


def defer_response(event: AuditEventIn, *, thread: str) -> dict[str, Any]:
    """Leave the model node's ``event`` waiting for the thread's next audited step: kept in this
    process, and the state update that marks it."""
    token = secrets.randbits(TOKEN_BITS)
    DEFERRED.put(KeyedEventIn.of(event, response_event_id(thread, token)))
    return {MARKER: token}


class PendingResponse:
    """The event waiting for one step of a thread (none: `events` is empty), handed to exactly one
    of the step's audit appends, before that append's own events."""

    def __init__(self, event: KeyedEventIn | None) -> None:
        self.event = event
        """The waiting event, or None."""
        self.taken = False
        """Whether an append of this step took it."""
        self._lock = threading.Lock()

    def take(self) -> list[AuditEventIn]:
        """The event, the first time only (for an append this step makes next): ``[]`` after."""
        with self._lock:
            return self._take()

    def _take(self) -> list[AuditEventIn]:
        if self.event is None or self.taken:
            return []
        self.taken = True
        return [self.event]

    def record_all(self, auditor: Auditor, events: Sequence[AuditEventIn]) -> None:
        """Append ``events`` (in one transaction), after the waiting event if no append took it
        yet. Appends of the step's calls (which may run at once, in worker threads) go one at a
        time, so the one that takes the event commits before the others. Nothing is read back
        (`Auditor.record_all`: one round trip on PostgreSQL)."""
        with self._lock:
            auditor.record_all([*self._take(), *events])

    def link_alone(self, auditor: Auditor) -> None:
        """Append the event on its own unless an append took it (a step whose appends did not
        run, or not yet: a read still running at the batch deadline)."""
        with self._lock:
            first = self._take()
            if first:
                auditor.record_all(first)

    def update(self) -> dict[str, Any]:
        """The state update of a step that linked the event: the marker cleared."""
        if self.event is None or not self.taken:
            return {}
        DEFERRED.drop(self.event.event_id)
        return {MARKER: None}


def pending_response(
    gw: Gateway, state: GatewayState, runtime: Runtime[Context], config: RunnableConfig
) -> PendingResponse:
    """The event the marker in ``state`` names: this process's, else rebuilt (`rebuilt_event`);
    none without a marker or without the turn's message to rebuild it from."""
    token = state.get("unaudited_response")
    if token is None:
        return PendingResponse(None)
    event = DEFERRED.get(response_event_id(thread_id(config), token))
    return PendingResponse(event if event is not None else rebuilt_event(gw, state, runtime, config, token))


def kept_response(state: GatewayState, config: RunnableConfig, *, trusted: bool) -> PendingResponse:
    """The event the marker in ``state`` names if this process keeps it and the marker is
    ``trusted`` (the seal vouches for it), else none: for a step that must not rebuild it (a
    state changed outside the gateway)."""
    token = state.get("unaudited_response")
    if token is None or not trusted:
        return PendingResponse(None)
    return PendingResponse(DEFERRED.get(response_event_id(thread_id(config), token)))


def _calls_tools(message: Any) -> bool:
    return isinstance(message, AIMessage) and bool(message.tool_calls or message.invalid_tool_calls)


def rebuilt_event(
    gw: Gateway, state: GatewayState, runtime: Runtime[Context], config: RunnableConfig, token: int
) -> KeyedEventIn | None:
    """The event ``token`` names, made again from the sealed state: its message (the latest model
    message with calls), its turn (the budget's count of model turns) and the offer its request
    had (computed again from the messages before it, on the store's clock now). ``answered_at``
    is unknown; ``rebuilt`` says so."""
    messages = state.get("messages", [])
    at = next((i for i in range(len(messages) - 1, -1, -1) if _calls_tools(messages[i])), None)
    if at is None:
        return None
    response = messages[at]
    assert isinstance(response, AIMessage)
    before = messages[:at]
    principal = principal_of(state, runtime)
    ctx = context_of(runtime)
    budget = budget_of(state, ctx)
    turn = budget["model_turns"]
    offer = offer_for(
        gw.registry,
        principal,
        {**state, "messages": before},
        limit=ctx.max_tools_per_request,
        setting=gw.tool_choice,
        new_turn=bool(before) and isinstance(before[-1], HumanMessage),
        last_turn=turn >= budget["max_model_turns"],
        now=gw.store.calibrated_now(),
        can_force=gw.can_force_tools,
    )
    thread = thread_id(config)
    event = response_event(
        gw.auditor,
        response,
        offer,
        turn=turn,
        task=sum(isinstance(m, HumanMessage) for m in before),
        usage=usage_of(response),
        ids={
            "user_id": principal.user_id,
            "tenant_id": principal.tenant_id,
            "thread_id": thread,
            "request_id": ctx.request_id,
            "trace_id": telemetry.audit_trace_id(ctx.trace_id, state.get("trace")),
        },
        extra={"rebuilt": True},
    )
    return KeyedEventIn.of(event, response_event_id(thread, token))


__all__ = [
    "DEFERRED",
    "MARKER",
    "MAX_RESPONSE_ID_CHARS",
    "TOKEN_BITS",
    "DeferredResponses",
    "PendingResponse",
    "defer_response",
    "kept_response",
    "pending_response",
    "rebuilt_event",
    "response_event",
    "response_event_id",
    "response_id",
]
