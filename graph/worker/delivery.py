"""The delivery pass of ``toolgate worker run`` (`toolgate.graph.worker.loop`): one batch of approved
operations per pass, each through `Executor.deliver`.

Each delivery first takes a tool-execution slot of the operation's stored tenant
(`toolgate.policy.admission`); with none free the operation is not claimed, stays approved and is
tried again after a short delay. An operation refused by its checks (or whose delivery raised) is
left alone for a delay that grows with each consecutive refusal (`toolgate.graph.worker.backoff`);
every line reporting one carries ``retry_in_s``, the seconds until this worker picks it again.
"""

from __future__ import annotations

import json
import random
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from toolgate import telemetry
from toolgate.graph.delivery.result import Delivery
from toolgate.policy.admission import Overloaded, admitted
from toolgate.store.records import OperationRecord

if TYPE_CHECKING:
    import threading
    from collections.abc import Callable

    from toolgate.graph.delivery.executor import Executor
    from toolgate.graph.worker.backoff import Backoff
    from toolgate.graph.worker.options import LoopOptions, LoopSummary, Report


_SPAN_OUTCOMES = {"succeeded": "completed"}
"""A delivery's operation status as the graph's tool spans name the outcome (the rest are alike)."""


def _delivery_span(executor: Executor, op: OperationRecord) -> AbstractContextManager[telemetry.ToolSpan]:
    """The ``execute_tool {tool}`` span of one delivery, as the graph's execute node opens it for a
    write: the proposal's call id and release, the operation key that joins it to the audit log."""
    proposal = executor.proposal(op.proposal_id)
    return telemetry.tool_span(
        tool=op.tool,
        call_id=proposal.call_id if proposal is not None else "",
        release=proposal.release if proposal is not None else "",
        operation_key=op.operation_key,
        kind="write",
    )


class DeliveryPass:
    """The deliveries of `WorkerLoop` (mixed in; uses its executor, options, summary and back-off)."""

    if TYPE_CHECKING:
        executor: Executor
        options: LoopOptions
        stop: threading.Event
        report: Report
        monotonic: Callable[[], float]
        summary: LoopSummary
        backoff: Backoff

        def _executor(self, key: str) -> Executor: ...

        def _limit_reached(self) -> bool: ...

        def _schedule_check(self, key: str) -> None: ...

    def deliver_due(self) -> int:
        """Try one batch of approved operations; the number of claims this worker won."""
        opts = self.options
        limit = opts.batch * 4 + len(self.backoff)
        window = self.executor.store.operations.due(limit)
        if len(window) < limit:  # the whole due set: forget the operations that left it
            self.backoff.keep_due({op.operation_key for op in window})
        now = self.monotonic()
        due = [op for op in window if self.backoff.ready(op.operation_key, now)]
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
            with (
                admitted(executor.auditor, "tool", op.tenant_id, operation_key=key, tool=op.tool),
                _delivery_span(executor, op) as span,
            ):
                delivery = executor.deliver(key, worker_id=opts.worker_id, lease_s=opts.lease_s, wait_s=0)
                span.set_duplicate_delivery(delivery.duplicate)
                span.set_outcome(_SPAN_OUTCOMES.get(delivery.status, delivery.status))
        except Overloaded as exc:  # audited as admission.overloaded; nothing claimed, still approved
            return self._overloaded(op, exc, full)
        except Exception as exc:  # one broken operation never stops the worker
            summary.errors += 1
            retry = self.backoff.refused(key, self.monotonic())
            self.report(
                {"operation_key": key, "claim": "ERROR", "error": type(exc).__name__, "retry_in_s": _s(retry)}
            )
            return 0
        if delivery.claim == "ACQUIRED":
            self.backoff.drop(key)
            summary.claimed += 1
            outcome = delivery.status if delivery.status in ("succeeded", "failed", "unknown") else "unknown"
            setattr(summary, outcome, getattr(summary, outcome) + 1)
            if delivery.status == "unknown":
                self._schedule_check(key)
            self.report({"operation_key": key, "claim": "ACQUIRED", "status": _shown(delivery)})
            return 1
        if delivery.status == "expired":
            summary.expired += 1
        elif delivery.claim == "NOT_ACQUIRED":
            summary.lost += 1  # another worker won the claim (or finished it) first
        elif delivery.status == "approved":
            self._not_delivered(key, delivery)
            return 0
        self.backoff.drop(key)  # no longer this worker's to retry
        return 0

    def _not_delivered(self, key: str, delivery: Delivery) -> None:
        """Refused by its checks (the delay grows) or deferred for load (the short delay)."""
        now = self.monotonic()
        # `Executor.deliver` answers a refusal by its checks with a reason alone, and a deferral
        # (``resource_busy``, ``circuit_open``: `toolgate.graph.delivery.same_resource.deferred`) with the
        # error it met (an open circuit's kind is ``server_error``, so the kind cannot tell)
        deferred = delivery.error is not None
        if deferred:
            self.summary.deferred += 1
            retry = self.backoff.deferred(key, now, self.options.retry_after_s)
        else:
            self.summary.refused += 1
            retry = self.backoff.refused(key, now)
        self.report(
            {
                "operation_key": key,
                "claim": "NOT_ATTEMPTED",
                "status": "deferred" if deferred else "refused",
                "reason": json.dumps(delivery.reason[:200]),
                "retry_in_s": _s(retry),
            }
        )

    def _overloaded(self, op: OperationRecord, exc: Overloaded, full: set[str | None]) -> int:
        """No free slot: the operation is deferred (retried after the short delay), and the rest
        of this pass skips its tenant's operations (or all, when the process cap is the one full)."""
        full.add(None if exc.scope == "process" else op.tenant_id)
        self.summary.deferred += 1
        retry_s = min(self.options.retry_after_s, exc.retry_after_s)
        retry = self.backoff.deferred(op.operation_key, self.monotonic(), retry_s)
        reason = json.dumps(f"{exc}; still approved"[:200])
        self.report(
            {
                "operation_key": op.operation_key,
                "claim": "NOT_ATTEMPTED",
                "status": "deferred",
                "reason": reason,
                "retry_in_s": _s(retry),
            }
        )
        return 0


def _shown(delivery: Delivery) -> str:
    return "completed" if delivery.status == "succeeded" else delivery.status


def _s(seconds: float) -> float:
    return round(seconds, 3)


__all__ = ["DeliveryPass"]
