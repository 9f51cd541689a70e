"""Durable waits: a thread suspended until the job its write started is done, as store records.

A write that declares a `toolgate.tools.waits.Wait` opens one wait per operation when it completes
(`open_wait`); the worker checks the job when the wait is due by the store's clock
(`due_waits`) and records each check in one conditional update (`record_wait_check`): the job
done, or the wait past its expiry by the store's clock, or a check refused for want of the
requesting user's sealed credentials (outcome ``refused``), makes it ``ready``; the resumed thread
marks it ``resumed``. Every row carries a MAC under the store's ``wait`` key over what gives it
authority (thread, job, state, outcome, result): a row changed outside the store reads back with
``verified=False``, and nothing acts on it.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, Literal

WaitState = Literal["waiting", "ready", "resumed"]
WaitOutcome = Literal["", "done", "expired", "refused"]


@dataclass(frozen=True, kw_only=True)
class WaitOf:
    """Whose wait it is and for what: the completed write, its thread and requester, the job."""

    operation_key: str
    thread_id: str
    tenant_id: str
    user_id: str
    call_id: str
    tool: str
    status_tool: str
    job_ref: str


@dataclass(frozen=True, kw_only=True)
class WaitIn(WaitOf):
    """What opens a wait: whose it is and the schedule of its checks."""

    every_s: float
    max_wait_s: float


@dataclass(frozen=True, kw_only=True)
class WaitRecord(WaitOf):
    """One stored wait."""

    state: WaitState
    outcome: WaitOutcome
    checks: int
    """Status checks recorded so far."""
    last_status: str
    """The job's status at the latest check (``error:<kind>`` when the check failed)."""
    result: dict[str, Any] | None
    """The status tool's (sanitized) result at the latest check."""
    every_s: float
    next_check_at: str
    expires_at: str
    created_at: str
    updated_at: str
    verified: bool
    """The row's MAC matches: it was written by the store, not changed outside it."""

    @property
    def final(self) -> bool:
        """The wait is over (ready or already resumed) and its row is the store's own."""
        return self.verified and self.state in ("ready", "resumed")

    def sealed_fields(self) -> dict[str, Any]:
        """What the row's MAC covers."""
        return wait_mac_fields(
            self.operation_key,
            self.thread_id,
            self.tenant_id,
            self.user_id,
            self.call_id,
            self.job_ref,
            self.state,
            self.outcome,
            self.checks,
            self.last_status,
            self.result,
            self.expires_at,
        )

    def facts(self) -> dict[str, Any]:
        """The wait as ``key=value`` facts (CLI output, stream events)."""
        return {
            "wait": self.operation_key,
            "thread": self.thread_id,
            "tool": self.tool,
            "job": self.job_ref,
            "state": self.state,
            "outcome": self.outcome or "none",
            "checks": self.checks,
            "job_status": self.last_status or "none",
            "next_check_at": self.next_check_at,
            "expires_at": self.expires_at,
            "verified": str(self.verified).lower(),
        }


def wait_mac_fields(*values: Any) -> dict[str, Any]:
    """The MAC'd fields of a wait row, by name (one definition for writing and checking)."""
    names = (
        "operation_key",
        "thread_id",
        "tenant_id",
        "user_id",
        "call_id",
        "job_ref",
        "state",
        "outcome",
        "checks",
        "last_status",
        "result",
        "expires_at",
    )
    return dict(zip(names, values, strict=True))


class DurableWaits(abc.ABC):
    """The durable-wait part of the `Store` contract."""

    @abc.abstractmethod
    def open_wait(self, wait: WaitIn) -> WaitRecord:
        """Open the wait of ``wait.operation_key`` (first check ``every_s`` from now, expiry
        ``max_wait_s`` from now, by the store's clock); an existing wait is returned unchanged."""

    @abc.abstractmethod
    def get_wait(self, operation_key: str) -> WaitRecord | None:
        """The wait of an operation, or None."""

    @abc.abstractmethod
    def due_waits(self, limit: int) -> list[WaitRecord]:
        """Waits still ``waiting`` whose next check is due by the store's clock, oldest due first."""

    @abc.abstractmethod
    def record_wait_check(
        self,
        operation_key: str,
        *,
        checks_seen: int,
        job_status: str,
        result: dict[str, Any] | None,
        done: bool,
        refused: bool = False,
    ) -> WaitRecord | None:
        """Record one check of a ``waiting``, verified wait that still has ``checks_seen`` checks
        (so two workers never both record one): ``done`` makes it ``ready`` (outcome ``done``);
        ``refused`` (the check could not run as the requesting user) makes it ``ready`` with
        outcome ``refused``; otherwise past its expiry by the store's clock it becomes ``ready``
        (``expired``), else the next check is due ``every_s`` from now. None, with nothing changed, when the wait is
        missing, not waiting, tampered with, or another check was recorded first."""

    @abc.abstractmethod
    def resume_wait(self, operation_key: str) -> bool:
        """Mark a verified ``ready`` wait ``resumed`` (its thread has its result); False otherwise."""

    @abc.abstractmethod
    def list_waits(self, state: WaitState | None = None, limit: int = 100) -> list[WaitRecord]:
        """Waits, newest first, optionally in one state."""


__all__ = ["DurableWaits", "WaitIn", "WaitOf", "WaitOutcome", "WaitRecord", "WaitState", "wait_mac_fields"]
