"""Read-only JSON values: what a JSON-Schema tool's handler receives (`FrozenArguments`).

Split from `toolgate.tools.arguments`, which re-exports these names: the handler of a tool
registered from a JSON Schema gets exactly the kept arguments, and must not be able to change
what the proposal, digest and audit hold.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any, NoReturn, SupportsIndex


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


__all__ = ["FrozenArguments", "FrozenList", "freeze", "thaw"]
