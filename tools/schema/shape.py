"""How hard a tool's arguments are to fill in, and which of them have no bound.

Two reviews the registry audit makes of every argument schema. *Complexity*: models choose and
fill flat, small schemas far more reliably, so the audit reports nesting depth, leaf fields and
conditional requirements (``if``/``then``, ``dependentRequired``, ``oneOf``...) per tool and warns
past about 2 levels or 10 leaves (chapter §3.4). *Bounds*: an argument with no bound (a string
without enum, pattern, format or maximum length; an array without maximum items; an open
object without maximum properties) lets the model send anything of any size, which the guide's
stop conditions refuse. Both read the JSON Schema the model is sent, so they hold for every tool
shape (Pydantic models, declared JSON Schemas, MCP tools).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from toolgate.tools.schema.walk import field_paths, resolve_pointer

MAX_NESTING = 2
"""Levels of nested objects beyond which a schema is reported as complex."""
MAX_LEAVES = 9
"""Leaf fields beyond which a schema is reported as complex ("fewer than 10")."""

BOUNDED_FORMATS = frozenset({"date", "date-time", "time", "uuid", "email", "ipv4", "ipv6", "duration"})
"""String formats whose values have a bounded shape and length."""
CONDITIONAL_KEYWORDS = ("if", "then", "else", "dependentRequired", "dependentSchemas", "oneOf", "anyOf")
"""Keywords that make a field's requirement depend on another's value."""


@dataclass(frozen=True)
class SchemaShape:
    """The complexity figures and unbounded arguments of one argument schema."""

    depth: int
    """Deepest level of nested properties (a flat object is 1)."""
    leaves: int
    """Fields holding a value rather than further properties."""
    conditionals: tuple[str, ...]
    """Conditional keywords found, each once, in a fixed order."""
    unbounded: tuple[str, ...]
    """Argument paths without a bound, sorted."""

    @property
    def complex(self) -> bool:
        """True past `MAX_NESTING` levels or `MAX_LEAVES` leaves."""
        return self.depth > MAX_NESTING or self.leaves > MAX_LEAVES

    def warnings(self) -> list[str]:
        """What a reviewer should know about the shape, one sentence each (never a defect)."""
        found = []
        if self.depth > MAX_NESTING:
            found.append(f"arguments nest {self.depth} levels deep (aim for {MAX_NESTING} at most)")
        if self.leaves > MAX_LEAVES:
            found.append(f"{self.leaves} leaf arguments (aim for fewer than {MAX_LEAVES + 1})")
        if self.conditionals:
            found.append(
                f"conditional requirements ({', '.join(self.conditionals)}): models fill these poorly"
            )
        return found


def _resolved(root: Mapping[str, Any], node: Any) -> Any:
    """``node`` with one local ``$ref`` followed (a missing target counts as no schema)."""
    if isinstance(node, Mapping) and isinstance(node.get("$ref"), str):
        try:
            return resolve_pointer(root, node["$ref"])
        except KeyError:
            return {}
    return node


def _types(node: Mapping[str, Any]) -> set[str]:
    declared = node.get("type")
    if isinstance(declared, str):
        return {declared}
    if isinstance(declared, list):
        return {t for t in declared if isinstance(t, str)}
    return set()


def _branches(root: Mapping[str, Any], node: Any) -> Iterator[Mapping[str, Any]]:
    """``node`` and the alternatives it allows (``anyOf``/``oneOf``), each resolved."""
    node = _resolved(root, node)
    if not isinstance(node, Mapping):
        return
    alternatives = [n for key in ("anyOf", "oneOf") for n in node.get(key, ()) if isinstance(n, Mapping)]
    if not alternatives:
        yield node
    for alternative in alternatives:
        yield from _branches(root, alternative)


def _unbounded(root: Mapping[str, Any], node: Any) -> bool:
    """True when some value ``node`` admits has no bound on its size or shape."""
    for branch in _branches(root, node):
        if "enum" in branch or "const" in branch:
            continue
        types = _types(branch) or {"string"}  # a schema without a type admits any string
        if "string" in types and not (
            "pattern" in branch or "maxLength" in branch or branch.get("format") in BOUNDED_FORMATS
        ):
            return True
        if "array" in types and "maxItems" not in branch:
            return True
        open_keys = branch.get("additionalProperties", False) not in (False, None)
        if "object" in types and open_keys and "maxProperties" not in branch:
            return True
    return False


def _conditionals(node: Any, seen: set[str]) -> None:
    if isinstance(node, Mapping):
        seen.update(key for key in CONDITIONAL_KEYWORDS if key in node)
        for value in node.values():
            _conditionals(value, seen)
    elif isinstance(node, list):
        for value in node:
            _conditionals(value, seen)


def schema_shape(schema: Mapping[str, Any]) -> SchemaShape:
    """Measure ``schema`` (an argument schema as the model is sent it)."""
    depth, leaves, unbounded = 0, set(), set()
    for path, _, node in field_paths(schema):
        depth = max(depth, path.count(".") + 1)
        branches = list(_branches(schema, node))
        if _unbounded(schema, node):
            unbounded.add(path)
        if branches and all(_has_fields(b) for b in branches):
            continue  # a nested object: its own fields are the leaves
        items = [b["items"] for b in branches if isinstance(b.get("items"), Mapping)]
        if items and all(_has_fields(i) for item in items for i in _branches(schema, item)):
            continue  # an array of objects: likewise
        leaves.add(path)
        if any(_unbounded(schema, item) for item in items):
            unbounded.add(f"{path}[]")
    seen: set[str] = set()
    _conditionals(schema, seen)
    ordered = tuple(key for key in CONDITIONAL_KEYWORDS if key in seen)
    return SchemaShape(
        depth=depth, leaves=len(leaves), conditionals=ordered, unbounded=tuple(sorted(unbounded))
    )


def _has_fields(node: Mapping[str, Any]) -> bool:
    """True for an object schema that declares its properties (walked field by field)."""
    return "object" in _types(node) and "properties" in node


__all__ = ["BOUNDED_FORMATS", "MAX_LEAVES", "MAX_NESTING", "SchemaShape", "schema_shape"]
