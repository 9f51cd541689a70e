"""What a model's arguments mean to toolgate: the argument contract behind `ToolSpec`.

`ToolSpec.parse_arguments` and `ToolSpec.handler_arguments` delegate here. One contract per tool:

- `ModelArguments` for Python-typed tools (a Pydantic model with ``extra="forbid"``);
- `toolgate.tools.declared.JsonSchemaArguments` for tools registered from a provider JSON Schema.

Both keep the same promises, so the proposal, its digest, the operation key, the audit projection
and what the reviewer sees mean what the model sent: an omitted argument stays omitted (a field with
a declared default is filled with it, visibly), ``null`` is kept only where the schema allows it,
``true`` is never an integer, and an integer stays an integer where a number is allowed.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol, SupportsIndex

from pydantic import BaseModel, ValidationError


class ArgumentsInvalid(ValueError):
    """Arguments that do not fit a tool's schema: one ``(path, problem)`` per finding.

    Paths are dotted field names (``items.0.sku``); problems never quote the input, which may
    hold anything the model wrote."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{path}: {problem}" for path, problem in problems))
        self.problems = problems

    @classmethod
    def from_validation_error(cls, exc: ValidationError) -> ArgumentsInvalid:
        """The problems of a pydantic validation error, without its input values."""
        return cls(
            [
                (".".join(str(p) for p in err["loc"]) or "(arguments)", err["msg"])
                for err in exc.errors(include_url=False, include_input=False, include_context=False)
            ]
        )


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


def _refuse() -> NoReturn:
    raise TypeError("tool arguments are read-only; copy them with dict(...) or thaw() to change them")


class FrozenList(list[Any]):
    """A JSON array a handler may read but not change (still a `list` for ``isinstance`` and JSON)."""

    def __setitem__(self, index: Any, value: Any) -> None:
        _refuse()

    def __delitem__(self, index: Any) -> None:
        _refuse()

    def __iadd__(self, other: Iterable[Any]) -> FrozenList:  # type: ignore[misc]
        _refuse()

    def __imul__(self, count: SupportsIndex) -> FrozenList:
        _refuse()

    def append(self, value: Any) -> None:
        _refuse()

    def extend(self, values: Iterable[Any]) -> None:
        _refuse()

    def insert(self, index: SupportsIndex, value: Any) -> None:
        _refuse()

    def pop(self, index: SupportsIndex = -1) -> Any:
        _refuse()

    def remove(self, value: Any) -> None:
        _refuse()

    def clear(self) -> None:
        _refuse()

    def sort(self, *args: Any, **kwargs: Any) -> None:
        _refuse()

    def reverse(self) -> None:
        _refuse()

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenList:
        return FrozenList(copy.deepcopy(list(self), memo))

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenList, (list(self),))


class FrozenArguments(dict[str, Any]):
    """The arguments a JSON-Schema tool's handler receives: exactly the kept ones, read-only.

    It is a `dict` (so ``json.dumps`` and ``isinstance(args, dict)`` work, and a handler can
    forward it to an API as it is) whose mutators raise `TypeError`; nested objects and arrays are
    read-only too. ``args.thaw()`` gives a mutable deep copy."""

    def __setitem__(self, key: str, value: Any) -> None:
        _refuse()

    def __delitem__(self, key: str) -> None:
        _refuse()

    def __ior__(self, other: Any) -> FrozenArguments:  # type: ignore[override,misc]
        _refuse()

    def clear(self) -> None:
        _refuse()

    def pop(self, *args: Any) -> Any:
        _refuse()

    def popitem(self) -> tuple[str, Any]:
        _refuse()

    def setdefault(self, *args: Any) -> Any:
        _refuse()

    def update(self, *args: Any, **kwargs: Any) -> None:
        _refuse()

    def thaw(self) -> dict[str, Any]:
        """A deep, mutable copy as plain dicts and lists."""
        thawed: dict[str, Any] = thaw(self)
        return thawed

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenArguments:
        return FrozenArguments(copy.deepcopy(dict(self), memo))

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenArguments, (dict(self),))


def freeze(value: Any) -> Any:
    """A read-only deep copy of a JSON value (objects become `FrozenArguments`, arrays `FrozenList`)."""
    if isinstance(value, Mapping):
        return FrozenArguments({str(k): freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return FrozenList(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """A mutable deep copy of a JSON value (plain dicts and lists)."""
    if isinstance(value, Mapping):
        return {str(k): thaw(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [thaw(v) for v in value]
    return value


@dataclass(frozen=True)
class ModelArguments:
    """The contract of a Python-typed tool: its Pydantic argument model is the authority.

    Kept arguments are the model's JSON form (by alias) of exactly the fields the call set, plus
    every field whose declared default is not ``None``. A ``= None`` default is how Pydantic makes
    a field optional, not a value its author chose, so an omitted optional field stays omitted
    (and an explicit ``null`` stays ``null``: they digest differently). Two JSON meanings are
    restored after Pydantic: a boolean never passes where the model turned it into a number (a
    strict ``Literal[1]`` accepts ``True``), and an integer sent for a ``float`` field is kept as
    that integer (the handler, typed ``float``, still gets a float).

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
        """Validate with the model; keep what was given plus non-``None`` defaults."""
        try:
            instance = self.model.model_validate(raw)
        except ValidationError as exc:
            raise ArgumentsInvalid.from_validation_error(exc) from None
        kept: dict[str, Any] = instance.model_dump(mode="json", by_alias=True, exclude=_omitted(instance))
        problems = list(_booleans_lost(raw, kept, ""))
        if problems:
            raise ArgumentsInvalid(problems)
        restored: dict[str, Any] = _integers_restored(raw, kept)
        return restored

    def for_handler(self, arguments: Mapping[str, Any]) -> BaseModel:
        """The model instance; fields not kept hold their model defaults and are not in ``model_fields_set``."""
        return self.model.model_validate(arguments)

    def json_schema(self) -> dict[str, Any]:
        """The model's own JSON Schema."""
        return self.model.model_json_schema()


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
    if isinstance(kept, list) and isinstance(raw, list | tuple) and len(raw) == len(kept):
        return [_integers_restored(a, b) for a, b in zip(raw, kept, strict=True)]
    return kept


__all__ = [
    "ArgumentContract",
    "ArgumentsInvalid",
    "FrozenArguments",
    "FrozenList",
    "ModelArguments",
    "freeze",
    "thaw",
]
