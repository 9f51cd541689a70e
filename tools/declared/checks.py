"""The registration checks of a declared JSON Schema: whether toolgate may trust it at all.

They run once, when a tool is registered from a provider definition, and stand apart from the
contract (`toolgate.tools.declared.tools`) that validates every call afterwards: the contract may assume
what these checks established (a valid Draft 2020-12 object schema, local ``$ref`` only, no keyword
whose branches the static checks on every field would miss, no open object the operator did not
choose). Every problem is collected as a `Refusal` instead of stopping at the first, so an operator
fixes a schema in one pass; `SchemaRefused` carries them to the registry, which raises a
`RegistryError` naming the tool and each JSON path.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from typing import Any, Literal

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from toolgate.tools.schema.walk import resolve_pointer

OpenObjects = Literal["refuse", "close", "allow"]
"""What registration does with an open object: refuse it, close it, or accept it as declared.

The per-tool switch of before open paths (deprecated for the importers): a tool loaded as
published (no switch, ``None``) loads whatever its objects say and is closed at call time
instead, open only at the paths the operator names (`toolgate.tools.declared.closed`)."""

UNSUPPORTED = (
    "oneOf",
    "allOf",
    "not",
    "if",
    "then",
    "else",
    "patternProperties",
    "dependentRequired",
    "dependentSchemas",
    "prefixItems",
    "unevaluatedProperties",
    "propertyNames",
    "$dynamicRef",
    "$dynamicAnchor",
    "$recursiveRef",
    "$recursiveAnchor",
)
"""Keywords refused at registration: their branches or key rules escape the static checks made on
every declared field (identity names, defaults, audit and resource paths)."""


MAX_SCHEMA_DEPTH = 100
"""JSON nesting a declared schema may reach (about 33 nested objects): deeper ones are refused
before anything walks them, so a hostile definition fails its registration, not the process
(Python's own recursion limit is ~1,000 frames, and validators recurse per level)."""
MAX_SCHEMA_NODES = 5000
"""Objects and arrays a declared schema may hold; a larger one is refused the same way."""


class Refusal:
    """One registration problem of a declared schema: its code and ``"<JSON path>: <problem>"``."""

    def __init__(self, code: str, path: str, message: str) -> None:
        self.code = code
        self.text = f"{path}: {message}"


class SchemaRefused(Exception):
    """A declared schema refused at registration (internal; turned into a `RegistryError`)."""

    def __init__(self, refusals: list[Refusal]) -> None:
        super().__init__("; ".join(r.text for r in refusals))
        self.refusals = refusals


def checked_schema(schema: Mapping[str, Any], open_objects: OpenObjects | None) -> dict[str, Any]:
    """``schema`` as plain JSON, closed where ``open_objects="close"`` says so, once it passed every
    check but the defaults' (`default_refusals` needs its validator); else `SchemaRefused`.
    With ``open_objects=None`` (loaded as published) open objects and untyped values are not
    refused here: the call-time check closes them (`toolgate.tools.declared.closed`)."""
    problems = _shape_problems(schema) or _json_problems(schema, "$")
    if problems:
        raise SchemaRefused(problems)
    effective: dict[str, Any] = json.loads(json.dumps(schema))  # plain dicts and lists all through
    try:
        Draft202012Validator.check_schema(effective)
    except SchemaError as exc:
        where = _schema_path(exc.absolute_path)
        raise SchemaRefused(
            [Refusal("invalid_schema", where, f"not a valid JSON Schema ({exc.message[:160]})")]
        ) from None
    cycle = _in_place_cycle(effective)
    if cycle:
        raise SchemaRefused([cycle])
    checker = _Checker(effective, open_objects)
    checker.check()
    if checker.refusals:
        raise SchemaRefused(checker.refusals)
    return effective


def default_refusals(schema: Mapping[str, Any], validator: Draft202012Validator) -> Iterator[Refusal]:
    """Every declared ``default`` of ``schema`` that does not satisfy its own subschema."""
    for path, node, _ in _subschemas(schema, "$"):
        if not (isinstance(node, Mapping) and "default" in node):
            continue
        own = validator.evolve(schema={k: v for k, v in node.items() if k != "default"})
        if not own.is_valid(node["default"]):
            yield Refusal("invalid_schema", path, "its default does not satisfy its own schema")


def drop_invalid_defaults(schema: Mapping[str, Any], validator: Draft202012Validator) -> list[str]:
    """Remove every declared ``default`` of ``schema`` (the contract's own copy) that does not
    satisfy its own subschema; one load warning per default dropped.

    Published definitions often write ``{"type": "boolean", "default": "false"}``: the schema is
    the contract, the default a hint that would fill a kept call with a value the schema refuses,
    so the hint goes and the tool loads (`default_refusals` is the strict alternative)."""
    dropped: list[str] = []
    for path, node, _ in list(_subschemas(schema, "$")):
        if isinstance(node, dict) and "default" in node:
            own = validator.evolve(schema={k: v for k, v in node.items() if k != "default"})
            if not own.is_valid(node["default"]):
                del node["default"]
                dropped.append(f"{path}: published default dropped (it does not satisfy its own schema)")
    return dropped


def schema_types(node: Mapping[str, Any]) -> set[str]:
    """The JSON types ``node`` declares (``type`` as one name or a list); empty when untyped."""
    kind = node.get("type")
    return {kind} if isinstance(kind, str) else set(kind) if isinstance(kind, list) else set()


_ABSENT: Any = object()
"""Marks a keyword a node does not declare (``None`` would be a declared JSON ``null``)."""


class _Checker:
    """The registration checks of one declared schema, collecting every refusal."""

    def __init__(self, schema: dict[str, Any], open_objects: OpenObjects | None) -> None:
        self.schema = schema
        self.open_objects = open_objects
        self.refusals: list[Refusal] = []

    def refuse(self, code: str, path: str, message: str) -> None:
        self.refusals.append(Refusal(code, path, message))

    def check(self) -> None:
        if self.schema.get("type") != "object":
            self.refuse("invalid_schema", "$", "tool parameters must be an object schema (type: object)")
        for path, node, value in _subschemas(self.schema, "$"):
            if value and _untyped(self.schema, node):
                self.untyped(path)
            if isinstance(node, dict):
                self.node(path, node)

    def node(self, path: str, node: dict[str, Any]) -> None:
        for keyword in UNSUPPORTED:
            if keyword in node:
                self.refuse(
                    "invalid_schema", path, f"{keyword!r} is not supported by toolgate's static checks"
                )
        if node.get("nullable") is True:  # OpenAPI 3.0; JSON Schema ignores it, so null would be refused
            self.refuse(
                "invalid_schema", path, "'nullable' is OpenAPI, not JSON Schema: write type: [<type>, 'null']"
            )
        if "$id" in node and path != "$":
            self.refuse("invalid_schema", path, "'$id' inside parameters would change how $ref resolves")
        ref = node.get("$ref")
        if isinstance(ref, str):
            if not ref.startswith("#"):
                self.refuse(
                    "invalid_schema", path, f"only local $ref to this schema is supported, got {ref!r}"
                )
            else:
                try:
                    resolve_pointer(self.schema, ref)
                except KeyError:
                    self.refuse("invalid_schema", path, f"$ref {ref!r} is not defined")
        kinds = node.get("type")
        if isinstance(kinds, list) and len([k for k in kinds if k != "null"]) != 1:
            self.refuse("invalid_schema", path, "a type list must be one type plus 'null'")
        if _is_object(node):
            self.object(path, node)
            self.required(path, node)
        if "array" in schema_types(node) and "items" not in node and self.open_objects in ("refuse", "close"):
            self.refuse(
                "open_arguments",
                path,
                "an array needs one 'items' schema (without it, it holds any JSON values), "
                "or register with open_objects='allow'",
            )

    def object(self, path: str, node: dict[str, Any]) -> None:
        extra = node.get("additionalProperties", _ABSENT)
        if extra is False or self.open_objects in ("allow", None):
            return
        if extra is _ABSENT and self.open_objects == "close" and "properties" in node:
            node["additionalProperties"] = False
            return
        hint = (
            "declare additionalProperties: false"
            if extra is _ABSENT and "properties" in node
            else "declare its properties and additionalProperties: false"
        )
        self.refuse(
            "open_arguments",
            path,
            f"open objects (additionalProperties is not false) are refused: {hint}, "
            "or register with open_objects='close' or 'allow'",
        )

    def required(self, path: str, node: dict[str, Any]) -> None:
        """A closed object requiring a property it does not declare takes no call at all."""
        props = node.get("properties") or {}
        if node.get("additionalProperties") is not False or not isinstance(props, Mapping):
            return
        missing = [str(name) for name in node.get("required") or [] if name not in props]
        if missing:
            self.refuse(
                "invalid_schema",
                f"{path}.required",
                f"names properties the closed object does not declare: {missing}",
            )

    def untyped(self, path: str) -> None:
        if self.open_objects in ("allow", None):
            return
        self.refuse(
            "open_arguments",
            path,
            "an untyped value is as open as an open object: declare its type, or register with open_objects='allow'",
        )


def _is_object(node: Mapping[str, Any]) -> bool:
    kinds = node.get("type")
    declared = kinds == "object" or (isinstance(kinds, list) and "object" in kinds)
    return declared or (kinds is None and ("properties" in node or "additionalProperties" in node))


def _subschemas(node: Any, path: str, value: bool = False) -> Iterator[tuple[str, Any, bool]]:
    """Every subschema with its JSON path (``$.properties.items.items``), the root first, and
    whether it is the schema of a value a call carries (a property, an array item, an alternative)."""
    yield path, node, value
    if not isinstance(node, Mapping):
        return
    for keyword in ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas"):
        children = node.get(keyword)
        if isinstance(children, Mapping):
            for name, sub in children.items():
                yield from _subschemas(sub, f"{path}.{keyword}.{name}", keyword == "properties")
    for keyword in (
        "items",
        "additionalProperties",
        "unevaluatedProperties",
        "unevaluatedItems",
        "contains",
        "not",
        "if",
        "then",
        "else",
        "propertyNames",
        "additionalItems",
    ):
        if isinstance(node.get(keyword), Mapping | bool):
            yield from _subschemas(node[keyword], f"{path}.{keyword}", keyword == "items")
    for keyword in ("anyOf", "oneOf", "allOf", "prefixItems"):
        if isinstance(node.get(keyword), list):
            # an alternative of a typed value (`{"required": [...]}` under an object) narrows that
            # value rather than standing for one of its own
            own = keyword == "prefixItems" or (keyword == "anyOf" and not schema_types(node))
            for i, sub in enumerate(node[keyword]):
                yield from _subschemas(sub, f"{path}.{keyword}[{i}]", own)


def _untyped(root: Mapping[str, Any], node: Any) -> bool:
    """Whether ``node`` (a value's schema) accepts any JSON value at all."""
    for _ in range(32):
        if node is True:
            return True
        if not isinstance(node, Mapping):
            return False
        ref = node.get("$ref")
        if isinstance(ref, str) and not any(k in node for k in _CONSTRAINING if k != "$ref"):
            try:
                node = resolve_pointer(root, ref)
            except KeyError:
                return False
            continue
        return not any(k in node for k in _CONSTRAINING)
    return False


_CONSTRAINING = ("type", "enum", "const", "$ref", "anyOf", "oneOf", "allOf", "not", "properties")


def _shape_problems(schema: Any) -> list[Refusal]:
    """`schema_too_deep` or `schema_too_large`, found without recursion (and so without limit on
    what the schema holds: a self-containing object stops at the size bound)."""
    stack: list[tuple[Any, str, int]] = [(schema, "$", 1)]
    containers = 0
    while stack:
        node, path, depth = stack.pop()
        if not isinstance(node, Mapping | list):
            continue
        containers += 1
        if depth > MAX_SCHEMA_DEPTH:
            return [Refusal("schema_too_deep", path, f"nested deeper than {MAX_SCHEMA_DEPTH} levels")]
        if containers > MAX_SCHEMA_NODES:
            return [Refusal("schema_too_large", path, f"more than {MAX_SCHEMA_NODES} objects and arrays")]
        children = node.items() if isinstance(node, Mapping) else enumerate(node)
        for key, child in children:
            step = f"[{key}]" if isinstance(key, int) else f".{key}"
            stack.append((child, path + step, depth + 1))
    return []


_IN_PLACE = ("anyOf", "oneOf", "allOf", "not", "if", "then", "else")
"""Keywords whose subschemas apply to the same value (as ``$ref`` does)."""


def _in_place_cycle(root: Mapping[str, Any]) -> Refusal | None:
    """A ``$ref`` loop that applies a schema to the same value again (``a -> b -> a``, or through
    an ``anyOf`` branch) never reaches a check: validating any value there recursed until
    `RecursionError`, so every call carrying it failed ``check_failed`` (retryable, for ever).
    A ``$ref`` reached through ``properties`` or ``items`` (a tree) walks into the value and ends."""
    edges: dict[int, list[Any]] = {}
    paths: dict[int, str] = {}
    for path, node, _ in _subschemas(root, "$"):
        if not isinstance(node, Mapping):
            continue
        paths.setdefault(id(node), path)
        out: list[Any] = []
        for keyword in _IN_PLACE:
            sub = node.get(keyword)
            out.extend(sub if isinstance(sub, list) else [sub])
        ref = node.get("$ref")
        if isinstance(ref, str):
            with contextlib.suppress(KeyError):  # refused by the checker with its path
                out.append(resolve_pointer(root, ref))
        edges[id(node)] = [n for n in out if isinstance(n, Mapping)]
    state: dict[int, int] = {}  # 1: on the current path, 2: done
    for start in edges:
        if state.get(start):
            continue
        stack: list[tuple[int, Iterator[Any]]] = [(start, iter(edges[start]))]
        state[start] = 1
        while stack:
            here, rest = stack[-1]
            nxt = next(rest, None)
            if nxt is None:
                state[here] = 2
                stack.pop()
            elif state.get(id(nxt)) == 1:
                where = paths.get(id(nxt), "$")
                return Refusal("invalid_schema", where, "$ref loops back to the same value without checking it")
            elif not state.get(id(nxt)):
                state[id(nxt)] = 1
                stack.append((id(nxt), iter(edges.get(id(nxt), ()))))
    return None


def _json_problems(value: Any, path: str) -> list[Refusal]:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return [Refusal("invalid_schema", path, "the schema must be plain JSON (no NaN, no non-JSON values)")]
    return []


def _schema_path(parts: Any) -> str:
    return "$" + "".join(f".{p}" if not isinstance(p, int) else f"[{p}]" for p in parts)


__all__ = [
    "MAX_SCHEMA_DEPTH",
    "MAX_SCHEMA_NODES",
    "UNSUPPORTED",
    "OpenObjects",
    "Refusal",
    "SchemaRefused",
    "checked_schema",
    "default_refusals",
    "drop_invalid_defaults",
    "schema_types",
]
