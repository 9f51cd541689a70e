"""Tools whose arguments are a declared JSON Schema (OpenAI or Anthropic tool definitions).

The schema itself is the authority: calls are validated with ``jsonschema`` (Draft 2020-12;
``format`` asserted only for the formats the registry audit counts as a bound, see
`toolgate.tools.declared.formats`, else an annotation; ``multipleOf`` in exact decimals,
`toolgate.tools.declared.validator`), never converted to a Pydantic model, so any
property name works (``_private``, ``schema``, ``model_config``) and nothing is lost on the way.

Kept arguments (what the proposal, digest, operation key and audit hold) are the call's own JSON:
an omitted property stays omitted; a property with a declared ``default`` is filled with it; a
number is kept as the model wrote it, except that a value matching an ``enum``/``const`` member
becomes that member (``1.0`` for ``[1, 2]`` is kept as ``1``) and an integral number where only
``integer`` is allowed becomes an integer. Defaults and these normalizations follow
``properties``, ``additionalProperties``, ``items``, local ``$ref`` and the one ``anyOf`` branch
a value matches; with several matching branches the value is kept as sent.

The handler receives `toolgate.tools.arguments.FrozenArguments`: exactly the kept arguments, read-only.

Registration refuses (`RegistryError` naming the tool and the schema's JSON path; the checks
are `toolgate.tools.declared.checks`): a schema that is not a valid Draft 2020-12 object schema;
non-local or unresolvable ``$ref``; a ``$ref`` loop back to the same value (``a -> b -> a``, or
through an ``anyOf`` branch: no call could be checked there); keywords whose branches toolgate's static checks do not follow
(`toolgate.tools.declared.checks.UNSUPPORTED`); type lists other than one type plus ``null``;
OpenAPI's ``nullable: true`` (JSON Schema ignores it); a closed object whose ``required`` names a
property it does not declare (no call could pass); defaults that do not satisfy their own
schema; and open objects (``additionalProperties`` absent
or not false, or an untyped value), unless the operator chose ``open_objects="close"`` (objects
that declare ``properties`` but no ``additionalProperties`` are closed, visibly, in the exported
schema) or ``open_objects="allow"`` (open objects are accepted as declared JSON values).
Problems with a call are described from the schema, never the input
(`toolgate.tools.declared.errors`).

Loaded as published (``open_objects=None``, what every importer does unless the deprecated switch
is given): open objects, untyped values and arrays without ``items`` load as they are, and calls
are closed at every depth instead, open only at the operator's ``open_paths``
(`toolgate.tools.declared.closed`; an undeclared key is refused ``undeclared_argument``); a
``default`` that fails its own schema is dropped with a load warning (`load_warnings`) instead
of refusing the tool.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, create_model

from toolgate.tools.arguments import ArgumentsInvalid, FrozenArguments, freeze
from toolgate.tools.declared.checks import (
    OpenObjects,
    Refusal,
    SchemaRefused,
    checked_schema,
    default_refusals,
    drop_invalid_defaults,
    schema_types,
)
from toolgate.tools.declared.closed import undeclared_keys
from toolgate.tools.declared.errors import describe, error_order, value_problems
from toolgate.tools.declared.validator import declared_validator, pattern_budget
from toolgate.tools.schema.walk import field_paths, resolve_pointer


class JsonSchemaArguments:
    """The contract of a tool registered from a JSON Schema (see the module docstring)."""

    def __init__(
        self,
        schema: Mapping[str, Any],
        *,
        open_objects: OpenObjects | None = "refuse",
        open_paths: Iterable[str] = (),
    ) -> None:
        """Check ``schema`` and prepare its validator; `SchemaRefused` lists every problem found.

        ``open_objects=None`` loads the schema as published (see the module docstring), open at
        ``open_paths`` only; the deprecated switch (``refuse``, ``close``, ``allow``) takes no
        open paths."""
        paths = tuple(sorted(set(open_paths)))
        if paths and open_objects is not None:
            raise SchemaRefused(
                [Refusal("invalid_schema", "$", "open_paths replace open_objects: give one or the other")]
            )
        effective = checked_schema(schema, open_objects)
        self.open_objects: OpenObjects | None = open_objects
        """The operator's deprecated per-tool switch, as registered (None: loaded as published)."""
        self.open_paths: tuple[str, ...] = paths
        """The argument paths the operator named open (loaded as published only)."""
        self._schema = effective
        self._validator = declared_validator(effective)
        self._fields: tuple[tuple[str, str], ...] | None = None
        self.load_warnings: tuple[str, ...] = ()
        """What loading changed or doubts, for the registry audit and the operator's log."""
        if open_objects is None:
            self.load_warnings = tuple(drop_invalid_defaults(effective, self._validator))
        refusals = list(default_refusals(effective, self._validator))
        refusals.extend(self._unknown_open_paths())
        if refusals:
            raise SchemaRefused(refusals)

    def _unknown_open_paths(self) -> Iterator[Refusal]:
        declared = {path for path, _ in self.declared_fields()}
        for path in self.open_paths:
            base = path
            while base.endswith(("[]", ".*")):
                base = base[:-2]
            if base not in declared:
                yield Refusal("invalid_schema", "$", f"open path {path!r} names no declared argument")

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

    def declared_fields(self) -> tuple[tuple[str, str], ...]:
        """Every declared property's path and name (walked once: the schema never changes)."""
        if self._fields is None:
            self._fields = tuple((path, name) for path, name, _ in field_paths(self._schema))
        return self._fields

    def parse(self, raw: Any) -> dict[str, Any]:
        """Validate ``raw`` with the schema; the kept arguments, or `ArgumentsInvalid`."""
        if not isinstance(raw, Mapping):
            raise ArgumentsInvalid([("(arguments)", "must be one JSON object")])
        problems = list(value_problems(raw, ""))
        if problems:
            raise ArgumentsInvalid(problems)
        with pattern_budget():  # a published pattern's search is bounded (validator's docstring)
            return self._parse(raw)

    def _parse(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        if self.open_objects is None:
            undeclared = undeclared_keys(self._schema, raw, self.open_paths)
            if undeclared:
                raise ArgumentsInvalid(
                    [(path, "is not a declared argument") for path in undeclared[:20]],
                    code="undeclared_argument",
                )
        errors = sorted(self._validator.iter_errors(raw), key=error_order)
        if errors:
            raise ArgumentsInvalid([p for error in errors for p in describe(error)])
        kept = self._complete(self._schema, raw, 0)
        if not self._validator.is_valid(kept):
            raise ArgumentsInvalid([("(defaults)", "the declared defaults do not satisfy the schema")])
        result: dict[str, Any] = kept
        return result

    def for_handler(self, arguments: Mapping[str, Any]) -> FrozenArguments:
        """Exactly ``arguments``, read-only, after checking they still satisfy the schema."""
        with pattern_budget():
            errors = sorted(self._validator.iter_errors(dict(arguments)), key=error_order)
        if errors:
            raise ArgumentsInvalid([p for error in errors for p in describe(error)])
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
        and "integer" in schema_types(node)
        and "number" not in schema_types(node)
    ):
        return int(value)
    return value


__all__ = [
    "DeclaredArguments",
    "JsonSchemaArguments",
    "contract_of",
    "declared_model",
]
