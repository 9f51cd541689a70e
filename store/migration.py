"""`Migration`: one schema step, the unit every component's schema is written in."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Migration:
    """One schema step with its SQL for each backend (statements separated by ``;\\n``)."""

    name: str
    """What the step does."""
    sqlite: str
    """SQL for SQLite."""
    postgres: str
    """SQL for PostgreSQL."""


__all__ = ["Migration"]
