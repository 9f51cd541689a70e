"""Whether a change to a tool's argument schema is additive or breaking, and what version it needs.

A tool's schema is an API contract with every agent conversation that has it in context (the
chapter's §5.2): a conversation that started under the old schema must not meet a validator that
now refuses what it was told it may send. The rule, applied to the declared JSON Schemas:

* breaking: a field removed or renamed (a rename is a removal and an addition), a new required
  field, an optional field made required, a narrowed type (a JSON type no longer accepted), an
  enum value removed (or an enum imposed on a field that had none), a tighter bound (``maxLength``,
  ``maximum``, ``maxItems`` lowered; ``minLength``, ``minimum``, ``minItems`` raised; a new or
  changed ``pattern``), and an open object closed;
* additive: a new optional field, a required field made optional, a widened type, an enum value
  added, a looser bound;
* unchanged: only descriptions, titles or examples changed (the schema accepts the same calls).

A breaking change needs a major version bump of the tool (for ``0.x`` a minor bump, as semantic
versioning reads it), or a new tool name; release control refuses a candidate that ships a breaking
change without one (``breaking_schema_change``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from toolgate.tools.schema.walk import join, resolve_pointer

ChangeKind = Literal["unchanged", "additive", "breaking"]

_LOWER_IS_TIGHTER = ("maxLength", "maximum", "exclusiveMaximum", "maxItems", "maxProperties")
_HIGHER_IS_TIGHTER = ("minLength", "minimum", "exclusiveMinimum", "minItems", "minProperties")


@dataclass(frozen=True)
class SchemaChange:
    """The classification of one schema change with every reason, ``path: what`` each."""

    kind: ChangeKind
    breaking: tuple[str, ...] = ()
    additive: tuple[str, ...] = ()


def classify_change(old: Mapping[str, Any], new: Mapping[str, Any]) -> SchemaChange:
    """Classify the change from ``old`` to ``new`` (two declared argument schemas)."""
    breaking: list[str] = []
    additive: list[str] = []
    _compare(old, new, old, new, "", breaking, additive, 0)
    kind: ChangeKind = "breaking" if breaking else "additive" if additive else "unchanged"
    return SchemaChange(kind, tuple(breaking), tuple(additive))


def _resolved(root: Mapping[str, Any], node: Any, depth: int = 0) -> Mapping[str, Any]:
    if not isinstance(node, Mapping) or depth > 8:
        return {}
    ref = node.get("$ref")
    if isinstance(ref, str):
        try:
            target = resolve_pointer(root, ref)
        except KeyError:
            return {}
        merged = {**_resolved(root, target, depth + 1), **{k: v for k, v in node.items() if k != "$ref"}}
        return merged
    return node


def _types(root: Mapping[str, Any], node: Mapping[str, Any]) -> set[str] | None:
    """The JSON types ``node`` accepts (branches included); None when it accepts any type."""
    branches = [b for k in ("anyOf", "oneOf") for b in node.get(k, ()) if isinstance(b, Mapping)]
    if branches:
        found: set[str] = set()
        for branch in branches:
            types = _types(root, _resolved(root, branch))
            if types is None:
                return None
            found |= types
        return found
    kind = node.get("type")
    if isinstance(kind, str):
        types = {kind}
    elif isinstance(kind, list):
        types = {k for k in kind if isinstance(k, str)}
    elif "enum" in node or "const" in node:
        values = node.get("enum", [node.get("const")])
        types = {_json_type(v) for v in values}
    else:
        return None
    return types


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _accepts(types: set[str] | None, kind: str) -> bool:
    if types is None:
        return True
    return kind in types or (kind == "integer" and "number" in types)


def _enum(root: Mapping[str, Any], node: Mapping[str, Any]) -> list[Any] | None:
    """The closed value set of ``node`` (across its branches), or None when it is open."""
    branches = [b for k in ("anyOf", "oneOf") for b in node.get(k, ()) if isinstance(b, Mapping)]
    if branches:
        values: list[Any] = []
        for branch in branches:
            resolved = _resolved(root, branch)
            if resolved.get("type") == "null":
                values.append(None)
                continue
            found = _enum(root, resolved)
            if found is None:
                return None
            values.extend(found)
        return values
    if "enum" in node and isinstance(node["enum"], list):
        return list(node["enum"])
    if "const" in node:
        return [node["const"]]
    return None


def _compare(
    old_root: Mapping[str, Any],
    new_root: Mapping[str, Any],
    old_node: Any,
    new_node: Any,
    path: str,
    breaking: list[str],
    additive: list[str],
    depth: int,
) -> None:
    if depth > 16:
        return
    old, new = _resolved(old_root, old_node), _resolved(new_root, new_node)
    where = path or "$"
    old_types, new_types = _types(old_root, old), _types(new_root, new)
    if old_types is None and new_types is not None:
        breaking.append(f"{where}: type narrowed to {sorted(new_types)}")
    elif old_types is not None and new_types is not None:
        lost = [t for t in sorted(old_types) if not _accepts(new_types, t)]
        gained = [t for t in sorted(new_types) if not _accepts(old_types, t)]
        if lost:
            breaking.append(f"{where}: type narrowed (no longer accepts {', '.join(lost)})")
        if gained:
            additive.append(f"{where}: type widened (now accepts {', '.join(gained)})")
    elif old_types is not None and new_types is None:
        additive.append(f"{where}: type widened to any")
    old_enum, new_enum = _enum(old_root, old), _enum(new_root, new)
    if old_enum is None and new_enum is not None:
        breaking.append(f"{where}: values restricted to an enum")
    elif old_enum is not None and new_enum is not None:
        removed = [v for v in old_enum if v not in new_enum]
        added = [v for v in new_enum if v not in old_enum]
        if removed:
            breaking.append(f"{where}: enum value(s) removed: {removed}")
        if added:
            additive.append(f"{where}: enum value(s) added: {added}")
    elif old_enum is not None and new_enum is None:
        additive.append(f"{where}: enum opened")
    _bounds(old, new, where, breaking, additive)
    _objects(old_root, new_root, old, new, path, breaking, additive, depth)
    old_items, new_items = old.get("items"), new.get("items")
    if isinstance(old_items, Mapping) and isinstance(new_items, Mapping):
        _compare(
            old_root,
            new_root,
            old_items,
            new_items,
            f"{path}[]" if path else "[]",
            breaking,
            additive,
            depth + 1,
        )


def _bounds(
    old: Mapping[str, Any], new: Mapping[str, Any], where: str, breaking: list[str], additive: list[str]
) -> None:
    for keyword in _LOWER_IS_TIGHTER + _HIGHER_IS_TIGHTER:
        before, after = old.get(keyword), new.get(keyword)
        if before == after:
            continue
        lower = keyword in _LOWER_IS_TIGHTER
        if before is None:
            breaking.append(f"{where}: new bound {keyword}={after}")
        elif after is None:
            additive.append(f"{where}: bound {keyword} removed")
        elif (after < before) if lower else (after > before):
            breaking.append(f"{where}: bound {keyword} tightened {before} -> {after}")
        else:
            additive.append(f"{where}: bound {keyword} loosened {before} -> {after}")
    if old.get("pattern") != new.get("pattern"):
        if new.get("pattern") is None:
            additive.append(f"{where}: pattern removed")
        else:
            breaking.append(f"{where}: pattern changed")


def _objects(
    old_root: Mapping[str, Any],
    new_root: Mapping[str, Any],
    old: Mapping[str, Any],
    new: Mapping[str, Any],
    path: str,
    breaking: list[str],
    additive: list[str],
    depth: int,
) -> None:
    old_props = _properties(old)
    new_props = _properties(new)
    old_required = set(old.get("required", ())) if isinstance(old.get("required"), list) else set()
    new_required = set(new.get("required", ())) if isinstance(new.get("required"), list) else set()
    for name in sorted(old_props):
        if name not in new_props:
            breaking.append(f"{join(path, name)}: field removed (or renamed)")
    for name in sorted(new_props):
        here = join(path, name)
        if name not in old_props:
            if name in new_required:
                breaking.append(f"{here}: new required field")
            else:
                additive.append(f"{here}: new optional field")
            continue
        if name in new_required and name not in old_required:
            breaking.append(f"{here}: optional field made required")
        elif name in old_required and name not in new_required:
            additive.append(f"{here}: required field made optional")
        _compare(old_root, new_root, old_props[name], new_props[name], here, breaking, additive, depth + 1)
    old_open = old.get("additionalProperties", True) not in (False, None)
    new_open = new.get("additionalProperties", True) not in (False, None)
    if (old_props or new_props) and old_open and not new_open:
        breaking.append(f"{path or '$'}: object closed (additional properties refused)")
    elif (old_props or new_props) and new_open and not old_open:
        additive.append(f"{path or '$'}: object opened")


def _properties(node: Mapping[str, Any]) -> Mapping[str, Any]:
    found = node.get("properties")
    return found if isinstance(found, Mapping) else {}


def _version(text: str) -> tuple[int, int, int] | None:
    parts = text.strip().lstrip("v").split("-")[0].split("+")[0].split(".")
    try:
        numbers = [int(p) for p in parts]
    except ValueError:
        return None
    numbers = [*numbers, 0, 0, 0][:3]
    return numbers[0], numbers[1], numbers[2]


def bump_allows(kind: ChangeKind, old_version: str, new_version: str) -> bool:
    """True when moving from ``old_version`` to ``new_version`` is enough for a ``kind`` change:
    a breaking change needs a major bump (a minor bump below 1.0.0); anything else needs none."""
    if kind != "breaking":
        return True
    old, new = _version(old_version), _version(new_version)
    if old is None or new is None:
        return old_version != new_version  # not semantic: any new version is a deliberate one
    if old[0] == 0 and new[0] == 0:
        return new[1] > old[1]
    return new[0] > old[0]


def release_breaks(old_tools: Mapping[str, Any], new_tools: Mapping[str, Any]) -> list[str]:
    """Every tool of ``new_tools`` whose schema changed in a breaking way from ``old_tools`` without
    the version bump it needs, one ``"<tool> <old>-><new>: <first reason>"`` each. Both map a
    tool's name to ``(version, declared argument schema)``; a tool new to the release is not a change."""
    found: list[str] = []
    for name in sorted(new_tools):
        if name not in old_tools:
            continue
        (old_version, old_schema), (new_version, new_schema) = old_tools[name], new_tools[name]
        change = classify_change(old_schema, new_schema)
        if not bump_allows(change.kind, old_version, new_version):
            found.append(f"{name} {old_version}->{new_version}: {change.breaking[0]}")
    return found


__all__ = ["ChangeKind", "SchemaChange", "bump_allows", "classify_change", "release_breaks"]
