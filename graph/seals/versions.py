"""The schema version of checkpointed state, and the steps that bring an older thread up to date.

A thread may wait at an approval interrupt for hours or days, across deploys, so the state a
node receives may have been written by older code. Each state carries the version of its schema
(``state_version``, sealed like every other key); a thread saved before states had one is
version 1. Before a node runs, the guard brings a state whose seal verified to the latest
version, one step at a time (`pending_update`), and seals the result with the node's own update.
A state newer than this code knows is never run: the guard refuses it (`UNSUPPORTED`).

To change the schema: append a step to `MIGRATIONS` (its position is the version it starts
from) and name any new key in `toolgate.graph.state.KEYS_ADDED_IN`. A released step never
changes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from toolgate.graph.seals.updates import apply_update, chain_updates

Migration = Callable[[Mapping[str, Any]], dict[str, Any]]
"""One step: a pure function of a state of version ``n`` (it changes nothing it is given) that
returns the update making it a state of version ``n + 1``. The runner stamps the version."""


def _to_version_2(state: Mapping[str, Any]) -> dict[str, Any]:
    """Version 2 adds only the ``state_version`` key, which the runner stamps."""
    return {}


def _to_version_3(state: Mapping[str, Any]) -> dict[str, Any]:
    """Version 3 adds ``unaudited_response``, which a thread saved before has no use for: its model
    turns' events were appended by the model node itself."""
    return {}


MIGRATIONS: tuple[Migration, ...] = (_to_version_2, _to_version_3)
"""Append-only: ``MIGRATIONS[n - 1]`` brings a state of version ``n`` to version ``n + 1``."""

CURRENT_VERSION = 1 + len(MIGRATIONS)
"""The version of the states this code writes."""

UNSUPPORTED = "state_version_unsupported"
"""The stable code of a refusal to run a state newer than this code knows."""


def latest_version(migrations: Sequence[Migration] | None = None) -> int:
    """The version ``migrations`` (by default `MIGRATIONS`) bring a state to."""
    return 1 + len(MIGRATIONS if migrations is None else migrations)


def version_of(state: Mapping[str, Any]) -> int:
    """The version of a verified state: its stamp, or 1 for a thread saved before states had one."""
    version = state.get("state_version")
    return 1 if version is None else int(version)


def migrate(state: Mapping[str, Any], migrations: Sequence[Migration] | None = None) -> dict[str, Any]:
    """The one update that brings ``state`` (verified) to the latest version: every step from its
    version on, in order, each given the state the step before it left; ``{}`` when current.

    Raises `ValueError` for a state newer than ``migrations`` know (the guard refuses it first).
    """
    steps = MIGRATIONS if migrations is None else tuple(migrations)
    version = version_of(state)
    if version > latest_version(steps):
        raise ValueError(f"state version {version} is newer than {latest_version(steps)}")
    current: Mapping[str, Any] = state
    update: dict[str, Any] = {}
    for target, step in enumerate(steps[version - 1 :], start=version + 1):
        step_update = {**step(current), "state_version": target}
        update = chain_updates(state, update, step_update)
        current = apply_update(current, step_update)
    return update


def pending_update(state: Mapping[str, Any], migrations: Sequence[Migration] | None = None) -> dict[str, Any]:
    """What the guard applies to a verified state before its node runs: a thread never sealed (a
    new one, holding only the user's input) starts at the latest version; an older one migrates."""
    if state.get("seal") is None:
        return {"state_version": latest_version(migrations)}
    return migrate(state, migrations)


__all__ = [
    "CURRENT_VERSION",
    "MIGRATIONS",
    "UNSUPPORTED",
    "Migration",
    "latest_version",
    "migrate",
    "pending_update",
    "version_of",
]
