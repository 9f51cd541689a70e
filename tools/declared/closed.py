"""Closed by default: the keys a call may carry where a published schema leaves objects open.

Published tool definitions rarely say ``additionalProperties: false``; JSON Schema then accepts
any key, so a ``send_email`` call could carry ``"forward_all_to": ...`` beside its declared
fields and the function would receive it. A tool loaded as published (``open_objects`` not
chosen, see `toolgate.tools.declared.tools`) is therefore closed at call time, at every depth,
without rewriting the schema it was published with: a key is declared when a schema that applies
at its place names it in ``properties`` (through local ``$ref`` and ``anyOf``/``oneOf``/``allOf``
branches) or types it with a non-empty ``additionalProperties`` schema (a map such as string
labels). Every other key is undeclared, and the call is refused (``undeclared_argument``) unless
the operator named the place as open (``open_paths``, in `toolgate.tools.schema.walk`'s path
syntax: ``metadata``, ``items[].extra``). An open place accepts any keys at any depth below it.
Where the published schema itself says ``additionalProperties: false`` the refusal is the
schema's own (``schema_invalid``), as it always was.

An untyped value (``true``, ``{}``) or an array without ``items`` may still hold JSON objects:
their keys are undeclared too, so such a value is free-form only at an open path.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from toolgate.tools.schema.walk import path_matches, resolve_pointer

MAX_DEPTH = 64
"""Values nested deeper are not walked (the validator's own limits refuse such calls first)."""

_BRANCHES = ("anyOf", "oneOf", "allOf")

Place = tuple[tuple[str, bool], ...]
"""An argument place as `toolgate.tools.schema.walk.path_matches` reads it."""


def undeclared_keys(root: Mapping[str, Any], value: Any, open_paths: Iterable[str]) -> list[str]:
    """Dotted paths (``recipient.forward_to``, ``items.0.extra``) of every undeclared key in the
    call ``value`` of the tool whose parameters are ``root``, outside the ``open_paths``."""
    patterns = tuple(open_paths)
    return list(_walk(root, [root], value, (), "", patterns, 0))


def _views(root: Mapping[str, Any], nodes: Iterable[Any]) -> list[Mapping[str, Any]]:
    """Every schema that applies at one place: the nodes, their ``$ref`` targets and branches."""
    out: list[Mapping[str, Any]] = []
    stack = [(node, 0) for node in nodes]
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, Mapping) or depth > 32 or any(node is seen for seen in out):
            continue
        out.append(node)
        ref = node.get("$ref")
        if isinstance(ref, str):
            with contextlib.suppress(KeyError):  # checked at registration; a dangling one applies nothing
                stack.append((resolve_pointer(root, ref), depth + 1))
        for keyword in _BRANCHES:
            branches = node.get(keyword)
            if isinstance(branches, list):
                stack.extend((branch, depth + 1) for branch in branches)
    return out


def _walk(
    root: Mapping[str, Any],
    nodes: list[Any],
    value: Any,
    place: Place,
    path: str,
    open_paths: tuple[str, ...],
    depth: int,
) -> Iterator[str]:
    if depth > MAX_DEPTH or any(path_matches(pattern, place) for pattern in open_paths):
        return
    views = _views(root, nodes)
    if isinstance(value, Mapping):
        # a published ``additionalProperties: false`` is the schema's own refusal (``schema_invalid``)
        closed = any(v.get("additionalProperties") is False for v in views)
        for key, item in value.items():
            name = str(key)
            here = (*place, (name, False))
            shown = "".join(ch if ch.isprintable() else "?" for ch in name[:64]) + (
                "..." if len(name) > 64 else ""
            )
            where = f"{path}.{shown}" if path else shown
            declared = [v["properties"][name] for v in views if _names(v.get("properties"), name)]
            maps = [v["additionalProperties"] for v in views if _is_map(v.get("additionalProperties"))]
            if declared or maps:
                yield from _walk(root, declared or maps, item, here, where, open_paths, depth + 1)
            elif not closed and not any(path_matches(pattern, here) for pattern in open_paths):
                yield where
    elif isinstance(value, list):
        items = [v["items"] for v in views if isinstance(v.get("items"), Mapping)]
        for index, item in enumerate(value[:1000]):
            where = f"{path}.{index}" if path else str(index)
            yield from _walk(root, items, item, (*place, ("", True)), where, open_paths, depth + 1)


def _names(properties: Any, name: str) -> bool:
    return isinstance(properties, Mapping) and name in properties


def _is_map(extra: Any) -> bool:
    """A typed ``additionalProperties`` schema: the published schema declares every key's value."""
    return isinstance(extra, Mapping) and bool(extra)


__all__ = ["MAX_DEPTH", "undeclared_keys"]
