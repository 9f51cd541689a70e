"""The MACs the last node of this process sealed, per thread, for the next node's seal check.

Every node checks the seal of the state it starts from, and a large thread is costly to encode
and MAC again. The next node of the same run sees the very objects the last one sealed, so their
MACs can be reused; a client's change (``update_state``, a resume's update, a reloaded checkpoint)
always arrives as new objects and is MACed afresh. This is only a cache: the seal's meaning lives
in `toolgate.graph.seals.seal`, and a thread missing here (evicted, another process) is checked in full.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
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


__all__ = ["RecentSeals", "SealedEntry", "known_mac", "known_macs"]
