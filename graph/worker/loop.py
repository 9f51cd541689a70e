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
  ``admission.overloaded``). An operation it could not deliver is left alone for a while: a
  short fixed delay after a deferral for load, a delay doubling per consecutive refusal or error
  up to ``retry_max_s`` (`toolgate.graph.worker.backoff`; scheduling only, the claim decides);
- checks each unknown outcome on its schedule (``delays``, the ``TOOLGATE_RECONCILE_DELAYS``
  backoff), never sleeping on one: a found effect becomes ``succeeded``, an absent retry-safe one
  ``approved`` again (and is delivered by the next pass), and after the last check the rest go to
  the dead letters; a check that breaks (loaded code raised: audited ``status_check_broke``)
  counts as one of the schedule, so a check that always breaks ends in the dead letters too;
- recovers abandoned claims again every ``recover_every_s`` (lease lapsed by the store's clock,
  plus ``grace_s``: a worker's own clock never judges a lease).

It acts only on the store's records: nothing here reads a checkpoint. ``stop`` (an event set by
the CLI's signal handlers, or by a test) stops claiming; the delivery in flight finishes first.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from toolgate.errors import StoreError
from toolgate.graph.delivery.executor import Executor
from toolgate.graph.delivery.recovery import dead_letter_broken, reconcile, recover_abandoned
from toolgate.graph.worker.backoff import Backoff
from toolgate.graph.worker.delivery import DeliveryPass
from toolgate.graph.worker.options import LoopOptions, LoopSummary, Report
from toolgate.graph.worker.signals import stop_on_signals


@dataclass
class _Check:
    done: int
    due: float


@dataclass
class WorkerLoop(DeliveryPass):
    """The loop; ``executor_for`` picks the executor of an operation's release (its delivery pass
    is `toolgate.graph.worker.delivery`)."""

    executor: Executor
    options: LoopOptions
    stop: threading.Event = field(default_factory=threading.Event)
    executor_for: Callable[[str], Executor] | None = None
    report: Report = lambda facts: None
    monotonic: Callable[[], float] = time.monotonic
    wait_pass: Callable[[], int] | None = None
    """Checks due job waits and resumes their threads (`toolgate.graph.waits.progress`), once per pass."""
    summary: LoopSummary = field(default_factory=LoopSummary)
    _checks: dict[str, _Check] = field(default_factory=dict)
    backoff: Backoff = field(init=False)
    """When this worker picks again an operation it could not deliver (from ``options``)."""

    def __post_init__(self) -> None:
        self.backoff = Backoff(base_s=self.options.retry_after_s, cap_s=self.options.retry_max_s)

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
        self.summary.backing_off = self.backoff.waiting(self.monotonic())
        return self.summary

    # ---- recovery and status checks -------------------------------------------------------

    def recover(self) -> None:
        """Mark abandoned claims unknown and schedule a status check of every unknown outcome."""
        for key in recover_abandoned(self.executor, self.options.grace_s):
            self.summary.recovered += 1
            self.report({"operation_key": key, "recovered": "unknown"})
        self.executor.store.delegations.purge()  # sealed credentials of ended or expired operations
        for op in self.executor.store.operations.list("unknown"):
            self._schedule_check(op.operation_key)

    def _schedule_check(self, key: str) -> None:
        """A first status check of the unknown outcome of ``key`` (unless one is scheduled)."""
        first = (self.options.delays or (0.0,))[0]
        self._checks.setdefault(key, _Check(done=0, due=self.monotonic() + first))

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
            except Exception as exc:  # a broken status check never stops the worker
                self.summary.errors += 1
                self.report({"operation_key": key, "reconciled": "error", "error": type(exc).__name__})
                if isinstance(exc, StoreError) or not final:  # checked again later: it stays unknown
                    check.done += not isinstance(exc, StoreError)
                    check.due = self.monotonic() + delays[-1]
                    continue
                # the schedule's last check broke too: a person decides (never unknown for ever)
                item = dead_letter_broken(self._executor(key), key, error=type(exc).__name__, checks=check.done + 1)
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

    def _executor(self, key: str) -> Executor:
        return self.executor_for(key) if self.executor_for is not None else self.executor

    def _limit_reached(self) -> bool:
        limit = self.options.max_operations
        return limit is not None and self.summary.claimed >= limit


__all__ = ["LoopOptions", "LoopSummary", "Report", "WorkerLoop", "stop_on_signals"]
