"""An operator moves one thread to another release: ``toolgate release migrate-thread``.

A thread keeps the release it started with (`toolgate.graph.rollout.router`); the only way to move
it is this change, made by an authenticated person holding a role in `RELEASE_ROLES` of the
thread's own tenant (the tenant of the person whose first turn pinned it). The target must load
and verify against its reviewed manifest now, and be what a rollout could serve: the active
release or the rollback target (the bundles the release pointer recorded), or a candidate with
the evidence a rollout demands against the active release (refused with the missing evidence's
code, e.g. ``gate_not_passed``); a finished thread (nothing pending, status
``done`` or ``refused``) is not moved. The change is one conditional write of the MAC-bound pin
and one ``release.thread_migrated`` audit event with the actor (its keyed hash, as every actor
in the log), ``from`` and ``to``; every refusal changes nothing and is audited as
``release.refused`` with a stable code
(``unknown_thread``, ``thread_pin_tampered``, ``other_tenant``, ``thread_finished``,
``same_release``, ``unknown_release``, ``bundle_unverified``, ``state_changed``).
"""

from __future__ import annotations

from collections.abc import Callable

from toolgate.errors import RegistryError, ReleaseControlError, UnknownReleaseError
from toolgate.policy.principal import Principal
from toolgate.releases.control import ReleaseControl
from toolgate.releases.evidence import Binding
from toolgate.store.audit import Auditor
from toolgate.store.rollout_records import ThreadRelease
from toolgate.store.thread_releases import ThreadReleases

FINISHED_STATUSES = frozenset({"done", "refused"})
"""A thread in one of these, with no node pending, has ended: there is nothing left to migrate."""

ThreadStatus = Callable[[str], "tuple[bool, str]"]
"""``thread id`` -> ``(pending, status)`` from the checkpointer: whether a node is still to run
(an approval interrupt, a durable wait) and the state's status ("" for no checkpoint)."""


def migrate_thread(
    control: ReleaseControl, actor: Principal, thread: str, to: str, *, thread_status: ThreadStatus
) -> tuple[str, ThreadRelease]:
    """Pin ``thread`` to release ``to`` for ``actor``; returns ``(from, the new pin)``."""

    def run() -> tuple[str, ThreadRelease]:
        pins = ThreadReleases(control.app.store)
        pin = pins.get(thread)
        if pin is None:
            raise ReleaseControlError("unknown_thread", f"thread {thread} has no release pin")
        if not pin.authentic:
            raise ReleaseControlError(
                "thread_pin_tampered",
                f"the release pin of thread {thread} does not verify; refusing to act on it",
            )
        if pin.tenant_id and pin.tenant_id != actor.tenant_id:
            raise ReleaseControlError("other_tenant", f"thread {thread} belongs to another tenant")
        pending, status = thread_status(thread)
        if not pending and status in FINISHED_STATUSES:
            raise ReleaseControlError("thread_finished", f"thread {thread} has ended ({status})")
        if to == pin.release:
            raise ReleaseControlError("same_release", f"thread {thread} is already pinned to {to}")
        try:
            to_sha = control.gateways.verify(to)
        except UnknownReleaseError as exc:
            raise ReleaseControlError("unknown_release", str(exc)[:300]) from exc
        except RegistryError as exc:
            raise ReleaseControlError("bundle_unverified", f"release {to}: {exc}") from exc
        _require_evidence(control, to, to_sha)
        moved = pins.migrate(thread, to, by=actor.user_id, expect_version=pin.version)
        Auditor(control.app.store, to).record(
            "release.thread_migrated",
            "migrated",
            user_id=actor.user_id,
            thread_id=thread,
            tenant_id=pin.tenant_id or None,
            detail={"from": pin.release, "to": to, "version": moved.version},  # who: the actor id
        )
        return pin.release, moved

    result: tuple[str, ThreadRelease] = control._act(actor, "migrate_thread", run)
    return result


def _require_evidence(control: ReleaseControl, to: str, to_sha: str) -> None:
    """Refuse ``to`` (its verified bundle ``to_sha``) unless it is what everyone may be served: the
    active release or the rollback target, as the pointer recorded their bundles, or a candidate
    holding the evidence a rollout demands against the active release (a passed gate on the
    required dataset, its review, a rollback dry run of the active release). Without this a
    thread moved to any installed release served its high-risk tools with no gate and no stop."""
    state = control.state()
    active = control.active(state)
    pointer = state.pointer
    if to == active and (pointer is None or to_sha == pointer.active_sha256):
        return
    if pointer is not None and to == pointer.previous and to_sha == pointer.previous_sha256:
        return
    control.evidence.require(Binding(to, to_sha, active, control.manifest_sha256(active)))


__all__ = ["FINISHED_STATUSES", "ThreadStatus", "migrate_thread"]
