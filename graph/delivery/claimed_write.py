"""The effect itself: running the handler of a write this worker has claimed, and storing its outcome.

Everything before the claim (`toolgate.graph.delivery.executor`) decides whether a write may run; this is
the only place one does, and so the only place an outcome can become ``unknown``. A timeout or an
unclassified crash may have had its effect: the outcome is ``unknown`` (never ``failed``), and a
handler still running past its timeout keeps its lease renewed until it ends, records a late
success if it has one, and only then lets reconciliation (`toolgate.graph.delivery.recovery`) take over.
Each outcome is persisted with its audit events, conditional on still owning the claim, before
the caller is answered.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import threading
from dataclasses import dataclass, field
from typing import Any

from toolgate.errors import InvalidTransitionError, ToolExecutionError
from toolgate.graph.delivery.capability_audit import audit_denial
from toolgate.graph.delivery.drift_audit import audit_drift
from toolgate.graph.delivery.overruns import Overruns
from toolgate.graph.delivery.result import Delivery
from toolgate.graph.delivery.same_resource import ResourceHold
from toolgate.policy.breaker import CircuitBreaker
from toolgate.policy.output import MAX_FAILURE_MESSAGE, handler_failure, plain_result, redact_text
from toolgate.store.audit import Auditor
from toolgate.store.base import Store
from toolgate.store.handler_access import HandlerAccess
from toolgate.store.records import OperationStatus
from toolgate.tools import loaded_code
from toolgate.tools.spec import HandlerContext, ToolSpec


@dataclass(frozen=True, kw_only=True)
class ClaimedWrite:
    """One operation whose claim this worker holds, from its handler's start to its stored outcome
    (``operation.claimed`` and ``handler.started`` were appended with the claim)."""

    store: Store
    auditor: Auditor
    overruns: Overruns
    """Where a handler that outlives its timeout is watched (never delivered again meanwhile)."""
    spec: ToolSpec
    operation_key: str
    worker_id: str
    lease_s: float
    common: dict[str, Any]
    """The fields every audit event of this delivery carries."""
    hold: ResourceHold
    """The leases on the operation's conflicting resources (taken in the claim's transaction),
    renewed with the claim and released once no handler thread of this delivery can still change
    anything."""
    tenants: dict[tuple[str, str], str | None] = field(default_factory=dict)
    """The tenant of the claimed operation and of its proposal, as their stored rows say (the
    claim returned the one, the other is the stored proposal): the outcome's events carry it
    without reading it again (`toolgate.store.operations.Operations.transition`)."""
    released: threading.Event = field(default_factory=threading.Event)
    """Set once an outcome's transaction gave the resource leases up with it (nothing left to release)."""

    def run(
        self, arguments: dict[str, Any], ctx: HandlerContext, breaker: CircuitBreaker, access: HandlerAccess
    ) -> Delivery:
        """Run the handler on the proposal's ``arguments`` under ``access`` and persist its outcome
        with its audit events. ``breaker`` was acquired before the claim; its timeouts and server
        errors count."""
        try:
            return self._run(arguments, ctx, breaker, access)
        finally:
            # else `finished_late` releases it; or the outcome's own transaction already did
            if not self.overruns.running(self.operation_key) and not self.released.is_set():
                self.hold.release()

    def _run(
        self, arguments: dict[str, Any], ctx: HandlerContext, breaker: CircuitBreaker, access: HandlerAccess
    ) -> Delivery:
        spec = self.spec
        interval = max(self.lease_s / 3, 0.05)
        future = None
        try:
            args = spec.handler_arguments(arguments)
        except Exception:  # the argument model's own code raised or overran: the handler never ran
            breaker.release()  # the dependency was never called: no verdict on it
            return self.finish(
                "failed",
                code="server_error",
                error={"kind": "server_error", "message": "The tool's arguments could not be built.", "retryable": False},
            )
        try:
            with breaker.reporting():  # acquired in deliver(); timeouts and server errors count
                # its result made plain data on its worker, under its timeout (`plain_result`)
                future = loaded_code.start(plain_result(spec.handler, spec.result_model), args, ctx, access=access)
                raw = loaded_code.wait(future, spec.timeout_s, heartbeat=self.renew, interval_s=interval)
        except TimeoutError as exc:
            self.renew()  # the effect may still happen: the lease starts over before anything else
            delivery = self.finish(
                "unknown",
                code="timeout",
                # the handler's own TimeoutError says what loaded code wrote: redacted, bounded
                error={"kind": "timeout", "message": redact_text(str(exc))[:MAX_FAILURE_MESSAGE], "retryable": False},
                ended=False,
            )
            if future is not None:  # the effect may still happen: keep the lease while the thread lives
                self.overruns.watch(
                    self.operation_key,
                    future,
                    renew=self.renew,
                    finished=functools.partial(self.finished_late, ctx=ctx),
                    interval_s=interval,
                )
            return delivery
        except ToolExecutionError as exc:
            audit_denial(self.auditor, exc, ctx, spec.name, access, **self.common)  # a refused capability
            audit_drift(self.auditor, exc, ctx, spec.name, **self.common)  # a remote tool changed
            reported = handler_failure(exc)  # its kind catalogued, its message redacted
            # a downstream that timed out may still have made the effect: unknown (reconciled by
            # the operation key, never retried), as when the gateway's own timeout fires above; so
            # may one that answered a transient server error (a 502 from a proxy after the
            # downstream committed): stored failed and retryable, the same write would be proposed
            # again under a new key, and no reviewer told it may already have run
            uncertain = reported.kind == "timeout" or (reported.kind == "server_error" and reported.retryable)
            status: OperationStatus = "unknown" if uncertain else "failed"
            return self.finish(
                status,
                code=reported.kind,
                error={
                    "kind": reported.kind,
                    "message": reported.message,
                    "retryable": reported.retryable and status == "failed",
                },
            )
        except Exception as exc:
            # An unclassified handler crash may have had an effect: unknown, never failed.
            audit_denial(self.auditor, exc, ctx, spec.name, access, **self.common)
            return self.finish(
                "unknown",
                code="handler_crash",
                error={"kind": "server_error", "message": type(exc).__name__, "retryable": False},
            )
        except BaseException:
            # This process's own shutdown (a signal in the thread that waits): the handler may have
            # made its effect. Unknown, and the lease given up, so recovery reconciles it at once
            # instead of waiting for the lease; the shutdown goes on.
            self.interrupted()
            raise
        try:
            result = raw.unwrap()
        except ToolExecutionError as exc:
            # The handler returned, so its effect may well be done: a result that breaks its contract
            # or cannot be serialized makes the outcome unknown (the status check settles it), never
            # failed, which would invite a second effect.
            return self.finish(
                "unknown", code=exc.kind, error={"kind": exc.kind, "message": exc.message, "retryable": False}
            )
        return self.finish("succeeded", result=result)

    def interrupted(self) -> None:
        """Leave the operation ``unknown`` and unleased after a shutdown interrupted its wait
        (best effort: the process is going away, and an expired lease is the fallback)."""
        error = {"kind": "interrupted", "message": "the worker shut down during the call", "retryable": False}
        with contextlib.suppress(Exception):
            self.finish("unknown", code="interrupted", error=error)
            self.store.operations.renew_lease(self.operation_key, self.worker_id, 0.0)

    def finish(
        self,
        status: OperationStatus,
        *,
        code: str | None = None,
        result: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
        ended: bool = True,
    ) -> Delivery:
        """Persist the outcome with its audit events (conditional on still owning the claim),
        then answer. ``ended``: the handler's thread is done, so the resource leases are given up
        in the outcome's transaction (False after a timeout: the thread may still act)."""
        word = {"succeeded": "completed"}.get(status, status)
        events = [self.auditor.event("handler.finished", word, code=code, **self.common)]
        if status == "succeeded":
            events.append(self.auditor.event("operation.completed", "completed", **self.common))
        try:
            final = self.store.operations.transition(
                self.operation_key,
                "executing",
                status,
                result=result,
                error=error,
                owner=self.worker_id,
                audit=events,
                release_leases=(self.hold.keys, self.hold.holder) if ended and self.hold.keys else None,
                tenants=self.tenants or None,
            )
        except InvalidTransitionError as exc:
            return self.claim_lost(status, exc.actual)
        if ended:
            self.released.set()
        reason = "outcome unknown; reconcile before any retry" if status == "unknown" else ""
        return Delivery(
            operation_key=self.operation_key,
            status=final.status,
            claim="ACQUIRED",
            duplicate=False,
            result=result,
            error=error,
            reason=reason,
        )

    def claim_lost(self, status: OperationStatus, found: str | None) -> Delivery:
        """The outcome ``status`` could not be stored: this worker's claim was taken from it while
        it stood still past its lease (a paused process; recovery marked it ``unknown`` and
        reconciled it). The stored record stands (a late outcome never overwrites it) and the
        resource leases go back in `run`; what the handler did is audited ``outcome_not_stored``,
        so an effect made after its operation was settled or dead-lettered is never unseen."""
        self.audit_not_stored(status, found)
        current = self.store.operations.get(self.operation_key)  # what the caller is told: the record
        return Delivery(
            operation_key=self.operation_key,
            status=current.status if current is not None else "missing",
            claim="ACQUIRED",
            duplicate=False,
            result=current.result if current is not None else None,
            error=current.error if current is not None else None,
            reason="the claim lapsed while the handler ran; its outcome was not stored",
        )

    def audit_not_stored(self, status: OperationStatus, found: str | None) -> None:
        """Audit a handler that ended with ``status`` after its operation moved on without it
        (to ``found``): its effect, if any, is evidence for whoever settles the operation."""
        self.auditor.record(
            "handler.finished",
            "not_stored",
            code="outcome_not_stored",
            detail={"outcome": status, "status": found or "missing", "worker": self.worker_id},
            **self.common,
        )

    def renew(self) -> bool:
        """Extend this worker's lease on the operation, and its resource leases with it (False:
        the claim is no longer ours)."""
        self.hold.renew(self.lease_s)
        return self.store.operations.renew_lease(self.operation_key, self.worker_id, self.lease_s)

    def finished_late(self, future: concurrent.futures.Future[Any], *, ctx: HandlerContext) -> None:
        """An overrunning handler ended: record a late success (or audit the capability it was
        refused after its time: its records work, `toolgate.store.records_expiry`), then give up
        the lease."""
        try:
            late = future.exception()
            if late is not None:
                audit_denial(self.auditor, late, ctx, self.spec.name, **self.common)
            else:
                result = future.result().unwrap()
                try:
                    self.store.operations.transition(
                        self.operation_key,
                        "unknown",
                        "succeeded",
                        result=result,
                        owner=self.worker_id,
                        audit=[
                            self.auditor.event("handler.finished", "completed_late", **self.common),
                            self.auditor.event("operation.completed", "completed", **self.common),
                        ],
                    )
                except InvalidTransitionError as exc:  # settled or dead-lettered while it stood still
                    self.audit_not_stored("succeeded", exc.actual)
        except ToolExecutionError:
            pass  # the status check decides what happened
        finally:
            # reconcilable from now on
            self.store.operations.renew_lease(self.operation_key, self.worker_id, 0.0)
            self.hold.release()


__all__ = ["ClaimedWrite"]
