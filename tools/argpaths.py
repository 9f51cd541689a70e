"""Paths into a call's arguments: ``order_id``, ``payment.method_id``, ``items[].sku``.

Ownership declarations, audit fields and registration checks name arguments this way, so a
resource id nested in an object or carried by every item of a list can be declared as plainly as
a top-level one. A path names a place in the schema; `values_at` lists what a call put there.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

_SEGMENT = re.compile(r"^[^.\[\]]+(\[\])?$")


def parse_path(path: str) -> list[tuple[str, bool]]:
    """The segments of ``path`` as (name, is_list) pairs; `ValueError` when it is not a path."""
    if not path or path.strip() != path:
        raise ValueError(f"not an argument path: {path!r}")
    segments = []
    for part in path.split("."):
        if not _SEGMENT.match(part):
            raise ValueError(f"not an argument path: {path!r}")
        segments.append((part.removesuffix("[]"), part.endswith("[]")))
    return segments


def values_at(arguments: Mapping[str, Any], path: str) -> list[Any]:
    """Every value a call put at ``path`` (none when the path is absent or null on the way)."""
    return list(_walk(arguments, parse_path(path)))


def _walk(node: Any, segments: list[tuple[str, bool]]) -> Iterator[Any]:
    if not segments:
        if node is not None:
            yield node
        return
    (name, is_list), rest = segments[0], segments[1:]
    if not isinstance(node, Mapping) or node.get(name) is None:
        return
    value = node[name]
    if not is_list:
        yield from _walk(value, rest)
        return
    if isinstance(value, list):
        for item in value:
            yield from _walk(item, rest)


__all__ = ["parse_path", "values_at"]
