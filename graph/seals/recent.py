"""The MACs the last node of this process sealed, per thread, for the next node's seal check.

Every node checks the seal of the state it starts from, and a large thread is costly to encode
and MAC again. The next node of the same run sees the very objects the last one sealed, so their
MACs can be reused; a client's change (``update_state``, a resume's update, a reloaded checkpoint)
always arrives as new objects and is MACed afresh. This is only a cache: the seal's meaning lives
in `toolgate.graph.seals.seal`, and a thread missing here (evicted, another process) is checked in full.
"""

from __future__ import annotations

import operator
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

SealedEntry = tuple[dict[str, Any], dict[str, str], dict[str, str]]
"""The values the last node sealed, by key, their full MACs (by key, with the form under
``"v"``), and the seal it wrote for them (as the state holds it)."""


class RecentSeals:
    """Per thread, the values the last node of this process sealed and their MACs: the next node
    of the same run checks the seal without encoding unchanged values again (bounded; a thread
    not in it is checked in full)."""

    SIZE = 1024

    def __init__(self) -> None:
        self._items: OrderedDict[tuple[str, bytes], SealedEntry] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, bytes]) -> SealedEntry | None:
        with self._lock:
            return self._items.get(key)

    def put(self, key: tuple[str, bytes], entry: SealedEntry) -> None:
        with self._lock:
            self._items[key] = entry
            self._items.move_to_end(key)
            while len(self._items) > self.SIZE:
                self._items.popitem(last=False)


class RecentDigests:
    """Per thread, the message list the last seal of this process digested and its digests: the
    next seal of the thread digests only the messages after the part of the list that is made of
    the very same objects in the same order (a step appends its messages; LangGraph's reducer
    rebuilds the list around the same objects). Each message's digest is cached per live object
    already (`toolgate.graph.seals.seal.message_digest`); this spares the walk that looks every
    one of them up again, several times per node, over the whole conversation. Bounded; a thread
    not in it is digested message by message."""

    SIZE = 1024

    def __init__(self) -> None:
        self._items: OrderedDict[tuple[str, bytes], tuple[list[Any], list[str]]] = OrderedDict()
        self._lock = threading.Lock()

    def digests(
        self, key: tuple[str, bytes], messages: Sequence[Any], digest: Callable[[Any], str | None]
    ) -> list[str]:
        """The digests of ``messages`` in order, leaving out those ``digest`` gives None for."""
        with self._lock:
            known = self._items.get(key)
        listed: list[Any] = list(messages)
        start, digests = 0, []
        if known is not None and len(known[0]) <= len(listed) and all(map(operator.is_, known[0], listed)):
            start, digests = len(known[0]), list(known[1])
        for message in listed[start:]:
            value = digest(message)
            if value is not None:
                digests.append(value)
        with self._lock:
            self._items[key] = (listed, digests)
            self._items.move_to_end(key)
            while len(self._items) > self.SIZE:
                self._items.popitem(last=False)
        return list(digests)


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
        return len(value) == len(known) and all(map(operator.is_, value, known))
    if isinstance(value, dict):
        return value.keys() == known.keys() and all(value[k] is known[k] for k in value)
    return False


def known_macs(
    known: SealedEntry | None, state: Mapping[str, Any], keys: Sequence[str]
) -> dict[str, str] | None:
    """The full MACs ``known`` holds when ``state`` is exactly what was sealed then: its seal the
    one written then (equal to it) and the value of every key in ``keys`` made of the very objects
    sealed then (see `_same_objects`); else None. Such a state passes the seal check as it did
    when it was sealed (the same MACs, so the same tags and ``all``), without computing any of it."""
    if known is None or state.get("seal") != known[2]:
        return None
    values = known[0]
    if all(_same_objects(state.get(k), values.get(k)) for k in keys):
        return known[1]
    return None


def known_mac(known: SealedEntry | None, key: str, value: Any) -> str | None:
    """The MAC ``known`` holds for ``key`` when ``value`` is made of the very objects sealed then
    (see `_same_objects`), else None: the caller MACs ``value`` afresh."""
    if known is not None and _same_objects(value, known[0].get(key)):
        return known[1][key]
    return None


__all__ = ["RecentDigests", "RecentSeals", "SealedEntry", "known_mac", "known_macs"]
