"""One open transaction of the store, as systems of record and the store's row mixins see it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class Tx(Protocol):
    """One open transaction; SQL uses ``?`` placeholders on both backends."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Run one statement; rows (as dicts) when it returns any, else an empty list."""
        ...

    def one(self, sql: str, params: Sequence[Any] = ()) -> dict[str, Any] | None:
        """First row of a query, or None."""
        ...


__all__ = ["Tx"]
