"""The release each thread keeps until it ends (`ThreadRelease` rows, table ``release_thread_pins``).

Independent of rollouts: the router records a thread's release on its first model turn and
every later node of the thread is served by that release; only an operator's migration changes
it. Rows are MAC-bound under the store's ``release`` key like every release-control row: a row
edited or inserted with database access alone reads back with ``authentic=False`` and trusted
code refuses to act on it (never re-signing it). Every write binds the row's version into the
audit chain in the same transaction (`toolgate.store.record_versions`), so an older pin copied
back reads as replayed and is refused the same way. Recording is an insert-if-absent, so however
many processes pin one thread at once the first pin is the one everyone reads back.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from toolgate.clock import iso, utcnow
from toolgate.errors import ReleaseControlError
from toolgate.store.base import Store, Tx
from toolgate.store.record_versions import Bound, VersionedRow, bind, bound_sql, freshness
from toolgate.store.rollout_records import ThreadRelease

ROUTER = "router"
"""``changed_by`` of a pin recorded by a thread's first model turn."""

_SELECT = (
    f"SELECT r.*, {bound_sql('thread_release', 'r.thread_id')} AS bound_sha256"
    " FROM release_thread_pins r WHERE r.thread_id = ?"
)
"""A thread's pin with the digest of its latest binding in the audit chain (one statement)."""


class ThreadReleases:
    """Per-thread release pins of one store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def _now(self, tx: Tx) -> str:
        tx_now = getattr(self.store, "_tx_now", None)
        return tx_now(tx) if tx_now is not None else iso(utcnow())

    def _mac(self, pin: ThreadRelease) -> str:
        return self.store.keys.mac("release", pin.content())

    def _read(self, row: dict[str, Any] | None) -> ThreadRelease | None:
        if row is None:
            return None
        data = dict(row)
        mac, bound = data.pop("mac"), data.pop("bound_sha256", None)
        pin = ThreadRelease(**{**data, "version": int(data["version"])})
        if not self.store.keys.verify("release", pin.content(), mac):
            return pin
        replayed = freshness("thread_release", pin.thread_id, pin.version, pin.content(), bound) == "replayed"
        return dataclasses.replace(pin, authentic=not replayed, replayed=replayed)

    def _bind(self, tx: Tx, pin: ThreadRelease) -> None:
        bound = Bound(
            kind="thread_release",
            key=pin.thread_id,
            version=pin.version,
            content=pin.content(),
            tenant_id=pin.tenant_id,
            thread_id=pin.thread_id,
            tool_release=pin.release,
        )
        bind(tx, self.store.audit, [bound])

    def get(self, thread_id: str) -> ThreadRelease | None:
        """The thread's pin (check ``authentic``), or None when it has none yet."""
        with self.store.transaction(write=False) as tx:
            return self._read(tx.one(_SELECT, (thread_id,)))

    def versioned_rows(self) -> list[VersionedRow]:
        """Every thread's pin as the audit chain's version bindings judge it."""
        with self.store.transaction(write=False) as tx:
            rows = tx.execute(_SELECT.replace(" WHERE r.thread_id = ?", " ORDER BY r.thread_id"))
        pins = [pin for pin in map(self._read, rows) if pin is not None]
        return [
            VersionedRow(
                kind="thread_release",
                key=p.thread_id,
                audited_key=p.thread_id,
                version=p.version,
                content=p.content(),
                mac_ok=p.authentic or p.replayed,
                tenant_id=p.tenant_id or None,
            )
            for p in pins
        ]

    def pin(self, thread_id: str, release: str, *, tenant_id: str, rollout_id: str = "") -> ThreadRelease:
        """Pin ``thread_id`` to ``release`` unless it is pinned already; the stored pin (the first
        one, whoever wrote it) comes back either way."""
        with self.store.transaction() as tx:
            pin = ThreadRelease(
                thread_id=thread_id,
                release=release,
                tenant_id=tenant_id,
                rollout_id=rollout_id,
                changed_by=ROUTER,
                version=1,
                updated_at=self._now(tx),
            )
            inserted = tx.execute(
                "INSERT INTO release_thread_pins (thread_id, release, tenant_id, rollout_id, changed_by,"
                " version, updated_at, mac) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
                " RETURNING thread_id",
                (thread_id, release, tenant_id, rollout_id, ROUTER, 1, pin.updated_at, self._mac(pin)),
            )
            row = tx.one(_SELECT, (thread_id,))
            if inserted:
                self._bind(tx, pin)
        found = self._read(row)
        assert found is not None
        return found

    def migrate(self, thread_id: str, to: str, *, by: str, expect_version: int) -> ThreadRelease:
        """Move ``thread_id`` to release ``to`` in one conditional change (`ReleaseControlError`,
        nothing written: ``unknown_thread``, ``thread_pin_tampered``, ``state_changed``)."""
        with self.store.transaction() as tx:
            if getattr(self.store, "dialect", "") == "postgres":
                tx.execute("SELECT 1 FROM release_thread_pins WHERE thread_id = ? FOR UPDATE", (thread_id,))
            current = self._read(tx.one(_SELECT, (thread_id,)))
            if current is None:
                raise ReleaseControlError("unknown_thread", f"thread {thread_id} has no release pin")
            if current.replayed:
                raise ReleaseControlError(
                    "thread_pin_tampered",
                    f"the release pin of thread {thread_id} is an older row copied back (version"
                    f" {current.version} is not the latest the audit chain bound)",
                )
            if not current.authentic:
                raise ReleaseControlError(
                    "thread_pin_tampered", f"the release pin of thread {thread_id} does not verify"
                )
            if current.version != expect_version:
                raise ReleaseControlError(
                    "state_changed", "the thread's pin changed since it was read; retry"
                )
            moved = dataclasses.replace(
                current,
                release=to,
                rollout_id="",
                changed_by=by,
                version=current.version + 1,
                updated_at=self._now(tx),
                authentic=True,
            )
            tx.send(  # the row is locked (FOR UPDATE above): it goes with the binding's chain head
                "UPDATE release_thread_pins SET release = ?, rollout_id = ?, changed_by = ?, version = ?,"
                " updated_at = ?, mac = ? WHERE thread_id = ? AND version = ?",
                (to, "", by, moved.version, moved.updated_at, self._mac(moved), thread_id, current.version),
            )
            self._bind(tx, moved)
        return moved


__all__ = ["ROUTER", "ThreadReleases"]
