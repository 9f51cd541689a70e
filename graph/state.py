"""The checkpointed state of one task (thread).

Whatever must survive a crash lives here: call ids, operation keys, proposal ids, budgets and
the release. Effects and their evidence live in the store; ``outcomes`` mirrors the store's
authoritative status per call id for the final answer and for clients.

Unlike most modules this one does not use ``from __future__ import annotations``: LangGraph
resolves the annotations of `GatewayState` (``typing.get_type_hints``) several times every time
the graph is compiled (once per App open, once per evaluation case), and real annotations are
resolved without compiling and evaluating each one from its text again.
"""

import json
import uuid
from collections.abc import Sequence
from typing import Annotated, Any, Literal, TypedDict

from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    convert_to_messages,
    message_chunk_to_message,
)
from langgraph.channels.delta import DeltaChannel
from langgraph.graph.message import Messages, add_messages

CallPhase = Literal["rejected", "read", "write", "proposed", "done"]


class CallRecord(TypedDict, total=False):
    """What trusted code decided about one model tool call."""

    call_id: str
    tool: str
    turn: int
    phase: CallPhase
    arguments: dict[str, Any]
    code: str
    operation_key: str
    proposal_id: str


class Outcome(TypedDict, total=False):
    """Authoritative status of one call, rendered from trusted records."""

    call_id: str
    tool: str
    status: str
    operation_key: str
    proposal_id: str
    detail: str


class Budget(TypedDict):
    """The thread's counters and its limits.

    The limits are fixed when the thread starts, from the trusted run context (the operator's
    settings, which a server client may only lower), and kept here under the state seal: a resume
    or a later turn, from any process, counts against the same limits instead of its own."""

    model_turns: int
    tool_calls: int
    max_model_turns: int
    max_tool_calls: int
    max_identical_calls: int
    max_validation_retries: int


def add_message_writes(messages: Messages, writes: Sequence[Messages]) -> Messages:
    """Reducer of the ``messages`` channel: ``add_messages`` applied to each write in order.

    The channel is a `DeltaChannel`: a checkpoint does not hold the whole list again at every step
    (the thread's longest value, and growing), only the writes each step added, with the full list
    once every `MESSAGE_SNAPSHOT_WRITES` writes; reading the thread replays the writes since then
    through this reducer. Folding one write at a time keeps ``add_messages``'s semantics exactly
    (ids, replacement by id, `RemoveMessage`) and is batching-invariant, as replay requires. A
    message written without an id (a client's plain-text input) gets one derived from where and
    what it is (`_identified`), not ``add_messages``'s random one: replayed at every read, a random
    id would be a new one each time, and a client could not name the message by it.
    """
    result = messages
    held: set[Any] | None = None  # the ids in ``result`` while every message in it is whole
    for write in writes:
        if held is None:
            held = _whole_ids(result)
        written = _new_whole(write, held) if held is not None else None
        if held is None or written is None:
            result = add_messages(result, _identified(write, len(result) if isinstance(result, list) else 0))
            held = None
            continue
        # what add_messages returns for it: the messages held, then the written ones, the same objects
        result = [*result, *(write if type(write) is list else [write])]
        held |= written
    return result


_WHOLE_MESSAGES = frozenset({AIMessage, ChatMessage, FunctionMessage, HumanMessage, SystemMessage, ToolMessage})
"""Message classes appended as they are: whole messages (no chunk, which ``add_messages``
converts, and no `RemoveMessage`), by exact type (a subclass takes ``add_messages``'s path)."""


def _whole_ids(messages: Any) -> set[Any] | None:
    """The ids of ``messages`` when it is a list of whole messages (`_WHOLE_MESSAGES`), each with
    an id (``add_messages`` gives one to a message without); else None."""
    if type(messages) is not list or not _WHOLE_MESSAGES.issuperset(map(type, messages)):
        return None
    ids = {m.id for m in messages}
    return None if None in ids else ids


def _new_whole(write: Any, held: set[Any]) -> set[Any] | None:
    """The ids of ``write`` when all ``add_messages`` would do with it is append it to messages
    whose ids are ``held``: whole messages with ids, distinct and new (it replaces by id); else None.

    A step appends its new messages, and this reducer runs for every write (at every channel
    update, every conditional edge's read and every replay of the writes since the last full
    list, over the whole list each time): appended here, a write costs a set of its ids, and a
    replay one set of the ids held, not one per write."""
    items = write if type(write) is list else [write]
    if not _WHOLE_MESSAGES.issuperset(map(type, items)):
        return None
    written = {m.id for m in items}
    if None in written or len(written) != len(items) or not held.isdisjoint(written):
        return None
    return written


MESSAGE_ID_NAMESPACE = uuid.UUID("5f0c7a52-3c1e-4b7e-9d1a-6f3b2c9e8a41")
"""Namespace of the ids `_identified` derives (UUID version 5)."""


def _identified(write: Any, position: int) -> Any:
    """``write`` (one message, a list, text, a dict) as messages, each without an id given one
    derived from ``position`` (the list's length before it), its index in the write, its type and
    its content: the same at every replay of the write. Anything that is not messages (LangGraph's
    own sentinels) is handed to ``add_messages`` as it came."""
    items = write if isinstance(write, list) else [write]
    try:
        converted = [message_chunk_to_message(m) for m in convert_to_messages(items)]
    except (NotImplementedError, ValueError, TypeError):
        return write
    for index, message in enumerate(converted):
        if message.id is None:
            content = json.dumps(message.content, sort_keys=True, default=str)
            message.id = str(uuid.uuid5(MESSAGE_ID_NAMESPACE, f"{position}:{index}:{message.type}:{content}"))
    return converted


MESSAGE_SNAPSHOT_WRITES = 100
"""Writes to ``messages`` between two checkpoints that hold the whole list (about 25 turns): what a
read replays at most. LangGraph's default."""


def merge_dicts(left: dict[str, Any] | None, right: dict[str, Any] | None) -> dict[str, Any]:
    """Reducer: later writes for the same key replace earlier ones."""
    return {**(left or {}), **(right or {})}


def merge_call_records(left: dict[str, Any] | None, right: dict[str, Any] | None) -> dict[str, Any]:
    """Reducer of ``calls``: a record written whole (it names its ``call_id``) replaces the one
    held under its id; a record written without its ``call_id`` holds only the fields that changed
    (what `toolgate.graph.stored` writes when a step moves a call on: its phase, a replacement
    proposal's key and id) and replaces those fields of the record held."""
    result = dict(left or {})
    for call_id, record in (right or {}).items():
        held_record = result.get(call_id)
        if isinstance(record, dict) and "call_id" not in record and isinstance(held_record, dict):
            result[call_id] = {**held_record, **record}
        else:
            result[call_id] = record
    return result


TaskStatus = Literal["running", "awaiting_approval", "waiting", "done", "needs_review", "refused"]
"""``waiting``: suspended on a durable wait for a job (`toolgate.graph.nodes.wait`); ``refused``: the
thread's state was changed outside the gateway; nothing runs in it any more."""


class GatewayState(TypedDict, total=False):
    """State of the gateway graph."""

    messages: Annotated[
        list[AnyMessage], DeltaChannel(add_message_writes, snapshot_frequency=MESSAGE_SNAPSHOT_WRITES)
    ]
    """The conversation; a delta channel (`add_message_writes`). A thread checkpointed before it was
    one holds the whole list in its checkpoints, which LangGraph reads as the channel's snapshot."""
    principal: dict[str, Any]
    release: str
    calls: Annotated[dict[str, CallRecord], merge_call_records]
    """What trusted code decided about each call of the task turn, by call id (`merge_call_records`);
    an earlier call whose id a later model turn used again is held as ``<id>#<n>``
    (`toolgate.graph.nodes.model.reused_ids_moved_aside`)."""
    screened: dict[str, str]
    """Calls of the latest model turn moved aside before storing, by call id, with their code
    (`toolgate.graph.nodes._bounds`); dispatch refuses them with that code."""
    turn_calls: list[str]
    awaiting: list[str]
    budget: Budget
    outcomes: Annotated[dict[str, Outcome], merge_dicts]
    """Each call's outcome, keyed as ``calls`` keys its record."""
    status: TaskStatus
    status_reason: str
    call_counts: Annotated[dict[str, int], merge_dicts]
    validation_failures: Annotated[dict[str, int], merge_dicts]
    deadline_at: str
    trace: list[str]
    """``[trace_id_hex, span_id_hex, flags_hex]`` of the latest model span (`toolgate.telemetry`):
    the execute node links tool spans to it and the next model span continues its trace."""
    review: dict[str, Any]
    """What became of the decisions sent with the latest resume (`toolgate.graph.review.hitl`): per
    proposal, recorded or refused with a code and message; shown again in the next interrupt."""
    state_version: int
    """The version of this state's schema (`toolgate.graph.seals.versions`), stamped by the guard;
    a thread saved before states had a version has none and is version 1."""
    unaudited_response: int | None
    """A token naming the latest model turn's ``model.response`` event while it waits to be linked
    with the thread's next audited step (`toolgate.graph.nodes.response_audit`); None once it is
    in the audit log."""
    seal: dict[str, str]
    """One HMAC per key above, made by the last node that ran (`toolgate.graph.seals.seal`): state is
    untrusted input, and a key changed outside the gateway no longer matches its MAC."""


GROUPED_KEYS: tuple[str, ...] = (
    "principal",
    "release",
    "screened",
    "turn_calls",
    "budget",
    "call_counts",
    "validation_failures",
    "deadline_at",
    "trace",
    "state_version",
    "unaudited_response",
    "seal",
)
"""The keys of `GatewayState` stored together in the ``bookkeeping`` channel of `StoredState`: set
when a thread starts or changed by the gateway's own steps (the seal at every step), and read by
clients rarely. Every channel ever written carries a version (about 60 bytes) in every later
checkpoint and, unless it is a delta channel, its value in each checkpoint; these twelve keys in one
delta channel carry one version, and each step's write holds only the keys it changed. Clients read
them with `gateway_state`."""


FIELD_WRITTEN_KEYS: tuple[str, ...] = ("budget",)
"""Grouped keys written to ``bookkeeping`` field by field: a record of fixed fields (`Budget`)
whose counters change at most steps while its limits never do."""


def merge_writes(bookkeeping: dict[str, Any], writes: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Reducer of the ``bookkeeping`` channel: each write's keys replace the ones before (the
    gateway writes a key's whole new value), except that the fields written of a
    `FIELD_WRITTEN_KEYS` record replace those fields; batching-invariant, as a delta channel's
    replay needs."""
    result = dict(bookkeeping)
    for write in writes:
        for key, value in write.items():
            held_value = result.get(key)
            if key in FIELD_WRITTEN_KEYS and isinstance(value, dict) and isinstance(held_value, dict):
                result[key] = {**held_value, **value}
            else:
                result[key] = value
    return result


BOOKKEEPING_SNAPSHOT_WRITES = 100
"""Writes to ``bookkeeping`` between two checkpoints that hold all of it (two or three a call)."""


class StoredState(GatewayState, total=False):
    """`GatewayState` as LangGraph stores it: the graph's schema, what ``values`` and a run's
    output hold. The `GROUPED_KEYS` live in ``bookkeeping`` (a thread saved before they did holds
    them as channels of their own, moved into it by the thread's next step); `gateway_state`
    reads them back. Nodes and routes see `GatewayState` (`toolgate.graph.stored`)."""

    bookkeeping: Annotated[
        dict[str, Any], DeltaChannel(merge_writes, snapshot_frequency=BOOKKEEPING_SNAPSHOT_WRITES)
    ]
    """The `GROUPED_KEYS`, by key; a delta channel (a checkpoint holds what its step changed)."""


def gateway_state(values: Any) -> dict[str, Any]:
    """The `GatewayState` a stored state holds (``values`` of a thread, a run's output, a node's
    input): each of the `GROUPED_KEYS` as a key of its own, read from ``bookkeeping`` unless the
    key's own channel holds a value (`held`: a thread saved before the keys were grouped, or a client's
    write: the seal covers this view, so a value written there is checked like any other)."""
    state = dict(values)
    bookkeeping = state.pop("bookkeeping", None) or {}
    for key in GROUPED_KEYS:
        if key in bookkeeping and not held(state, key):
            state[key] = bookkeeping[key]
    return state


def held(values: Any, key: str) -> bool:
    """Whether ``values`` holds something under ``key``: not missing, None or an empty dict or
    list (what a merge channel never written, or written empty, reads as)."""
    value = values.get(key)
    return value is not None and not (type(value) in (dict, list) and not value)


KEYS_ADDED_IN: dict[str, int] = {"state_version": 2, "unaudited_response": 3}
"""The state version that added each key of `GatewayState` younger than version 1: a seal made
for an older version has no MAC for it (`toolgate.graph.seals.seal`). Append a line with every new key,
and declare the key after every older one but ``seal`` (a seal's tags are in key order)."""


__all__ = [
    "BOOKKEEPING_SNAPSHOT_WRITES",
    "FIELD_WRITTEN_KEYS",
    "GROUPED_KEYS",
    "KEYS_ADDED_IN",
    "MESSAGE_SNAPSHOT_WRITES",
    "Budget",
    "CallPhase",
    "CallRecord",
    "GatewayState",
    "Outcome",
    "StoredState",
    "TaskStatus",
    "add_message_writes",
    "gateway_state",
    "held",
    "merge_call_records",
    "merge_dicts",
    "merge_writes",
]
