"""Every argument a JSON Schema declares, named by its path, for checks made once at registration.

Paths use the syntax of `toolgate.tools.argpaths`: dotted property names, ``[]`` after an array
(``loans[].principal``), and ``*`` for the values of an open object's undeclared keys
(``metadata.*.owner``). The registration checks (identity names, generic executors, audit and
resource arguments) and the identity exemptions of `ToolSpec` all speak this one syntax.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import unquote

MAX_DEPTH = 32
"""Deeper schemas are not walked further (a recursive ``$ref`` is followed once per path)."""

_SAME_PLACE = ("anyOf", "oneOf", "allOf", "then", "else", "if")
_ITEMS = ("items", "prefixItems", "contains", "unevaluatedItems", "additionalItems")
_ANY_KEY = ("additionalProperties", "unevaluatedProperties")


def resolve_pointer(root: Any, ref: str) -> Any:
    """The subschema a local ``$ref`` (``#``, ``#/$defs/Name``) points at; `KeyError` when absent.

    The fragment is percent-decoded first, as ``jsonschema`` (``referencing``) decodes it, so
    ``#/$defs/a%20b`` is ``a b`` for every static check too, never a sibling spelled ``a%20b``."""
    if ref == "#":
        return root
    if not ref.startswith("#/"):
        raise KeyError(ref)
    node = root
    for raw in unquote(ref[2:]).split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            raise KeyError(ref)
    return node


def join(path: str, name: str) -> str:
    """``path`` extended by one property name."""
    return f"{path}.{name}" if path else name


def field_paths(schema: Mapping[str, Any]) -> Iterator[tuple[str, str, Any]]:
    """``(path, property name, property schema)`` for every declared property, at every depth.

    A property reachable through several branches (``anyOf``) is reported once per branch."""
    yield from _walk(schema, schema, "", (), 0)


def _walk(
    root: Any, node: Any, path: str, refs: tuple[str, ...], depth: int
) -> Iterator[tuple[str, str, Any]]:
    if not isinstance(node, Mapping) or depth > MAX_DEPTH:
        return
    ref = node.get("$ref")
    if isinstance(ref, str) and ref not in refs:
        try:
            target = resolve_pointer(root, ref)
        except KeyError:
            target = None
        yield from _walk(root, target, path, (*refs, ref), depth + 1)
    properties = node.get("properties")
    if isinstance(properties, Mapping):
        for name, sub in properties.items():
            where = join(path, str(name))
            yield where, str(name), sub
            yield from _walk(root, sub, where, refs, depth + 1)
    for keyword in _ANY_KEY:
        yield from _walk(root, node.get(keyword), join(path, "*"), refs, depth + 1)
    patterns = node.get("patternProperties")
    if isinstance(patterns, Mapping):
        for sub in patterns.values():
            yield from _walk(root, sub, join(path, "*"), refs, depth + 1)
    for keyword in _ITEMS:
        value = node.get(keyword)
        for sub in value if isinstance(value, list) else [value]:
            yield from _walk(root, sub, f"{path}[]" if path else "[]", refs, depth + 1)
    for keyword in _SAME_PLACE:
        value = node.get(keyword)
        for sub in value if isinstance(value, list) else [value]:
            yield from _walk(root, sub, path, refs, depth + 1)
    dependent = node.get("dependentSchemas")
    if isinstance(dependent, Mapping):
        for sub in dependent.values():
            yield from _walk(root, sub, path, refs, depth + 1)


def path_matches(pattern: str, segments: tuple[tuple[str, bool], ...]) -> bool:
    """Whether an argument place ``segments`` (``(key, False)`` per object key, ``("", True)`` per
    array index) is the one ``pattern`` names (``*`` standing for any key)."""
    return _match(_split(pattern), segments)


def _split(pattern: str) -> tuple[tuple[str, bool], ...]:
    out: list[tuple[str, bool]] = []
    for part in pattern.split(".") if pattern else []:
        name = part
        arrays = 0
        while name.endswith("[]"):
            name = name[:-2]
            arrays += 1
        if name:
            out.append((name, False))
        out.extend(("", True) for _ in range(arrays))
    return tuple(out)


def _match(pattern: tuple[tuple[str, bool], ...], segments: tuple[tuple[str, bool], ...]) -> bool:
    if len(pattern) != len(segments):
        return False
    for (want, want_array), (got, got_array) in zip(pattern, segments, strict=True):
        if want_array != got_array:
            return False
        if not want_array and want != "*" and want != got:
            return False
    return True


__all__ = ["MAX_DEPTH", "field_paths", "join", "path_matches", "resolve_pointer"]
