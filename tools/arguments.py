"""What a model's arguments mean to toolgate: the argument contract behind `ToolSpec`.

`ToolSpec.parse_arguments` and `ToolSpec.handler_arguments` delegate here. One contract per tool:

- `ModelArguments` for Python-typed tools (a Pydantic model with ``extra="forbid"``);
- `toolgate.tools.declared.tools.JsonSchemaArguments` for tools registered from a provider JSON Schema.

Both keep the same promises, so the proposal, its digest, the operation key, the audit projection
and what the reviewer sees mean what the model sent: an omitted argument stays omitted (a field with
a declared default is filled with it, visibly), ``null`` is kept only where the schema allows it,
``true`` is never an integer, and an integer stays an integer where a number is allowed.
"""

from __future__ import annotations

import copy
import json
import math
import re
import threading
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError

from toolgate.tools.argument_code import contained
from toolgate.tools.arguments_frozen import FrozenArguments, FrozenList, freeze, thaw
from toolgate.tools.declared.validator import declared_validator
from toolgate.tools.schema.walk import field_paths


class ArgumentsInvalid(ValueError):
    """Arguments that do not fit a tool's schema: one ``(path, problem)`` per finding.

    Paths are dotted field names (``items.0.sku``); problems never quote the input, which may
    hold anything the model wrote."""

    def __init__(self, problems: list[tuple[str, str]], *, code: str = "schema_invalid") -> None:
        super().__init__("; ".join(f"{path}: {problem}" for path, problem in problems))
        self.problems = problems
        self.code = code
        """The refusal code dispatch answers with: ``schema_invalid``, or ``undeclared_argument``
        for keys a tool loaded as published does not declare (`toolgate.tools.declared.closed`)."""

    @classmethod
    def from_validation_error(cls, exc: ValidationError) -> ArgumentsInvalid:
        """The problems of a pydantic validation error, without its input values."""
        return cls(
            [
                (".".join(str(p) for p in err["loc"]) or "(arguments)", err["msg"])
                for err in exc.errors(include_url=False, include_input=False, include_context=False)
            ]
        )


INT64_RANGE = (-(2**63), 2**63 - 1)
"""Integers the checkpoint serializer and every database column can hold."""


def unrepresentable(kept: Any) -> list[tuple[str, str]]:
    """``(path, problem)`` for each number in kept arguments that toolgate cannot hold: NaN or
    an infinity (canonical JSON, hence the digest, has no form for them) and an integer beyond
    64 bits (the checkpoint serializer refuses it).

    Screening refuses such numbers as the model sent them, but a contract can make one of what
    passed: a lax Pydantic model turns the text ``"nan"`` into NaN and a 31-digit text into a
    31-digit int; a declared ``integer`` sent as ``1e300`` (integral, so JSON Schema's integer)
    is kept as the int it equals. Iterative: kept arguments are as deep as what was screened."""
    problems: list[tuple[str, str]] = []
    stack: list[tuple[str, Any]] = [("", kept)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, Mapping):
            stack.extend((f"{path}.{key}" if path else str(key), item) for key, item in value.items())
        elif isinstance(value, list | tuple):
            stack.extend((f"{path}.{index}" if path else str(index), item) for index, item in enumerate(value))
        elif isinstance(value, float) and not math.isfinite(value):
            problems.append((path or "(arguments)", "must be a finite number"))
        elif isinstance(value, int) and not INT64_RANGE[0] <= value <= INT64_RANGE[1]:
            problems.append((path or "(arguments)", "must fit in 64 bits"))
    return sorted(problems)


class ArgumentContract(Protocol):
    """The argument semantics of one tool (see the module docstring for the promises)."""

    @property
    def properties(self) -> frozenset[str]:
        """Top-level argument names a call may carry."""
        ...

    @property
    def always_present(self) -> frozenset[str]:
        """Top-level names every kept call carries: required ones and those with a declared default."""
        ...

    def parse(self, raw: Any) -> dict[str, Any]:
        """The kept arguments (JSON values); raises `ArgumentsInvalid`."""
        ...

    def for_handler(self, arguments: Mapping[str, Any]) -> Any:
        """What the handler receives for kept arguments."""
        ...

    def json_schema(self) -> dict[str, Any]:
        """The arguments' JSON Schema as declared (before any provider export)."""
        ...

    def declared_fields(self) -> tuple[tuple[str, str], ...]:
        """``(path, property name)`` of every property `json_schema` declares, at every depth
        (`toolgate.tools.schema.walk.field_paths`), worked out once per schema: the spec checks
        ask for them on every `ToolSpec` built, and a ``dataclasses.replace`` builds one."""
        ...


@dataclass(frozen=True)
class ModelArguments:
    """The contract of a Python-typed tool: its Pydantic argument model is the authority.

    Kept arguments are the model's JSON form (by alias) of exactly the fields the call set, plus
    every field whose declared default is not ``None``. A ``= None`` default is how Pydantic makes
    a field optional, not a value its author chose, so an omitted optional field stays omitted
    (and an explicit ``null`` stays ``null``: they digest differently). Three JSON meanings are
    restored after Pydantic: a boolean never passes where the model turned it into a number (a
    strict ``Literal[1]`` accepts ``True``), an integer sent for a ``float`` field is kept as
    that integer (the handler, typed ``float``, still gets a float), and a set keeps the order the
    model sent (Pydantic dumps it in hash order, which differs between processes).

    Calls are validated as JSON (`_validated`): a strict model takes the strings and numbers its
    schema advertises for dates, UUIDs and enums, never Python objects a model cannot send.
    The handler gets a model instance whose ``model_fields_set`` names exactly the kept fields."""

    model: type[BaseModel]
    """The argument model (``extra="forbid"``, normally `StrictArgs`)."""

    @property
    def properties(self) -> frozenset[str]:
        """Top-level argument names (aliases where declared)."""
        return frozenset(info.alias or name for name, info in self.model.model_fields.items())

    @property
    def always_present(self) -> frozenset[str]:
        """Required fields and fields with a default other than ``None``."""
        return frozenset(
            info.alias or name
            for name, info in self.model.model_fields.items()
            if info.is_required() or info.default_factory is not None or info.default is not None
        )

    def parse(self, raw: Any) -> dict[str, Any]:
        """Validate with the model; keep what was given plus non-``None`` defaults. A model that
        runs its own code is validated contained (`toolgate.tools.argument_code`)."""
        return contained(self.model, self._parse, raw)

    def _parse(self, raw: Any) -> dict[str, Any]:
        try:
            instance = _validated(self.model, raw)
        except ValidationError as exc:
            raise ArgumentsInvalid.from_validation_error(exc) from None
        kept: dict[str, Any] = instance.model_dump(mode="json", by_alias=True, exclude=_omitted(instance))
        problems = list(_booleans_lost(raw, kept, "")) or self._published_patterns_broken(kept)
        if problems:
            raise ArgumentsInvalid(problems)
        restored: dict[str, Any] = _integers_restored(raw, kept)
        return restored

    def _published_patterns_broken(self, kept: dict[str, Any]) -> list[tuple[str, str]]:
        r"""``(path, problem)`` for each kept string the model's *published* ``pattern`` refuses.

        The schema the model is shown says ``pattern`` in ECMA-262, where ``\d`` and ``\w`` are
        ASCII; Pydantic matches ``Field(pattern=...)`` with Rust's regex, where they take every
        script's digits and letters (``^\d{4}$`` took ``"٢٠٢٦"``). For a model whose schema has
        such a class, the kept arguments are checked against its patterns as published
        (`toolgate.tools.declared.validator`), so what is enforced is what was shown; any other
        model costs nothing more."""
        validator = _pattern_validator(self.model, self._schema())
        if validator is None:
            return []
        return sorted(
            (".".join(str(p) for p in error.absolute_path) or "(arguments)", "does not match its pattern")
            for error in validator.iter_errors(kept)
            if error.validator == "pattern"
        )

    def for_handler(self, arguments: Mapping[str, Any]) -> BaseModel:
        """The model instance; fields not kept hold their model defaults and are not in
        ``model_fields_set`` (contained as `parse` is)."""
        return contained(self.model, _validated, self.model, arguments)

    def json_schema(self) -> dict[str, Any]:
        """The model's own JSON Schema (a copy of the one generated first for this model class:
        every spec check, registry build and binding asks again, and Pydantic's generation is
        most of what building a registry costs)."""
        return copy.deepcopy(self._schema())

    def declared_fields(self) -> tuple[tuple[str, str], ...]:
        """Every declared property's path and name, walked once per model class (`_FIELDS`)."""
        with _SCHEMAS_LOCK:
            fields = _FIELDS.get(self.model)
        if fields is None:
            fields = tuple((path, name) for path, name, _ in field_paths(self._schema()))
            with _SCHEMAS_LOCK:
                fields = _FIELDS.setdefault(self.model, fields)
        return fields

    def _schema(self) -> dict[str, Any]:
        """The schema generated first for this model class (shared: never hand it out unless copied)."""
        with _SCHEMAS_LOCK:
            schema = _SCHEMAS.get(self.model)
        if schema is None:
            schema = self.model.model_json_schema()
            with _SCHEMAS_LOCK:
                schema = _SCHEMAS.setdefault(self.model, schema)
        return schema


_SCHEMAS: weakref.WeakKeyDictionary[type[BaseModel], dict[str, Any]] = weakref.WeakKeyDictionary()
"""Each argument model's JSON Schema, kept while the model class lives (models made at run time,
an MCP server's, are not held)."""
_FIELDS: weakref.WeakKeyDictionary[type[BaseModel], tuple[tuple[str, str], ...]] = weakref.WeakKeyDictionary()
"""Each argument model's declared properties (`ModelArguments.declared_fields`), walked from the
schema in `_SCHEMAS` and kept as long as it is."""
_SCHEMAS_LOCK = threading.Lock()


_SCRIPT_CLASSES = re.compile(r"\\[dDwW]")
r"""``\d``, ``\D``, ``\w``, ``\W`` in a pattern: where ECMA-262 (ASCII) and Pydantic's regex differ."""
_PATTERN_VALIDATORS: weakref.WeakKeyDictionary[type[BaseModel], Any] = weakref.WeakKeyDictionary()
"""Each argument model's validator of its published patterns (None: none needs one)."""


def _pattern_validator(model: type[BaseModel], schema: dict[str, Any]) -> Any:
    """The validator of ``model``'s published schema when one of its patterns uses a class whose
    meaning differs between ECMA-262 and Pydantic, else None (worked out once per model class)."""
    with _SCHEMAS_LOCK:
        if model in _PATTERN_VALIDATORS:
            return _PATTERN_VALIDATORS[model]
    found = declared_validator(schema) if any(_SCRIPT_CLASSES.search(p) for p in _walk_patterns(schema)) else None
    with _SCHEMAS_LOCK:
        return _PATTERN_VALIDATORS.setdefault(model, found)


def _walk_patterns(node: Any, depth: int = 0) -> Iterator[str]:
    """Every string ``pattern`` keyword in a JSON Schema."""
    if depth > 64:
        return
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "pattern" and isinstance(value, str):
                yield value
            else:
                yield from _walk_patterns(value, depth + 1)
    elif isinstance(node, list):
        for item in node:
            yield from _walk_patterns(item, depth + 1)


def _validated(model: type[BaseModel], value: Any) -> BaseModel:
    """``value`` validated as the JSON it is (a strict model takes ``"2026-03-01"`` for a `date`
    and ``2`` for an `IntEnum`, as its schema advertises); a non-JSON value as Python."""
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return model.model_validate(value)
    return model.model_validate_json(text)


def _omitted(instance: BaseModel) -> dict[str, Any]:
    """A ``model_dump(exclude=...)`` spec of the unset fields whose default is ``None``, at every depth."""
    spec: dict[str, Any] = {}
    for name, info in type(instance).model_fields.items():
        if name not in instance.model_fields_set and info.default is None and info.default_factory is None:
            spec[name] = True
            continue
        nested = _omitted_in(instance.__dict__.get(name))
        if nested:
            spec[name] = nested
    return spec


def _omitted_in(value: Any) -> dict[Any, Any]:
    if isinstance(value, BaseModel):
        return _omitted(value)
    if isinstance(value, list | tuple):
        return {i: sub for i, item in enumerate(value) if (sub := _omitted_in(item))}
    if isinstance(value, dict):
        return {k: sub for k, item in value.items() if (sub := _omitted_in(item))}
    return {}


def _pairs(raw: Any, kept: Any) -> Iterator[tuple[str, Any, Any]]:
    """Children present in both a raw and a kept JSON value, with their key or index."""
    if isinstance(raw, Mapping) and isinstance(kept, dict):
        for key, value in kept.items():
            if key in raw:
                yield str(key), raw[key], value
    elif isinstance(raw, list | tuple) and isinstance(kept, list) and len(raw) == len(kept):
        for index, (a, b) in enumerate(zip(raw, kept, strict=True)):
            yield str(index), a, b


def _booleans_lost(raw: Any, kept: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(raw, bool) and not isinstance(kept, bool):
        yield path or "(arguments)", "must not be a boolean"
        return
    for key, a, b in _pairs(raw, kept):
        yield from _booleans_lost(a, b, f"{path}.{key}" if path else key)


def _integers_restored(raw: Any, kept: Any) -> Any:
    if isinstance(kept, float) and isinstance(raw, int) and not isinstance(raw, bool) and raw == kept:
        return raw
    if isinstance(kept, dict) and isinstance(raw, Mapping):
        return {k: _integers_restored(raw[k], v) if k in raw else v for k, v in kept.items()}
    if isinstance(kept, list) and isinstance(raw, list | tuple) and _reordered_set(raw, kept):
        return list(dict.fromkeys(raw))  # a set dumps in hash order, which varies by process
    if isinstance(kept, list) and isinstance(raw, list | tuple) and len(raw) == len(kept):
        return [_integers_restored(a, b) for a, b in zip(raw, kept, strict=True)]
    return kept


def _reordered_set(raw: list[Any] | tuple[Any, ...], kept: list[Any]) -> bool:
    """Whether ``kept`` is the set the model sent as ``raw`` (same scalars, each once, reordered)."""
    if kept == list(raw) or not all(isinstance(item, str | int | float) for item in (*raw, *kept)):
        return False
    return len(set(kept)) == len(kept) and set(kept) == set(raw)


__all__ = [
    "INT64_RANGE",
    "ArgumentContract",
    "ArgumentsInvalid",
    "FrozenArguments",
    "FrozenList",
    "ModelArguments",
    "freeze",
    "thaw",
    "unrepresentable",
]
