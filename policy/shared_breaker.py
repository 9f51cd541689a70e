"""Circuit breakers whose state lives in the store, so every process sharing it sees one breaker.

A breaker opened by failures in one process refuses in every other; after the reset timeout the
store's conditional update hands the single half-open probe to one caller across all processes;
the probe's verdict closes or reopens the breaker for everyone. Every timer (open until, probe
lease) runs on the store's clock (`toolgate.store.breakers`), so a process whose own clock is
skewed neither reopens nor closes a breaker early.

The fast path: a healthy dependency costs no store round trip. A process reads the shared row
when a call is admitted; a healthy reading (closed, no failures on record) is reused until the
row changes. On PostgreSQL the store says when it changes (`toolgate.store.changes`: a trigger
notifies every process), so a healthy breaker is read again only after a change notice (and at
least every ``LIVE_TRUST_S``, in case one went astray); then a breaker opened elsewhere refuses
here as soon as the notice arrives. Without notices (SQLite, or the listener reconnecting) the
reading is reused for ``sync_s``. ``sync_s=0`` reads on every call. An open or failing breaker is
read on every call. A success is written only when it changes something (failures to reset, a
probe to close). The store's state always decides.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from typing import Any

from toolgate.policy.breaker import (
    BreakerOpenError,
    BreakerRegistry,
    BreakerState,
    CircuitBreaker,
    counts_as_failure,
)
from toolgate.store.base import Store
from toolgate.store.changes import BREAKER

DEFAULT_SYNC_S = 1.0
"""How long a process trusts a healthy (closed, no failures) reading of the shared row when the
store sends no change notices."""
LIVE_TRUST_S = 60.0
"""How long a healthy reading is trusted while change notices arrive and none named this breaker."""


class SharedBreaker(CircuitBreaker):
    """One breaker over its store row; the same interface as `CircuitBreaker`."""

    def __init__(
        self,
        name: str,
        store: Store,
        *,
        owner: str,
        failure_threshold: int = 5,
        reset_timeout_s: float = 30.0,
        probe_lease_s: float | None = None,
        sync_s: float = DEFAULT_SYNC_S,
    ) -> None:
        super().__init__(name, failure_threshold, reset_timeout_s)
        self.store = store
        self.owner = owner
        self.probe_lease_s = probe_lease_s if probe_lease_s is not None else max(reset_timeout_s, 30.0)
        self.sync_s = sync_s
        self._healthy_until = 0.0  # monotonic: only how long a healthy reading is reused
        self._healthy_seen: tuple[int, ...] | None = None
        """The change notices seen before the healthy reading (None: no healthy reading)."""
        self._topics = (BREAKER + name,)
        self._local = threading.local()

    def _holder(self) -> str:
        """This caller across every process: the registry's owner id and this thread."""
        return f"{self.owner}:{threading.get_ident()}"

    @property
    def state(self) -> BreakerState:
        row = self.store.breakers.row(self.name)
        return row.state if row is not None else "closed"

    def acquire(self) -> None:
        """Permission for one call, decided by the store; `BreakerOpenError` when refused."""
        self._local.dirty = False
        if self._still_healthy():
            return
        changes = self.store.changes
        seen = changes.seen(self._topics) if self.sync_s > 0 else None  # before reading the row
        admit, retry_in, failures = self.store.breakers.admit(self.name, self._holder(), self.probe_lease_s)
        if admit == "open":
            with self._lock:
                self._rejected += 1
            self._healthy_until, self._healthy_seen = 0.0, None
            raise BreakerOpenError(self.name, retry_in)
        self._local.dirty = admit == "probe" or failures > 0
        if self._local.dirty:
            self._healthy_until, self._healthy_seen = 0.0, None
        else:
            now = time.monotonic()
            self._healthy_seen = seen
            self._healthy_until = now + (LIVE_TRUST_S if changes.live else self.sync_s)

    def _still_healthy(self) -> bool:
        """Whether the last healthy reading still stands: no change notice for this breaker since
        it (notices live), or it is younger than ``sync_s`` (no notices)."""
        seen = self._healthy_seen
        if seen is None or time.monotonic() >= self._healthy_until:
            return False
        changes = self.store.changes
        if changes.live:
            return not changes.changed(self._topics, seen)
        # no notices now: a reading taken while they arrived is trusted no longer than sync_s
        self._healthy_until = min(self._healthy_until, time.monotonic() + self.sync_s)
        return True

    def record_success(self) -> None:
        """A success: written only when it resets failures or closes this caller's probe."""
        if getattr(self._local, "dirty", True):
            self._report(failed=False)

    def record_failure(self) -> None:
        """A dependency failure: counted in the store (opening the breaker at the threshold)."""
        self._healthy_until, self._healthy_seen = 0.0, None
        row = self._report(failed=True)
        if row.state == "open":
            with self._lock:
                self._times_opened = row.times_opened

    def release(self) -> None:
        """Give back this thread's unreported probe (nothing otherwise)."""
        if getattr(self._local, "dirty", False):
            self.store.breakers.release(self.name, self._holder())

    def _report(self, *, failed: bool) -> Any:
        self._local.dirty = False
        return self.store.breakers.report(
            self.name,
            self._holder(),
            failed=failed,
            failure_threshold=self.failure_threshold,
            reset_timeout_s=self.reset_timeout_s,
        )

    def snapshot(self) -> dict[str, Any]:
        row = self.store.breakers.row(self.name)
        with self._lock:
            rejected = self._rejected
        return {
            "name": self.name,
            "state": row.state if row else "closed",
            "consecutive_failures": row.failures if row else 0,
            "failure_threshold": self.failure_threshold,
            "reset_timeout_s": self.reset_timeout_s,
            "retry_in_s": row.retry_in_s if row and row.state == "open" else 0.0,
            "probe_in_flight": bool(row and row.state == "half_open"),
            "rejected": rejected,
            "times_opened": row.times_opened if row else 0,
        }


class SharedBreakerRegistry(BreakerRegistry):
    """One shared breaker per key, over ``store``; every process gets the same state."""

    def __init__(
        self,
        store: Store,
        failure_threshold: int = 5,
        reset_timeout_s: float = 30.0,
        *,
        probe_lease_s: float | None = None,
        sync_s: float = DEFAULT_SYNC_S,
    ) -> None:
        super().__init__(failure_threshold, reset_timeout_s, counts_as_failure=counts_as_failure)
        self.store = store
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._shared: dict[str, Any] = {
            "failure_threshold": failure_threshold,
            "reset_timeout_s": reset_timeout_s,
            "probe_lease_s": probe_lease_s,
            "sync_s": sync_s,
        }

    def get(self, key: str) -> CircuitBreaker:
        with self._lock:
            breaker = self._breakers.get(key)
            if breaker is None:
                breaker = self._breakers[key] = SharedBreaker(
                    key, self.store, owner=self.owner, **self._shared
                )
            return breaker


__all__ = ["DEFAULT_SYNC_S", "LIVE_TRUST_S", "SharedBreaker", "SharedBreakerRegistry"]
