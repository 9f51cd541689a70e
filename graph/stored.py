"""Nodes and routes see `GatewayState`; LangGraph stores `StoredState`.

The keys of `toolgate.graph.state.GROUPED_KEYS` are one ``bookkeeping`` channel in the checkpoint
(fewer channels: each carries a version in every later checkpoint) and keys of their own to every
node, route and seal. `StoredNode` gives a node the `GatewayState` view of what LangGraph hands it
and turns the keys of its (sealed) update back into one ``bookkeeping`` write; `stored_route` does
the reading half for a conditional edge. The seal covers the view (`toolgate.graph.seals.seal`),
so where a key is stored changes nothing it vouches for: a thread saved before the keys were
grouped verifies as it is, and its next step moves its keys into ``bookkeeping`` (its old
channels are written empty).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, get_type_hints

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime
from langgraph.types import Overwrite

from toolgate.graph.context import Context
from toolgate.graph.seals.updates import apply_update, state_reducers
from toolgate.graph.state import (
    FIELD_WRITTEN_KEYS,
    GROUPED_KEYS,
    StoredState,
    gateway_state,
    held,
    merge_writes,
)

Node = Callable[..., dict[str, Any]]


def stored_update(
    stored: Mapping[str, Any], view: Mapping[str, Any], update: Mapping[str, Any]
) -> dict[str, Any]:
    """``update`` (made for the view ``view`` of ``stored``) as LangGraph stores it: the grouped
    keys it writes as one ``bookkeeping`` write of their new values (of a budget, the fields that
    changed: `_changed`). A key still in a channel of its own (an older thread, or a client's
    write, which the seal has judged by now) is moved into ``bookkeeping`` whole, its channel
    written empty (``None``, or an `Overwrite` with ``{}`` where the channel merges its writes):
    that step writes all of ``bookkeeping`` as an `Overwrite`, so a moved record replaces the one
    held instead of merging field by field into it. A ``calls`` record that moves a call already
    held on is written as the fields that changed (`moved_calls`)."""
    calls = update.get("calls")
    if isinstance(calls, Mapping) and calls:
        update = {**update, "calls": moved_calls(stored.get("calls") or {}, calls)}
    written = [k for k in GROUPED_KEYS if k in update]
    legacy = [k for k in GROUPED_KEYS if held(stored, k)]
    if not update or not (written or legacy):
        return dict(update)
    after = apply_update(view, {k: update[k] for k in written})
    changed = {k: _changed(k, view.get(k), after.get(k)) for k in written if k not in legacy}
    out = {k: v for k, v in update.items() if k not in GROUPED_KEYS}
    if legacy:
        reducers = state_reducers()
        out.update({k: Overwrite({}) if reducers.get(k) is not None else None for k in legacy})
        held_now = merge_writes(stored.get("bookkeeping") or {}, [changed])
        out["bookkeeping"] = Overwrite({**held_now, **{k: after.get(k) for k in legacy}})
    else:
        out["bookkeeping"] = changed
    return out


def moved_calls(held_calls: Mapping[str, Any], written: Mapping[str, Any]) -> dict[str, Any]:
    """A ``calls`` write as it is stored: a record that moves a call already held on (its phase,
    a replacement proposal) holds only the fields that changed, without its ``call_id``
    (`toolgate.graph.state.merge_call_records` merges it into the record held); a new record, or
    one that drops a field, is written whole. Execute marking a read done writes ``{"phase":
    "done"}`` instead of the whole record again (its arguments included)."""
    out: dict[str, Any] = {}
    for call_id, record in written.items():
        before = held_calls.get(call_id)
        moved = (
            isinstance(before, dict)
            and isinstance(record, dict)
            and before.get("call_id") == record.get("call_id") == call_id
            and before.keys() <= record.keys()
        )
        if moved:
            assert isinstance(before, dict)
            out[call_id] = {f: v for f, v in record.items() if f not in before or before[f] != v}
        else:
            out[call_id] = record
    return out


def _changed(key: str, before: Any, after: Any) -> Any:
    """What ``bookkeeping`` is written for ``key`` going from ``before`` to ``after``: the new
    value, or for a `FIELD_WRITTEN_KEYS` record the fields that changed (`merge_writes`)."""
    fields = key in FIELD_WRITTEN_KEYS and isinstance(before, dict) and isinstance(after, dict)
    if fields and before.keys() <= after.keys():  # a record's fields are never removed
        return {f: v for f, v in after.items() if f not in before or before[f] != v}
    return after


class StoredNode:
    """A node (which takes the state, runtime and config: `toolgate.graph.seals.guard.GuardedNode`
    or a routed one) run on the `GatewayState` view, its update stored (`stored_update`).

    A callable object for what compiling costs (see `GuardedNode`); LangGraph reads the signature
    of `__call__` to inject runtime and config."""

    def __init__(self, name: str, node: Node) -> None:
        self.name = name
        """The node's name in the graph."""
        self.node = node
        """The node run on the view."""
        self.__name__ = name
        self.__doc__ = node.__doc__

    def __repr__(self) -> str:
        return f"StoredNode({self.name!r})"

    def __call__(
        self, state: StoredState, runtime: Runtime[Context], config: RunnableConfig
    ) -> dict[str, Any]:
        view = gateway_state(state)
        return stored_update(state, view, self.node(view, runtime, config))


def stored_node(name: str, node: Node) -> Node:
    """``node`` run on the `GatewayState` view, its update stored: a `StoredNode`."""
    return StoredNode(name, node)


def stored_route(route: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``route`` (a conditional edge: a function of the state) run on the `GatewayState` view of
    the whole `StoredState`; its return annotation (the targets LangGraph draws) is kept."""

    @functools.wraps(route)
    def on_view(state: Mapping[str, Any]) -> Any:
        return route(gateway_state(state))

    # LangGraph reads the edge's channels from the state's annotation, its targets from the return's
    on_view.__annotations__ = {"state": StoredState, "return": get_type_hints(route).get("return", Any)}
    return on_view


__all__ = ["StoredNode", "moved_calls", "stored_node", "stored_route", "stored_update"]
