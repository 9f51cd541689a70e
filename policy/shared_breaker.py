"""Circuit breakers whose state lives in the store, so every process sharing it sees one breaker.

A breaker opened by failures in one process refuses in every other; after the reset timeout the
store's conditional update hands the single half-open probe to one caller across all processes;
the probe's verdict closes or reopens the breaker for everyone. Every timer (open until, probe
lease) runs on the store's clock (`toolgate.store.breakers`), so a process whose own clock is
skewed neither reopens nor closes a breaker early.

The fast path: a healthy dependency costs no store write. A process reads the shared row when a
call is admitted, at most once per ``sync_s`` while the breaker is closed with no failures on
record (then a breaker opened elsewhere refuses here within ``sync_s``); an open or failing
breaker is read on every call. A success is written only when it changes something (failures to
reset, a probe to close). The store's state always decides.
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

DEFAULT_SYNC_S = 1.0
"""How long a process trusts a healthy (closed, no failures) reading of the shared row."""


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
        if time.monotonic() < self._healthy_until:
            return
        admit, retry_in, failures = self.store.breakers.admit(self.name, self._holder(), self.probe_lease_s)
        if admit == "open":
            with self._lock:
                self._rejected += 1
            self._healthy_until = 0.0
            raise BreakerOpenError(self.name, retry_in)
        self._local.dirty = admit == "probe" or failures > 0
        self._healthy_until = time.monotonic() + self.sync_s if not self._local.dirty else 0.0

    def record_success(self) -> None:
        """A success: written only when it resets failures or closes this caller's probe."""
        if getattr(self._local, "dirty", True):
            self._report(failed=False)

    def record_failure(self) -> None:
        """A dependency failure: counted in the store (opening the breaker at the threshold)."""
        self._healthy_until = 0.0
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


__all__ = ["DEFAULT_SYNC_S", "SharedBreaker", "SharedBreakerRegistry"]
