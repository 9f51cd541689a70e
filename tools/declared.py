"""Tools whose arguments are a declared JSON Schema (OpenAI or Anthropic tool definitions).

The schema itself is the authority: calls are validated with ``jsonschema`` (Draft 2020-12,
``format`` as an annotation, as the draft says), never converted to a Pydantic model, so any
property name works (``_private``, ``schema``, ``model_config``) and nothing is lost on the way.

Kept arguments (what the proposal, digest, operation key and audit hold) are the call's own JSON:
an omitted property stays omitted; a property with a declared ``default`` is filled with it; a
number is kept as the model wrote it, except that a value matching an ``enum``/``const`` member
becomes that member (``1.0`` for ``[1, 2]`` is kept as ``1``) and an integral number where only
``integer`` is allowed becomes an integer. Defaults and these normalizations follow
``properties``, ``additionalProperties``, ``items``, local ``$ref`` and the one ``anyOf`` branch
a value matches; with several matching branches the value is kept as sent.

The handler receives `toolgate.tools.arguments.FrozenArguments`: exactly the kept arguments, read-only.

Registration refuses (`RegistryError` naming the tool and the schema's JSON path): a schema that is
not a valid Draft 2020-12 object schema; non-local or unresolvable ``$ref``; keywords whose branches
toolgate's static checks do not follow (`UNSUPPORTED`); type lists other than one type plus
``null``; defaults that do not satisfy their own schema; and open objects (``additionalProperties``
absent or not false, or an untyped value), unless the operator chose ``open_objects="close"`` (objects
that declare ``properties`` but no ``additionalProperties`` are closed, visibly, in the exported
schema) or ``open_objects="allow"`` (open objects are accepted as declared JSON values).
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, Literal

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from jsonschema.exceptions import ValidationError as SchemaViolation
from pydantic import BaseModel, ConfigDict, create_model

from toolgate.tools.arguments import ArgumentsInvalid, FrozenArguments, freeze
from toolgate.tools.schema_walk import join, resolve_pointer

OpenObjects = Literal["refuse", "close", "allow"]
"""What registration does with an open object: refuse it, close it, or accept it as declared."""

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

_MAX_SHOWN = 200


class Refusal:
    """One registration problem of a declared schema: its code and ``"<JSON path>: <problem>"``."""

    def __init__(self, code: str, path: str, message: str) -> None:
        self.code = code
        self.text = f"{path}: {message}"


class JsonSchemaArguments:
    """The contract of a tool registered from a JSON Schema (see the module docstring)."""

    def __init__(self, schema: Mapping[str, Any], *, open_objects: OpenObjects = "refuse") -> None:
        """Check ``schema`` and prepare its validator; `SchemaRefused` lists every problem found."""
        problems = _json_problems(schema, "$")
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
        checker = _Checker(effective, open_objects)
        checker.check()
        if checker.refusals:
            raise SchemaRefused(checker.refusals)
        self.open_objects: OpenObjects = open_objects
        """The operator's choice for open objects, as registered."""
        self._schema = effective
        self._validator = Draft202012Validator(effective)
        refusals = list(self._bad_defaults())
        if refusals:
            raise SchemaRefused(refusals)

    @property
    def properties(self) -> frozenset[str]:
        """Top-level property names."""
        return frozenset(self._schema.get("properties", {}) or {})

    @property
    def always_present(self) -> frozenset[str]:
        """Required top-level properties and those with a declared default."""
        props = self._schema.get("properties", {}) or {}
        defaulted = {name for name, sub in props.items() if _default_of(self._schema, sub) is not _NONE}
        return frozenset(self._schema.get("required", [])) | frozenset(defaulted)

    def json_schema(self) -> dict[str, Any]:
        """The schema as declared (closed where the operator chose ``open_objects="close"``)."""
        return copy.deepcopy(self._schema)

    def parse(self, raw: Any) -> dict[str, Any]:
        """Validate ``raw`` with the schema; the kept arguments, or `ArgumentsInvalid`."""
        if not isinstance(raw, Mapping):
            raise ArgumentsInvalid([("(arguments)", "must be one JSON object")])
        problems = list(_value_problems(raw, ""))
        if problems:
            raise ArgumentsInvalid(problems)
        errors = sorted(self._validator.iter_errors(raw), key=_error_order)
        if errors:
            raise ArgumentsInvalid([p for error in errors for p in _describe(error)])
        kept = self._complete(self._schema, raw, 0)
        if not self._validator.is_valid(kept):
            raise ArgumentsInvalid([("(defaults)", "the declared defaults do not satisfy the schema")])
        result: dict[str, Any] = kept
        return result

    def for_handler(self, arguments: Mapping[str, Any]) -> FrozenArguments:
        """Exactly ``arguments``, read-only, after checking they still satisfy the schema."""
        errors = sorted(self._validator.iter_errors(dict(arguments)), key=_error_order)
        if errors:
            raise ArgumentsInvalid([p for error in errors for p in _describe(error)])
        frozen: FrozenArguments = freeze(arguments)
        return frozen

    def _complete(self, node: Any, value: Any, depth: int) -> Any:
        """``value`` with declared defaults filled in and numbers normalized (see module docstring)."""
        if depth > 64 or not isinstance(node, Mapping):
            return copy.deepcopy(value)
        if isinstance(node.get("$ref"), str):
            target = resolve_pointer(self._schema, node["$ref"])
            value = self._complete(target, value, depth + 1)
        value = _normalized_number(node, value)
        if isinstance(value, Mapping) and ("properties" in node or "additionalProperties" in node):
            props: Mapping[str, Any] = node.get("properties", {}) or {}
            extra = node.get("additionalProperties")
            out: dict[str, Any] = {}
            for key, item in value.items():
                sub = props.get(key, extra)
                out[key] = self._complete(sub, item, depth + 1)
            for key, sub in props.items():
                default = _default_of(self._schema, sub)
                if key not in out and default is not _NONE:
                    out[key] = copy.deepcopy(default)
            return out
        if isinstance(value, list) and isinstance(node.get("items"), Mapping):
            return [self._complete(node["items"], item, depth + 1) for item in value]
        if isinstance(node.get("anyOf"), list):
            matching = [b for b in node["anyOf"] if self._validator.evolve(schema=b).is_valid(value)]
            if len(matching) == 1:
                return self._complete(matching[0], value, depth + 1)
        return copy.deepcopy(value)

    def _bad_defaults(self) -> Iterator[Refusal]:
        for path, node, _ in _subschemas(self._schema, "$"):
            if not (isinstance(node, Mapping) and "default" in node):
                continue
            own = self._validator.evolve(schema={k: v for k, v in node.items() if k != "default"})
            if not own.is_valid(node["default"]):
                yield Refusal("invalid_schema", path, "its default does not satisfy its own schema")


class SchemaRefused(Exception):
    """A declared schema refused at registration (internal; turned into a `RegistryError`)."""

    def __init__(self, refusals: list[Refusal]) -> None:
        super().__init__("; ".join(r.text for r in refusals))
        self.refusals = refusals


class DeclaredArguments(BaseModel):
    """The ``args_model`` of a tool registered from a JSON Schema: a stand-in, never a validator.

    It exists so code that takes a model (exports, the manifest, the registry audit) sees the
    declared schema: ``model_json_schema()`` returns it. Validate through
    `ToolSpec.parse_arguments`; ``model_validate`` refuses, since a Pydantic model would lose meaning."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    __toolgate_contract__: ClassVar[JsonSchemaArguments]

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The declared JSON Schema of the tool's arguments."""
        return cls.__toolgate_contract__.json_schema()

    @classmethod
    def model_validate(cls, *args: Any, **kwargs: Any) -> DeclaredArguments:
        """Refused: arguments of a declared-schema tool are validated by `ToolSpec.parse_arguments`."""
        raise TypeError(f"{cls.__name__} is a declared JSON Schema; validate with ToolSpec.parse_arguments")


def declared_model(title: str, contract: JsonSchemaArguments) -> type[DeclaredArguments]:
    """A `DeclaredArguments` subclass standing for ``contract``."""
    model = create_model(title, __base__=DeclaredArguments)
    model.__toolgate_contract__ = contract
    model.__doc__ = "Arguments declared as JSON Schema (validated by toolgate with jsonschema)."
    return model


def contract_of(model: type[BaseModel]) -> JsonSchemaArguments | None:
    """The declared-schema contract behind ``model``, or None for an ordinary Pydantic model."""
    if isinstance(model, type) and issubclass(model, DeclaredArguments):
        return getattr(model, "__toolgate_contract__", None)
    return None


class _None:
    """Marks "no default declared" (``None`` is a legal default: JSON ``null``)."""


_NONE: Any = _None()


def _default_of(root: Mapping[str, Any], node: Any) -> Any:
    for _ in range(32):
        if not isinstance(node, Mapping):
            return _NONE
        if "default" in node:
            return node["default"]
        ref = node.get("$ref")
        if not isinstance(ref, str):
            return _NONE
        node = resolve_pointer(root, ref)
    return _NONE


def _types(node: Mapping[str, Any]) -> set[str]:
    kind = node.get("type")
    return {kind} if isinstance(kind, str) else set(kind) if isinstance(kind, list) else set()


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _normalized_number(node: Mapping[str, Any], value: Any) -> Any:
    if not _is_number(value):
        return value
    members = (
        node["enum"] if isinstance(node.get("enum"), list) else [node["const"]] if "const" in node else []
    )
    for member in members:
        if _is_number(member) and member == value:
            return member
    if (
        isinstance(value, float)
        and value.is_integer()
        and "integer" in _types(node)
        and "number" not in _types(node)
    ):
        return int(value)
    return value


class _Checker:
    """The registration checks of one declared schema, collecting every refusal."""

    def __init__(self, schema: dict[str, Any], open_objects: OpenObjects) -> None:
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
        if "array" in _types(node) and "items" not in node and self.open_objects != "allow":
            self.refuse(
                "open_arguments",
                path,
                "an array needs one 'items' schema (without it, it holds any JSON values), "
                "or register with open_objects='allow'",
            )

    def object(self, path: str, node: dict[str, Any]) -> None:
        extra = node.get("additionalProperties", _NONE)
        if extra is False or self.open_objects == "allow":
            return
        if extra is _NONE and self.open_objects == "close" and "properties" in node:
            node["additionalProperties"] = False
            return
        hint = (
            "declare additionalProperties: false"
            if extra is _NONE and "properties" in node
            else "declare its properties and additionalProperties: false"
        )
        self.refuse(
            "open_arguments",
            path,
            f"open objects (additionalProperties is not false) are refused: {hint}, "
            "or register with open_objects='close' or 'allow'",
        )

    def untyped(self, path: str) -> None:
        if self.open_objects == "allow":
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
            for i, sub in enumerate(node[keyword]):
                yield from _subschemas(sub, f"{path}.{keyword}[{i}]", keyword in ("anyOf", "prefixItems"))


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


def _json_problems(value: Any, path: str) -> list[Refusal]:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return [Refusal("invalid_schema", path, "the schema must be plain JSON (no NaN, no non-JSON values)")]
    return []


MAX_VALUE_DEPTH = 64
"""Arguments nested deeper than this are refused before validation (which recurses)."""


def _value_problems(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """Values a JSON parser could not have produced (non-finite numbers, foreign types), and
    nesting too deep to validate; iterative, so hostile depth cannot exhaust the stack."""
    stack: list[tuple[Any, str, int]] = [(value, path, 0)]
    while stack:
        item, where, depth = stack.pop()
        shown = where or "(arguments)"
        if depth > MAX_VALUE_DEPTH:
            yield shown, f"is nested deeper than {MAX_VALUE_DEPTH} levels"
            return
        if isinstance(item, Mapping):
            if not all(isinstance(key, str) for key in item):
                yield shown, "object keys must be strings"
                continue
            stack.extend((sub, join(where, _shown_key(key)), depth + 1) for key, sub in item.items())
        elif isinstance(item, list):
            stack.extend((sub, join(where, str(index)), depth + 1) for index, sub in enumerate(item))
        elif isinstance(item, float) and not math.isfinite(item):
            yield shown, "must be a finite number"
        elif not (item is None or isinstance(item, str | int | float | bool)):
            yield shown, "is not a JSON value"


def _shown_key(key: str) -> str:
    shown = "".join(ch if ch.isprintable() else "?" for ch in key[:64])
    return shown + ("..." if len(key) > 64 else "")


def _schema_path(parts: Any) -> str:
    return "$" + "".join(f".{p}" if not isinstance(p, int) else f"[{p}]" for p in parts)


def _error_order(error: SchemaViolation) -> tuple[str, str]:
    return (".".join(str(p) for p in error.absolute_path), str(error.validator))


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."


_TEMPLATES = {
    "minimum": "must be >= {}",
    "maximum": "must be <= {}",
    "exclusiveMinimum": "must be > {}",
    "exclusiveMaximum": "must be < {}",
    "multipleOf": "must be a multiple of {}",
    "minLength": "must be at least {} characters long",
    "maxLength": "must be at most {} characters long",
    "pattern": "must match the pattern {}",
    "format": "must be in the format {}",
    "minItems": "must have at least {} items",
    "maxItems": "must have at most {} items",
    "uniqueItems": "items must be unique",
    "minProperties": "must have at least {} properties",
    "maxProperties": "must have at most {} properties",
    "contains": "must contain an item of the declared shape",
    "minContains": "must contain at least {} items of the declared shape",
    "maxContains": "must contain at most {} items of the declared shape",
}


def _describe(error: SchemaViolation) -> list[tuple[str, str]]:
    """Path and problem of one validation error, from the schema only (never the input value)."""
    path = ".".join(_shown_key(str(p)) for p in error.absolute_path)
    where = path or "(arguments)"
    keyword = str(error.validator)
    value = error.validator_value
    if keyword == "required":
        present = error.instance if isinstance(error.instance, Mapping) else {}
        return [(join(path, str(name)), "is required") for name in value if name not in present]
    if keyword == "additionalProperties":
        declared = (error.schema.get("properties") or {}) if isinstance(error.schema, Mapping) else {}
        extras = (
            [k for k in error.instance if k not in declared] if isinstance(error.instance, Mapping) else []
        )
        return [(join(path, _shown_key(str(k))), "is not a declared property") for k in extras] or [
            (where, "has undeclared properties")
        ]
    if keyword == "type":
        kinds = value if isinstance(value, list) else [value]
        return [(where, "must be " + " or ".join(str(k) for k in kinds))]
    if keyword == "enum":
        return [(where, f"must be one of {_short(value)}")]
    if keyword == "const":
        return [(where, f"must be {_short(value)}")]
    if keyword == "anyOf":
        return _describe_any_of(error, where)
    if keyword == "False" or value is False:
        return [(where, "is not allowed here")]
    if keyword in _TEMPLATES:
        return [(where, _TEMPLATES[keyword].format(_short(value)))]
    return [(where, f"does not satisfy {keyword!r}")]


def _describe_any_of(error: SchemaViolation, where: str) -> list[tuple[str, str]]:
    """The one alternative the value's JSON type fits, explained; else a general statement."""
    by_branch: dict[int, list[SchemaViolation]] = {}
    for sub in error.context or []:
        branch = sub.relative_schema_path[0] if sub.relative_schema_path else -1
        if isinstance(branch, int):
            by_branch.setdefault(branch, []).append(sub)
    fitting = [
        errors
        for errors in by_branch.values()
        if not any(e.validator == "type" and not e.relative_path for e in errors)
    ]
    if len(fitting) == 1:
        return [p for sub in sorted(fitting[0], key=_error_order) for p in _describe(sub)]
    return [(where, "must match one of the declared alternatives")]


__all__ = [
    "UNSUPPORTED",
    "DeclaredArguments",
    "JsonSchemaArguments",
    "OpenObjects",
    "SchemaRefused",
    "contract_of",
    "declared_model",
]
