"""``toolgate worker run``: delivery, reconciliation and recovery that run by themselves.

One loop per process. On start-up it recovers abandoned claims once (`recover_abandoned`) and
schedules a status check of every unknown outcome; then, until stopped, it

- delivers approved operations, longest approved first, each through `Executor.deliver`, the one
  path that re-verifies the approval from the store (a forged or voided decision is refused and
  audited there) and claims the operation in one conditional update, so several workers on one
  PostgreSQL share the work with no operation executed twice (the store's ``due_operations`` is
  only a hint; the claim decides). A worker that loses a claim moves on at once (``wait_s=0``).
  Each delivery first takes a tool-execution slot of the operation's stored tenant
  (`toolgate.policy.admission`, the caps the graph's execute path shares); with none free the
  operation is not claimed, stays approved and is retried on a later pass (audited as
  ``admission.overloaded``);
- checks each unknown outcome on its schedule (``delays``, the ``TOOLGATE_RECONCILE_DELAYS``
  backoff), never sleeping on one: a found effect becomes ``succeeded``, an absent retry-safe one
  ``approved`` again (and is delivered by the next pass), and after the last check the rest go to
  the dead letters;
- recovers abandoned claims again every ``recover_every_s`` (lease lapsed by the store's clock,
  plus ``grace_s``: a worker's own clock never judges a lease).

It acts only on the store's records: nothing here reads a checkpoint. ``stop`` (an event set by
the CLI's signal handlers, or by a test) stops claiming; the delivery in flight finishes first.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from toolgate.errors import StoreError
from toolgate.graph.delivery import Delivery
from toolgate.graph.execution import Executor
from toolgate.graph.recovery import DEFAULT_DELAYS, reconcile, recover_abandoned
from toolgate.graph.worker_signals import stop_on_signals
from toolgate.policy.admission import Overloaded, admitted
from toolgate.store.records import OperationRecord

Report = Callable[[dict[str, Any]], None]
"""Receives one fact line per event (a delivery, a recovery, a status check)."""


@dataclass(frozen=True, kw_only=True)
class LoopOptions:
    """How one worker loop runs."""

    worker_id: str
    poll_s: float = 1.0
    """Wait between passes that found nothing to do."""
    batch: int = 10
    """Operations tried per pass."""
    once: bool = False
    """Drain what is due (deliveries and scheduled status checks), then stop."""
    max_operations: int | None = None
    """Stop after this many claims won."""
    lease_s: float = 60.0
    grace_s: float = 30.0
    recover_every_s: float = 10.0
    delays: tuple[float, ...] = DEFAULT_DELAYS
    retry_after_s: float = 30.0
    """How long this worker leaves alone an operation it was refused or deferred on."""


@dataclass
class LoopSummary:
    """What one run did (the CLI's closing line)."""

    claimed: int = 0
    succeeded: int = 0
    failed: int = 0
    unknown: int = 0
    refused: int = 0
    deferred: int = 0
    lost: int = 0
    expired: int = 0
    errors: int = 0
    recovered: int = 0
    reconciled: int = 0
    dead_lettered: int = 0
    stopped: str = ""

    def facts(self) -> dict[str, Any]:
        """The summary as ``key=value`` facts, ``stopped`` first."""
        data = asdict(self)
        return {"stopped": data.pop("stopped"), **data}


@dataclass
class _Check:
    done: int
    due: float


@dataclass
class WorkerLoop:
    """The loop; ``executor_for`` picks the executor of an operation's release."""

    executor: Executor
    options: LoopOptions
    stop: threading.Event = field(default_factory=threading.Event)
    executor_for: Callable[[str], Executor] | None = None
    report: Report = lambda facts: None
    monotonic: Callable[[], float] = time.monotonic
    wait_pass: Callable[[], int] | None = None
    """Checks due job waits and resumes their threads (`toolgate.graph.wait_pass`), once per pass."""
    summary: LoopSummary = field(default_factory=LoopSummary)
    _checks: dict[str, _Check] = field(default_factory=dict)
    _backoff: dict[str, float] = field(default_factory=dict)

    def run(self) -> LoopSummary:
        """Run until stopped, drained (``once``) or ``max_operations`` claims; return the summary."""
        opts = self.options
        self.recover()
        next_recovery = self.monotonic() + opts.recover_every_s
        while True:
            if self.stop.is_set():
                self.summary.stopped = "signal"
                break
            if self._limit_reached():
                self.summary.stopped = "max_operations"
                break
            try:
                if self.monotonic() >= next_recovery:
                    next_recovery = self.monotonic() + opts.recover_every_s
                    self.recover()
                self.check_due()
                claimed = self.deliver_due()
                if self.wait_pass is not None:
                    self.wait_pass()
            except StoreError as exc:
                if opts.once:
                    raise  # a drain run by cron fails loudly
                # the database went away for a moment: a long-running worker waits and tries again
                self.summary.errors += 1
                self.report(
                    {"worker": opts.worker_id, "error": "store_unavailable", "kind": type(exc).__name__}
                )
                claimed = 0
            if claimed:
                continue
            if opts.once and not self._checks:
                self.summary.stopped = "drained"
                break
            now = self.monotonic()
            waits = [opts.poll_s, next_recovery - now, *(c.due - now for c in self._checks.values())]
            self.stop.wait(max(min(waits), 0.0))
        return self.summary

    # ---- recovery and status checks -------------------------------------------------------

    def recover(self) -> None:
        """Mark abandoned claims unknown and schedule a status check of every unknown outcome."""
        for key in recover_abandoned(self.executor, self.options.grace_s):
            self.summary.recovered += 1
            self.report({"operation_key": key, "recovered": "unknown"})
        self.executor.store.purge_delegations()  # sealed credentials of ended or expired operations
        first = (self.options.delays or (0.0,))[0]
        for op in self.executor.store.list_operations("unknown"):
            self._checks.setdefault(op.operation_key, _Check(done=0, due=self.monotonic() + first))

    def check_due(self) -> None:
        """Run each status check whose time has come (one check each, never a sleep)."""
        delays = self.options.delays or (0.0,)
        for key, check in list(self._checks.items()):
            if self.stop.is_set():
                return
            if check.due > self.monotonic():
                continue
            final = check.done + 1 >= len(delays)
            try:
                item = reconcile(self._executor(key), key, delays=(0.0,), sleep=lambda _: None, final=final)
            except Exception as exc:  # a broken status check never stops the worker; it stays unknown
                self.summary.errors += 1
                check.due = self.monotonic() + delays[-1]
                self.report({"operation_key": key, "reconciled": "error", "error": type(exc).__name__})
                continue
            check.done += 1
            if item.status in ("pending", "in_flight"):
                check.due = self.monotonic() + delays[min(check.done, len(delays) - 1)]
                continue
            del self._checks[key]
            if item.status == "unchanged":
                continue
            self.summary.reconciled += 1
            self.summary.dead_lettered += item.status == "dead_lettered"
            self.report({"operation_key": key, "reconciled": item.status, "checks": check.done})

    # ---- deliveries -------------------------------------------------------------------------

    def deliver_due(self) -> int:
        """Try one batch of approved operations; the number of claims this worker won."""
        opts = self.options
        now = self.monotonic()
        self._backoff = {k: t for k, t in self._backoff.items() if t > now}
        window = self.executor.store.due_operations(opts.batch * 4 + len(self._backoff))
        due = [op for op in window if op.operation_key not in self._backoff]
        # workers scanning the same oldest rows would all race for the first: each tries its own
        # shuffle of the oldest window (the claim still decides; a lost claim costs one update)
        random.shuffle(due)
        claimed = 0
        full: set[str | None] = set()  # tenants refused a slot in this pass (None: the process)
        for op in due[: opts.batch]:
            if self.stop.is_set() or self._limit_reached() or None in full:
                break
            if op.tenant_id not in full:
                claimed += self._deliver(op, full)
        return claimed

    def _deliver(self, op: OperationRecord, full: set[str | None]) -> int:
        opts, summary, key = self.options, self.summary, op.operation_key
        try:
            executor = self._executor(key)
            # a tool-execution slot of the operation's stored tenant, before any claim (as the
            # graph's execute path takes): held while the handler runs
            with admitted(executor.auditor, "tool", op.tenant_id, operation_key=key, tool=op.tool):
                delivery = executor.deliver(key, worker_id=opts.worker_id, lease_s=opts.lease_s, wait_s=0)
        except Overloaded as exc:  # audited as admission.overloaded; nothing claimed, still approved
            return self._overloaded(op, exc, full)
        except Exception as exc:  # one broken operation never stops the worker
            summary.errors += 1
            self._backoff[key] = self.monotonic() + opts.retry_after_s
            self.report({"operation_key": key, "claim": "ERROR", "error": type(exc).__name__})
            return 0
        if delivery.claim == "ACQUIRED":
            summary.claimed += 1
            outcome = delivery.status if delivery.status in ("succeeded", "failed", "unknown") else "unknown"
            setattr(summary, outcome, getattr(summary, outcome) + 1)
            if delivery.status == "unknown":
                first = (opts.delays or (0.0,))[0]
                self._checks.setdefault(key, _Check(done=0, due=self.monotonic() + first))
            self.report({"operation_key": key, "claim": "ACQUIRED", "status": _shown(delivery)})
            return 1
        if delivery.status == "expired":
            summary.expired += 1
        elif delivery.claim == "NOT_ACQUIRED":
            summary.lost += 1  # another worker won the claim (or finished it) first
        elif delivery.status == "approved":
            deferred = (delivery.error or {}).get("kind") in ("resource_busy", "circuit_open")
            if deferred:
                summary.deferred += 1
            else:
                summary.refused += 1
            self._backoff[key] = self.monotonic() + opts.retry_after_s
            self.report(
                {
                    "operation_key": key,
                    "claim": "NOT_ATTEMPTED",
                    "status": "deferred" if deferred else "refused",
                    "reason": json.dumps(delivery.reason[:200]),
                }
            )
        return 0

    def _overloaded(self, op: OperationRecord, exc: Overloaded, full: set[str | None]) -> int:
        """No free slot: the operation is deferred (retried on a later pass), and the rest of this
        pass skips its tenant's operations (or all, when the process cap is the one full)."""
        full.add(None if exc.scope == "process" else op.tenant_id)
        self.summary.deferred += 1
        retry_s = min(self.options.retry_after_s, exc.retry_after_s)
        self._backoff[op.operation_key] = self.monotonic() + retry_s
        reason = json.dumps(f"{exc}; still approved"[:200])
        self.report(
            {
                "operation_key": op.operation_key,
                "claim": "NOT_ATTEMPTED",
                "status": "deferred",
                "reason": reason,
            }
        )
        return 0

    def _executor(self, key: str) -> Executor:
        return self.executor_for(key) if self.executor_for is not None else self.executor

    def _limit_reached(self) -> bool:
        limit = self.options.max_operations
        return limit is not None and self.summary.claimed >= limit


def _shown(delivery: Delivery) -> str:
    return "completed" if delivery.status == "succeeded" else delivery.status


__all__ = ["LoopOptions", "LoopSummary", "Report", "WorkerLoop", "stop_on_signals"]
