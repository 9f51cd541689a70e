"""Running handlers: reads under limits, writes behind the atomic claim, exactly once.

`Executor.deliver` is the single path by which a write's handler can run, shared by the graph's
execute node and the operator commands. It re-verifies approval, claims the operation in one
conditional update, persists ``executing`` before the effect and the outcome before answering,
and gives every duplicate delivery the stored result instead of a second effect.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

from pydantic import BaseModel

from toolgate.canonical import idempotency_key_for
from toolgate.clock import SYSTEM_CLOCK, Clock, parse_iso
from toolgate.errors import InvalidTransitionError, ToolExecutionError
from toolgate.graph import handlers
from toolgate.graph.handlers import Overruns
from toolgate.policy.approvals import verify_for_execution
from toolgate.policy.authorization import check_resource
from toolgate.policy.breaker import BreakerOpenError, BreakerRegistry, CircuitBreaker
from toolgate.policy.identities import IdentityDirectory
from toolgate.policy.output import sanitize_result
from toolgate.policy.principal import Principal
from toolgate.store.audit import Auditor
from toolgate.store.base import Store
from toolgate.store.records import ApprovalRecord, OperationRecord, OperationStatus, ProposalRecord
from toolgate.tools.registry import Registry
from toolgate.tools.spec import HandlerContext, ToolSpec

ClaimOutcome = Literal["ACQUIRED", "NOT_ACQUIRED", "NOT_ATTEMPTED"]


@dataclass(frozen=True, kw_only=True)
class Delivery:
    """What one delivery of an operation observed."""

    operation_key: str
    status: str
    """Operation status after this delivery (authoritative, from the store)."""
    claim: ClaimOutcome
    """Whether this delivery won the claim."""
    duplicate: bool
    """True when the result came from the store, not from running the handler here."""
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    reason: str = ""


class ProposalCache:
    """A bounded map of proposals by id. Proposals are immutable once stored (database triggers
    refuse any change), so a copy read once stays right; approvals, operations and identities are
    never cached."""

    SIZE = 2048

    def __init__(self) -> None:
        self._items: OrderedDict[str, ProposalRecord] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, proposal_id: str) -> ProposalRecord | None:
        with self._lock:
            found = self._items.get(proposal_id)
            if found is not None:
                self._items.move_to_end(proposal_id)
            return found

    def put(self, proposal: ProposalRecord) -> None:
        with self._lock:
            self._items[proposal.proposal_id] = proposal
            while len(self._items) > self.SIZE:
                self._items.popitem(last=False)


@dataclass(frozen=True)
class Executor:
    """Executes reads and approved writes for one release."""

    store: Store
    registry: Registry
    auditor: Auditor
    directory: IdentityDirectory
    """Tells whether an approver is still an active identity of the proposal's tenant."""
    breakers: BreakerRegistry = field(default_factory=BreakerRegistry)
    """One circuit breaker per tool: a dead downstream fails fast instead of timing out each call."""
    overruns: Overruns = field(default_factory=Overruns, compare=False, repr=False)
    """Handlers of this process still running past their timeout (never delivered again meanwhile)."""
    clock: Clock = SYSTEM_CLOCK
    """The process clock handler deadlines are set by (handlers check them against the same one)."""
    proposals: ProposalCache = field(default_factory=lambda: ProposalCache(), compare=False, repr=False)
    """Proposals already read (immutable once stored): a delivery reads its proposal once."""

    def proposal(self, proposal_id: str | None) -> ProposalRecord | None:
        """The stored proposal ``proposal_id`` (read from the store once per process)."""
        if not proposal_id:
            return None
        found = self.proposals.get(proposal_id)
        if found is None:
            found = self.store.get_proposal(proposal_id)
            if found is not None:
                self.proposals.put(found)
        return found

    # ---- reads -------------------------------------------------------------------------

    def run_read(
        self,
        spec: ToolSpec,
        arguments: dict[str, Any],
        principal: Principal,
        credentials: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Run a read-only handler under its timeout and return the sanitized result.

        ``credentials`` are the user's own forwarded tokens (never a shared service credential).
        """
        args = spec.handler_arguments(arguments)
        ctx = HandlerContext(
            tenant_id=principal.tenant_id,
            user_id=principal.user_id,
            credentials=dict(credentials or {}),
            deadline=self.clock.now() + timedelta(seconds=spec.timeout_s),
        )
        try:
            raw: BaseModel = self.breakers.get(spec.name).call(
                handlers.run_with_timeout, spec.handler, spec.timeout_s, args, ctx
            )
        except TimeoutError as exc:
            raise ToolExecutionError("timeout", str(exc), retryable=True) from exc
        except ToolExecutionError:
            raise
        except Exception as exc:
            # an unclassified crash (a reset connection, a bug) answers this call only: the other
            # reads of the batch still report, and the message names the class, never the text
            raise ToolExecutionError(
                "server_error", f"the tool failed ({type(exc).__name__})", retryable=False
            ) from exc
        return sanitize_result(raw, spec.result_model)

    # ---- writes ------------------------------------------------------------------------

    def expire_if_due(self, op: OperationRecord) -> OperationRecord:
        """Move a pending or approved operation past its proposal's expiry to ``expired``."""
        if op.status not in ("pending_approval", "approved") or op.proposal_id is None:
            return op
        proposal = self.proposal(op.proposal_id)
        if proposal is None or self.store.now() < parse_iso(proposal.expires_at):
            return op
        event = self.auditor.event(
            "proposal.expired",
            "expired",
            operation_key=op.operation_key,
            proposal_id=op.proposal_id,
            tool=op.tool,
            handler_revision=proposal.handler_revision,
        )
        try:
            return self.store.transition(op.operation_key, op.status, "expired", audit=[event])
        except InvalidTransitionError:
            return self.store.get_operation(op.operation_key) or op

    def deliver(
        self,
        operation_key: str,
        *,
        worker_id: str,
        lease_s: float = 60.0,
        wait_s: float = 30.0,
        call_id: str | None = None,
    ) -> Delivery:
        """Deliver one operation: execute it if this caller wins the claim, else return the stored result."""
        op = self.store.get_operation(operation_key)
        if op is None:
            return Delivery(
                operation_key=operation_key,
                status="missing",
                claim="NOT_ATTEMPTED",
                duplicate=False,
                reason="no such operation",
            )
        op = self.expire_if_due(op)
        attempted = False
        if op.status == "approved":
            refusal = self._verify(op)
            if refusal:
                return Delivery(
                    operation_key=operation_key,
                    status=op.status,
                    claim="NOT_ATTEMPTED",
                    duplicate=False,
                    reason=refusal,
                )
            breaker = self.breakers.get(op.tool)
            try:
                breaker.acquire()  # before the claim: an open breaker never claims, the op stays approved
            except BreakerOpenError as exc:
                self.auditor.record(
                    "operation.deferred",
                    "refused",
                    code="circuit_open",
                    operation_key=operation_key,
                    proposal_id=op.proposal_id,
                    tool=op.tool,
                )
                return Delivery(
                    operation_key=operation_key,
                    status=op.status,
                    claim="NOT_ATTEMPTED",
                    duplicate=False,
                    error={"kind": exc.kind, "message": exc.message, "retryable": exc.retryable},
                    reason=exc.message,
                )
            attempted = True
            try:
                common = self._audit_fields(op, call_id)
                claimed = self.store.claim(
                    operation_key,
                    worker_id,
                    lease_s,
                    audit=[
                        self.auditor.event(
                            "operation.claimed", "acquired", detail={"worker": worker_id}, **common
                        ),
                        self.auditor.event("handler.started", "started", **common),
                    ],
                )
                if claimed is not None:
                    return self._execute(claimed, worker_id, common, breaker, lease_s)
            finally:
                breaker.release()  # gives back this thread's unreported probe (claim lost); else no-op
            op = self.store.get_operation(operation_key) or op
            op = self.expire_if_due(op)  # the claim also refuses an approval that expired meanwhile
        if op.status == "executing":
            op = self._wait_for_terminal(operation_key, wait_s)
        return Delivery(
            operation_key=operation_key,
            status=op.status,
            claim="NOT_ACQUIRED" if attempted else "NOT_ATTEMPTED",
            duplicate=op.status in ("succeeded", "failed"),
            result=op.result,
            error=op.error,
            reason="in flight in another worker" if op.status == "executing" else "",
        )

    def counted_decisions(self, proposal: ProposalRecord) -> list[ApprovalRecord]:
        """The proposal's decisions that may count: authentic records by reviewers who are still
        active identities reviewing for the proposal's tenant (its own people or staff). Every
        other one is audited and dropped."""
        counted: list[ApprovalRecord] = []
        for decision in self.store.decisions_for(proposal.proposal_id):
            if not decision.authentic:
                code = "forged_approval"
            elif self.directory.reviewer_for(decision.reviewer_id, proposal.tenant_id) is None:
                code = "reviewer_inactive"
            else:
                counted.append(decision)
                continue
            if self.store.read_only:  # a verification run reports, it never writes
                continue
            self.auditor.record(
                "approval.voided",
                "refused",
                code=code,
                proposal_id=proposal.proposal_id,
                operation_key=proposal.operation_key,
                tool=proposal.tool,
                detail={"approval_id": decision.approval_id},
            )
        return counted

    def _verify(self, op: OperationRecord) -> str:
        spec = self.registry.get(op.tool)
        if spec is None or op.proposal_id is None:
            return f"tool {op.tool!r} is not in release {self.registry.release}"
        proposal = self.proposal(op.proposal_id)
        if proposal is None:
            return "proposal missing"
        verdict = verify_for_execution(
            proposal,
            spec.approval,
            self.counted_decisions(proposal),
            handler_revision=spec.handler_revision,
            release=self.registry.release,
        )
        if verdict.status != "approved":
            self.auditor.record(
                "approval.refused_at_execution",
                "refused",
                code="approval_invalid",
                operation_key=op.operation_key,
                proposal_id=op.proposal_id,
                tool=op.tool,
                detail={"reason": verdict.reason},
            )
            return verdict.reason
        return self._ownership_refusal(spec, proposal)

    def _ownership_refusal(self, spec: ToolSpec, proposal: ProposalRecord) -> str:
        """Re-resolve every resource the proposal names for its requester, right before the claim:
        an order that changed hands since approval is not touched. The requester's staff roles
        come from their identity row; one no longer active keeps none."""
        requester = self.directory.active(proposal.requester_id, proposal.tenant_id) or Principal(
            user_id=proposal.requester_id, tenant_id=proposal.tenant_id
        )
        refused = check_resource(spec, requester, proposal.arguments, self.registry.resolver)
        if refused is None:
            return ""
        if not self.store.read_only:
            self.auditor.record(
                "operation.refused",
                "refused",
                code=refused.code,
                operation_key=proposal.operation_key,
                proposal_id=proposal.proposal_id,
                tool=proposal.tool,
                detail={"stage": "execute"},
            )
        return f"{refused.code}: {refused.message}"

    def _audit_fields(self, op: OperationRecord, call_id: str | None) -> dict[str, Any]:
        """The fields every event of one delivery of ``op`` carries (its tool and proposal are
        known to exist: `_verify` passed)."""
        spec = self.registry.get(op.tool)
        proposal = self.proposal(op.proposal_id)
        assert spec is not None and proposal is not None
        return {
            "operation_key": op.operation_key,
            "proposal_id": op.proposal_id,
            "tool": op.tool,
            "handler_revision": spec.handler_revision,
            "call_id": call_id or proposal.call_id,
            "thread_id": proposal.thread_id,
            "trace_id": proposal.trace_id,
        }

    def _execute(
        self,
        op: OperationRecord,
        worker_id: str,
        common: dict[str, Any],
        breaker: CircuitBreaker,
        lease_s: float,
    ) -> Delivery:
        """Run the claimed operation's handler (``operation.claimed`` and ``handler.started`` were
        appended with the claim) and persist its outcome with its audit events."""
        spec = self.registry.get(op.tool)
        assert spec is not None and op.proposal_id is not None
        proposal = self.proposal(op.proposal_id)
        assert proposal is not None
        ctx = HandlerContext(
            tenant_id=proposal.tenant_id,
            user_id=proposal.requester_id,
            operation_key=op.operation_key,
            idempotency_key=idempotency_key_for(op.operation_key),
            deadline=self.clock.now() + timedelta(seconds=spec.timeout_s),
        )

        def finish(
            status: OperationStatus,
            *,
            code: str | None = None,
            result: dict[str, Any] | None = None,
            error: dict[str, Any] | None = None,
        ) -> Delivery:
            """Persist the outcome with its audit events (conditional on still owning the claim),
            then answer."""
            word = {"succeeded": "completed"}.get(status, status)
            events = [self.auditor.event("handler.finished", word, code=code, **common)]
            if status == "succeeded":
                events.append(self.auditor.event("operation.completed", "completed", **common))
            final = self.store.transition(
                op.operation_key,
                "executing",
                status,
                result=result,
                error=error,
                owner=worker_id,
                audit=events,
            )
            reason = "outcome unknown; reconcile before any retry" if status == "unknown" else ""
            return Delivery(
                operation_key=op.operation_key,
                status=final.status,
                claim="ACQUIRED",
                duplicate=False,
                result=result,
                error=error,
                reason=reason,
            )

        def renew() -> bool:
            return self.store.renew_lease(op.operation_key, worker_id, lease_s)

        interval = max(lease_s / 3, 0.05)
        future = None
        try:
            args = spec.handler_arguments(proposal.arguments)
            with breaker.reporting():  # acquired in deliver(); timeouts and server errors count
                future = handlers.start(spec.handler, args, ctx)
                raw = handlers.wait(future, spec.timeout_s, heartbeat=renew, interval_s=interval)
            result = sanitize_result(raw, spec.result_model)
        except TimeoutError as exc:
            renew()  # the effect may still happen: the lease starts over before anything else
            delivery = finish(
                "unknown", code="timeout", error={"kind": "timeout", "message": str(exc), "retryable": False}
            )
            if future is not None:  # the effect may still happen: keep the lease while the thread lives
                self.overruns.watch(
                    op.operation_key,
                    future,
                    renew=renew,
                    finished=lambda done: self._finished_late(
                        op.operation_key, worker_id, spec, done, common
                    ),
                    interval_s=interval,
                )
            return delivery
        except ToolExecutionError as exc:
            return finish(
                "failed",
                code=exc.kind,
                error={"kind": exc.kind, "message": exc.message, "retryable": exc.retryable},
            )
        except Exception as exc:
            # An unclassified handler crash may have had an effect: unknown, never failed.
            return finish(
                "unknown",
                code="handler_crash",
                error={"kind": "server_error", "message": type(exc).__name__, "retryable": False},
            )
        return finish("succeeded", result=result)

    def _finished_late(
        self,
        operation_key: str,
        worker_id: str,
        spec: ToolSpec,
        future: concurrent.futures.Future[Any],
        common: dict[str, Any],
    ) -> None:
        """An overrunning handler ended: record a late success, then give up the lease."""
        try:
            if future.exception() is None:
                result = sanitize_result(future.result(), spec.result_model)
                with contextlib.suppress(InvalidTransitionError):
                    self.store.transition(
                        operation_key,
                        "unknown",
                        "succeeded",
                        result=result,
                        owner=worker_id,
                        audit=[
                            self.auditor.event("handler.finished", "completed_late", **common),
                            self.auditor.event("operation.completed", "completed", **common),
                        ],
                    )
        except ToolExecutionError:
            pass  # the status check decides what happened
        finally:
            self.store.renew_lease(operation_key, worker_id, 0.0)  # reconcilable from now on

    def _wait_for_terminal(self, operation_key: str, wait_s: float) -> OperationRecord:
        deadline = time.monotonic() + wait_s
        delay = 0.01
        while True:
            op = self.store.get_operation(operation_key)
            assert op is not None
            if op.status != "executing" or time.monotonic() >= deadline:
                return op
            time.sleep(delay)
            delay = min(delay * 2, 0.25)


__all__ = ["Delivery", "Executor"]
