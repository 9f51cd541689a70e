"""What a node's update does to the thread's state, computed by trusted code before LangGraph does it.

The guard must seal the state a node's update produces, the migrations chain their updates with
the node's, and the model node answers from the state its own update leaves; all of them need
LangGraph's reducer semantics (each key through its reducer, an `Overwrite` replacing the value,
ids given to new messages) reproduced here, and updates kept lean so an unchanged channel is not
written again. None of this is about sealing, so it is apart from `toolgate.graph.seals.seal`, which
uses it to know what it seals.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from functools import cache
from typing import Annotated, Any, get_args, get_origin, get_type_hints

from langchain_core.messages import BaseMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.types import Overwrite

from toolgate.graph.state import GatewayState


@cache
def state_reducers() -> dict[str, Callable[[Any, Any], Any] | None]:
    """Every state key with its reducer of one write (None: a write replaces the value); for a
    `DeltaChannel`, its batch reducer given that one write."""
    out: dict[str, Callable[[Any, Any], Any] | None] = {}
    for key, hint in get_type_hints(GatewayState, include_extras=True).items():
        reducer = None
        if get_origin(hint) is Annotated:
            for meta in get_args(hint)[1:]:
                if isinstance(meta, DeltaChannel):
                    reducer = _one_write(meta.reducer)
                    break
                if callable(meta):
                    reducer = meta
                    break
        out[key] = reducer
    return out


def _one_write(batch: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def reduce(left: Any, right: Any) -> Any:
        return batch(left if left is not None else [], [right])

    return reduce


def apply_update(state: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """The state LangGraph will hold after ``update`` (each key through its reducer, or replaced
    by an `Overwrite`)."""
    reducers = state_reducers()
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
    reducers = state_reducers()
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
    not change is not written again (each write is a new channel version in the checkpoint), and
    a channel never written is not written empty (``None``, ``{}``, ``[]``: each channel ever
    written has a version in every later checkpoint; readers take a missing key as empty).

    A merge written as the one-key dict ``{"__overwrite__": ...}`` (a model may name a call
    ``__overwrite__``) would be taken by LangGraph for its overwrite sentinel: such a merge is
    made here and written as an explicit `Overwrite` of the merged value instead."""
    reducers = state_reducers()
    lean: dict[str, Any] = {}
    for key, value in update.items():
        reducer = reducers.get(key)
        if isinstance(value, Overwrite):
            lean[key] = value
        elif reducer is None:
            if (state[key] != value) if key in state else not _empty(value):
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


def _empty(value: Any) -> bool:
    return value is None or (type(value) in (dict, list) and not value)


OVERWRITE_KEY = "__overwrite__"
"""LangGraph's sentinel key: a one-key dict under it replaces a reducer channel's value."""


__all__ = ["OVERWRITE_KEY", "apply_update", "chain_updates", "lean_update", "state_reducers"]
