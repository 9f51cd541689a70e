"""Checkpointed state is untrusted input: trusted code seals what it decided, and checks the seal.

Any client can rewrite a thread's state: ``update_state`` in process, ``threads.update_state``
on the LangGraph server, ``Command(update=...)`` on resume, or extra keys in a run's input. So
every node that changes the thread ends by sealing it: one HMAC per key of `GatewayState`, under
the store's state key and bound to the thread id (`seal_update`). Every node starts by checking
the seal (`tampered_keys`); a key whose value changed outside the gateway is named, and nothing
runs because that state says so.

Human and system messages are the user's own untrusted input and may be added by any run. The
model's messages and the gateway's tool results are sealed as an ordered list of digests, so a
call the model never made, or a result the gateway never gave, is noticed too.

A seal covers the keys of the state version it sealed (`sealed_version`): a thread sealed before
a key existed has no MAC for it, and that key must still be empty. The guard then brings the
verified state to the current version (`toolgate.graph.state_versions`) and seals the result.
"""

from __future__ import annotations

import hashlib
import json
import threading
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from functools import cache
from typing import Annotated, Any, get_args, get_origin, get_type_hints

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langgraph.types import Overwrite

from toolgate.graph.state import KEYS_ADDED_IN, GatewayState
from toolgate.store.keys import Keyring

SEAL_VERSION = "2"
"""The sealed form, named in the seal and in each of its MACs: bumped when the form changes; a
seal of another form does not verify (but see `LEGACY_SEAL_VERSION`)."""

LEGACY_SEAL_VERSION = "1"
"""The form of seals made before states had a version: MACs as in form 2 but naming form 1, and
none for ``state_version``. Such a seal verifies the version-1 state it sealed, so a thread saved
then is migrated, not refused. Each MAC names its form, so a form-2 seal cannot pass for form 1
by losing its ``state_version`` MAC."""


@cache
def _reducers() -> dict[str, Callable[[Any, Any], Any] | None]:
    """Every state key with its reducer (None: a write replaces the value)."""
    out: dict[str, Callable[[Any, Any], Any] | None] = {}
    for key, hint in get_type_hints(GatewayState, include_extras=True).items():
        reducer = None
        if get_origin(hint) is Annotated:
            reducer = next((m for m in get_args(hint)[1:] if callable(m)), None)
        out[key] = reducer
    return out


def sealed_keys() -> tuple[str, ...]:
    """The keys of `GatewayState` the seal covers (all of them but the seal itself)."""
    return tuple(k for k in _reducers() if k != "seal")


_DIGESTS: dict[int, tuple[weakref.ref[BaseMessage], str]] = {}
"""Digests of message objects still alive in this process. A node sees the same message objects
as the node before it in the same run, so each message is digested once per run, not once per
node; a rewritten thread arrives as new objects, digested afresh."""


def message_digest(message: BaseMessage) -> str:
    """SHA-256 of what the seal covers of one message (cached per live object)."""
    key = id(message)
    known = _DIGESTS.get(key)
    if known is not None and known[0]() is message:
        return known[1]
    digest = _message_digest(message)

    def forget(_: weakref.ref[BaseMessage]) -> None:
        _DIGESTS.pop(key, None)

    _DIGESTS[key] = (weakref.ref(message, forget), digest)
    return digest


def _message_digest(message: BaseMessage) -> str:
    if isinstance(message, ToolMessage) and isinstance(message.content, str):
        # the common case, without a JSON encoder: fields joined by a separator no field contains
        fields = ("tool", message.id, message.tool_call_id, message.status, message.name, message.content)
        text = "\x1f".join("" if f is None else str(f).replace("\x1f", "\\x1f") for f in fields)
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    form: dict[str, Any] = {"type": message.type, "id": message.id, "content": message.content}
    if isinstance(message, AIMessage):
        form["tool_calls"] = [[c.get("id"), c.get("name"), c.get("args")] for c in message.tool_calls]
        form["invalid_tool_calls"] = [
            [c.get("id"), c.get("name"), c.get("args"), c.get("error")] for c in message.invalid_tool_calls
        ]
    if isinstance(message, ToolMessage):
        form["tool_call_id"] = message.tool_call_id
        form["status"] = message.status
        form["name"] = message.name
    text = json.dumps(form, sort_keys=True, default=repr, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class Sealer:
    """Seals and checks the state of one thread during one node run.

    The node's pre-state is sealed once to check it; sealing the post-state then reuses the MACs
    of the keys the node did not write."""

    def __init__(self, keys: Keyring, thread_id: str) -> None:
        self.keys = keys
        self.thread_id = thread_id
        self._checked: tuple[Mapping[str, Any], dict[str, str]] | None = None
        self._version: tuple[Mapping[str, Any], int | None] | None = None
        self._recent_key = (thread_id, keys.key("state"))

    def _value(self, key: str, state: Mapping[str, Any]) -> Any:
        value = state.get(key)
        if key == "messages":
            return [message_digest(m) for m in value or () if isinstance(m, AIMessage | ToolMessage)]
        return value

    def _mac(self, key: str, state: Mapping[str, Any], form: str = SEAL_VERSION) -> str:
        value = {"v": form, "thread": self.thread_id, "key": key, "value": self._value(key, state)}
        try:
            # deterministic for the values the checkpointer round-trips (types and floats kept as
            # they are); the C encoder keeps sealing a large thread cheap
            text = json.dumps(
                value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
            )
        except (TypeError, ValueError):
            # a value JSON cannot hold (NaN, a foreign object) was never written by trusted code
            return "unsealable"
        return self.keys.mac_text("state", text)

    def seal_of(self, state: Mapping[str, Any], *, only: set[str] | None = None) -> dict[str, str]:
        """The seal of ``state``: version and one MAC per sealed key (``only`` these recomputed)."""
        base = self._checked[1] if only is not None and self._checked is not None else {}
        return {
            "v": SEAL_VERSION,
            **{
                k: (self._mac(k, state) if only is None or k in only or k not in base else base[k])
                for k in sealed_keys()
            },
        }

    def sealed_version(self, state: Mapping[str, Any]) -> int | None:
        """The state version ``state``'s seal vouches for: 1 for a seal of the legacy form (made
        before states had a version), else the ``state_version`` its MAC verifies (1 when that
        is empty). None when the seal vouches for none: missing, of an unknown form, or with a
        ``state_version`` it does not verify."""
        if self._version is not None and self._version[0] is state:
            return self._version[1]
        version = self._sealed_version(state)
        self._version = (state, version)
        return version

    def _sealed_version(self, state: Mapping[str, Any]) -> int | None:
        seal = state.get("seal")
        if not isinstance(seal, Mapping):
            return None
        if seal.get("v") == LEGACY_SEAL_VERSION:
            return 1
        if seal.get("v") != SEAL_VERSION:
            return None
        if seal.get("state_version") != self._expected_mac(
            "state_version", state, _RECENT.get(self._recent_key)
        ):
            return None
        version = state.get("state_version")
        if version is None:
            return 1
        return version if type(version) is int else None

    def _expected_mac(
        self, key: str, state: Mapping[str, Any], known: tuple[dict[str, Any], dict[str, str]] | None
    ) -> str:
        """The current form's MAC of ``state``'s ``key``: the one the last node of this process
        computed (``known``) when the value is made of the very objects it sealed, else afresh."""
        if known is not None and _same_objects(state.get(key), known[0].get(key)):
            return known[1][key]
        return self._mac(key, state)

    def tampered_keys(self, state: Mapping[str, Any]) -> list[str]:
        """The keys of ``state`` that changed outside the gateway since it was last sealed.

        A thread never sealed (a new one) may hold only the user's input: human messages. A key
        younger than the state version its seal vouches for has no MAC and must be empty.
        """
        self._checked = None
        seal = state.get("seal")
        if not isinstance(seal, Mapping):
            if seal is not None:
                return ["seal"]
            return [k for k in sealed_keys() if self._value(k, state)]
        form = seal.get("v")
        if form not in (SEAL_VERSION, LEGACY_SEAL_VERSION):
            return ["seal"]
        version = self.sealed_version(state)
        covered = [
            k for k in sealed_keys() if version is None or KEYS_ADDED_IN.get(k, 1) <= version or k in seal
        ]
        if not all(isinstance(seal.get(k), str) for k in covered):
            return ["seal"]
        if form == SEAL_VERSION:
            known = _RECENT.get(self._recent_key)
            expected = {k: self._expected_mac(k, state, known) for k in covered}
            # sealing the node's update reuses these (current form only)
            self._checked = (state, {"v": SEAL_VERSION, **expected})
        else:
            expected = {k: self._mac(k, state, form) for k in covered}
        return [
            k
            for k in sealed_keys()
            if (seal.get(k) != expected[k] if k in expected else state.get(k) is not None)
        ]

    def seal_update(self, state: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
        """``update`` with the seal of the state it produces."""
        update = lean_update(state, update)
        after = apply_update(state, update)
        reuse = self._checked is not None and self._checked[0] is state
        seal = self.seal_of(after, only=set(update) if reuse else None)
        _RECENT.put(self._recent_key, ({k: after.get(k) for k in sealed_keys()}, seal))
        return lean_update(state, {**update, "seal": seal})


def _same_objects(value: Any, known: Any) -> bool:
    """True when ``value`` is made of the very objects the last node of this process sealed (or
    is an equal immutable scalar of the same type), so its MAC is the one computed then.

    A client's change (``update_state``, a resume's update, a reloaded checkpoint) always arrives
    as new objects and is MACed afresh; LangGraph's own reducers rebuild the list or dict around
    the same elements, which is why containers compare element by element."""
    if value is known:
        return True
    if type(value) is not type(known):
        return False
    if isinstance(value, str | int | float):
        return bool(value == known)
    if isinstance(value, list):
        return len(value) == len(known) and all(a is b for a, b in zip(value, known, strict=True))
    if isinstance(value, dict):
        return value.keys() == known.keys() and all(value[k] is known[k] for k in value)
    return False


class _RecentSeals:
    """Per thread, the values the last node of this process sealed and their MACs: the next node
    of the same run checks the seal without encoding unchanged values again (bounded; a thread
    not in it is checked in full)."""

    SIZE = 1024

    def __init__(self) -> None:
        self._items: OrderedDict[tuple[str, bytes], tuple[dict[str, Any], dict[str, str]]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, bytes]) -> tuple[dict[str, Any], dict[str, str]] | None:
        with self._lock:
            return self._items.get(key)

    def put(self, key: tuple[str, bytes], entry: tuple[dict[str, Any], dict[str, str]]) -> None:
        with self._lock:
            self._items[key] = entry
            self._items.move_to_end(key)
            while len(self._items) > self.SIZE:
                self._items.popitem(last=False)


_RECENT = _RecentSeals()


def seal_of(keys: Keyring, thread_id: str, state: Mapping[str, Any]) -> dict[str, str]:
    """The seal of ``state`` for ``thread_id``: version and one MAC per sealed key."""
    return Sealer(keys, thread_id).seal_of(state)


def tampered_keys(keys: Keyring, thread_id: str, state: Mapping[str, Any]) -> list[str]:
    """The keys of ``state`` changed outside the gateway since it was last sealed (see `Sealer`)."""
    return Sealer(keys, thread_id).tampered_keys(state)


def apply_update(state: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """The state LangGraph will hold after ``update`` (each key through its reducer, or replaced
    by an `Overwrite`)."""
    reducers = _reducers()
    after = dict(state)
    for key, value in update.items():
        reducer = reducers.get(key)
        if isinstance(value, Overwrite):
            after[key] = value.value
            continue
        if key == "messages":
            for message in value or ():
                if isinstance(message, BaseMessage) and message.id is None:
                    message.id = str(uuid.uuid4())  # the id add_messages would give it, chosen here
        after[key] = reducer(state.get(key), value) if reducer is not None and key in state else value
    return after


def chain_updates(
    state: Mapping[str, Any], first: Mapping[str, Any], second: Mapping[str, Any]
) -> dict[str, Any]:
    """One update with the effect of ``first`` and then ``second`` on ``state``: a reducer channel
    both write is written once, as an `Overwrite` of the value both leave."""
    reducers = _reducers()
    chained = {**first, **second}
    both = [k for k in first.keys() & second.keys() if reducers.get(k) is not None]
    if both:
        after = apply_update(apply_update(state, first), second)
        for key in both:
            if not isinstance(second[key], Overwrite):
                chained[key] = Overwrite(after[key])
    return chained


def lean_update(state: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """``update`` without the keys that would leave their channel as it is: a channel that did
    not change is not written again (each write is a new channel version in the checkpoint).

    A merge written as the one-key dict ``{"__overwrite__": ...}`` (a model may name a call
    ``__overwrite__``) would be taken by LangGraph for its overwrite sentinel: such a merge is
    made here and written as an explicit `Overwrite` of the merged value instead."""
    reducers = _reducers()
    lean: dict[str, Any] = {}
    for key, value in update.items():
        reducer = reducers.get(key)
        if isinstance(value, Overwrite):
            lean[key] = value
        elif reducer is None:
            if key not in state or state[key] != value:
                lean[key] = value
        elif key == "messages":
            if value:
                lean[key] = value
        elif isinstance(value, Mapping):
            current = state.get(key) or {}
            if any(k not in current or current[k] != v for k, v in value.items()):
                lean[key] = Overwrite(reducer(current, value)) if OVERWRITE_KEY in value else value
        else:
            lean[key] = value
    return lean


OVERWRITE_KEY = "__overwrite__"
"""LangGraph's sentinel key: a one-key dict under it replaces a reducer channel's value."""


def seal_update(
    keys: Keyring, thread_id: str, state: Mapping[str, Any], update: Mapping[str, Any]
) -> dict[str, Any]:
    """``update`` with the seal of the state it produces."""
    return Sealer(keys, thread_id).seal_update(state, update)


__all__ = [
    "LEGACY_SEAL_VERSION",
    "SEAL_VERSION",
    "Sealer",
    "apply_update",
    "chain_updates",
    "lean_update",
    "seal_of",
    "seal_update",
    "sealed_keys",
    "tampered_keys",
]
