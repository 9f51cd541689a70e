"""Running handlers: reads under limits, writes behind the atomic claim, exactly once.

`Executor.deliver` is the single path by which a write's handler can run, shared by the graph's
execute node and the operator commands. It asks the authority right before the claim
(`toolgate.policy.authority.Authority.before_claim`), claims the operation in one conditional
update, has the claimed handler run and its outcome persisted before answering
(`toolgate.graph.delivery.claimed_write`), and gives every duplicate delivery the stored result
instead of a second effect.

`Executor.run_read` runs a read: in a slot of its handler's own concurrency cap
(`toolgate.policy.handler_slots`), retried after a timeout or a 5xx-class failure
(`toolgate.policy.retry.ReadRetry`: a read is idempotent, a write's retry is its operation key),
its chunks streamed when its handler yields them (`toolgate.graph.delivery.streamed_output`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from toolgate.clock import SYSTEM_CLOCK, Clock
from toolgate.errors import CapabilityDenied, ConfigurationError, InvalidTransitionError, ToolExecutionError
from toolgate.graph.delivery import handler_scope as scope
from toolgate.graph.delivery.capability_audit import audit_denial
from toolgate.graph.delivery.claimed_write import ClaimedWrite
from toolgate.graph.delivery.drift_audit import audit_drift
from toolgate.graph.delivery.overruns import Overruns
from toolgate.graph.delivery.result import Delivery
from toolgate.graph.delivery.same_resource import ResourceHold, deferred
from toolgate.graph.delivery.streamed_output import OutputStream, drained
from toolgate.graph.review.proposal_cache import ProposalCache
from toolgate.policy.authority import Authority
from toolgate.policy.authorization import OwnershipLookups, OwnershipRefused
from toolgate.policy.breaker import BreakerOpenError, BreakerRegistry, CircuitBreaker
from toolgate.policy.decisions import Rejection
from toolgate.policy.handler_slots import HandlerBusy, HandlerSlots, process_handler_slots
from toolgate.policy.identities import IdentityDirectory
from toolgate.policy.output import PlainResult, handler_failure, plain_result, redacted_traceback
from toolgate.policy.principal import Principal
from toolgate.policy.retry import DEFAULT_READ_RETRY, ReadRetry
from toolgate.store.audit import Auditor
from toolgate.store.base import Store
from toolgate.store.handler_access import HandlerAccess
from toolgate.store.leases import ResourcesBusy
from toolgate.store.records import OperationRecord, ProposalRecord
from toolgate.store.snapshots import GuardSnapshot
from toolgate.tools import loaded_code
from toolgate.tools.credentials import CredentialProvider
from toolgate.tools.registry import Registry
from toolgate.tools.spec import HandlerContext, ToolSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Executor:
    """Executes reads and approved writes for one release."""

    store: Store
    registry: Registry
    auditor: Auditor
    directory: IdentityDirectory
    """The store's identity directory (the one the gateway's authority asks before every claim)."""
    breakers: BreakerRegistry = field(default_factory=BreakerRegistry)
    """One circuit breaker per tool: a dead downstream fails fast instead of timing out each call."""
    overruns: Overruns = field(default_factory=Overruns, compare=False, repr=False)
    """Handlers of this process still running past their timeout (never delivered again meanwhile)."""
    clock: Clock = SYSTEM_CLOCK
    """The process clock handler deadlines are set by (handlers check them against the same one)."""
    proposals: ProposalCache = field(default_factory=lambda: ProposalCache(), compare=False, repr=False)
    """Proposals already read (immutable once stored): a delivery reads its proposal once."""
    credential_provider: CredentialProvider | None = None
    """Service credentials for handlers (None: the built-in one over the store's secret)."""
    authority: Authority | None = None
    """The gateway's authority, asked before every claim and for every expiry (None: an executor
    built alone, which runs reads only)."""
    read_retry: ReadRetry = DEFAULT_READ_RETRY
    """How a read's handler is retried after a timeout or a 5xx-class failure (writes never are)."""
    handler_slots: HandlerSlots = field(default_factory=process_handler_slots, compare=False, repr=False)
    """The per-handler concurrency caps (`ToolSpec.max_concurrency`), shared by the process."""

    @property
    def judged_by(self) -> Authority:
        """The authority writes are judged by; an executor built without one delivers nothing."""
        if self.authority is None:
            raise ConfigurationError("this executor has no authority: build it with build_gateway to deliver")
        return self.authority

    def proposal(self, proposal_id: str | None) -> ProposalRecord | None:
        """The stored proposal ``proposal_id`` (read from the store once per process)."""
        if not proposal_id:
            return None
        found = self.proposals.get(proposal_id)
        if found is None:
            found = self.store.proposals.get(proposal_id)
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
        *,
        stream: OutputStream | None = None,
        audit_fields: Mapping[str, Any] | None = None,
        ownership: OwnershipLookups | None = None,
    ) -> dict[str, Any]:
        """Run a read-only handler under its timeout and return the sanitized result. The handler
        runs under a read-only `HandlerAccess`: its records open read-only, the store is refused.

        ``credentials`` are the user's own forwarded tokens; the handler sees those its tool declares.
        A read is idempotent, so a timeout or a retryable 5xx-class failure is tried again under
        `read_retry` (each retry audited ``call.retried`` with ``audit_fields``); a write never is.
        A generator handler's chunks go to ``stream`` (`toolgate.graph.delivery.streamed_output`).
        ``ownership``: the call's ownership lookups still to run (the execute node's, from
        `Authority.at_execute`), run in front of the handler's first attempt on the same worker
        (one hop to loaded code for both, each under its own deadline); a refusal raises
        `OwnershipRefused` and the handler never runs. A retried attempt does not look again.
        """
        try:
            args = spec.handler_arguments(arguments)
        except Exception as exc:  # the tool's argument model's own code raised (a validator, a default)
            log.warning("arguments of %s could not be built:\n%s", spec.name, redacted_traceback(exc))
            raise ToolExecutionError("server_error", "The tool's arguments could not be built.", retryable=False) from None
        ctx = scope.read_context(
            self.store, self.credential_provider, spec, principal, credentials, self.clock
        )
        unchecked = [ownership] if ownership is not None else []  # until its lookups all allowed the call
        # without a client's stream the chunks are dropped, but a given-up attempt still stops
        chunks = stream or OutputStream(lambda _: None, call_id="", tool=spec.name, max_bytes=0)

        def retried(attempt: int, exc: ToolExecutionError, delay_s: float) -> None:
            self.auditor.record(
                "call.retried",
                "retrying",
                user_id=principal.user_id,
                code=exc.kind,
                tool=spec.name,
                handler_revision=spec.handler_revision,
                detail={"attempt": attempt, "delay_ms": round(delay_s * 1000)},
                **dict(audit_fields or {}),
            )
            chunks.next_attempt()

        try:
            raw = self.read_retry.call(
                lambda: self._read_once(spec, args, ctx, principal, chunks, unchecked), retried
            )
        finally:
            chunks.close()  # answered: an attempt still running past its timeout sends nothing more
        return raw.unwrap()

    def _read_once(
        self,
        spec: ToolSpec,
        args: Any,
        ctx: HandlerContext,
        principal: Principal,
        stream: OutputStream | None,
        unchecked: list[OwnershipLookups],
    ) -> PlainResult:
        """One attempt of a read: its handler run in a handler slot, under its breaker and timeout,
        behind the ownership lookups in ``unchecked`` (emptied once they all allowed the call)."""
        access = HandlerAccess(spec.name, timeout_s=spec.timeout_s)  # a read writes nothing, uses no store
        breaker = self.breakers.get(self.registry.breaker_key(spec.name, principal.tenant_id))
        try:
            breaker.acquire()
            try:
                raw: PlainResult = self._slotted_handler(spec, args, ctx, access, stream, unchecked)
            except OwnershipRefused:
                breaker.release()  # the dependency was never called: no verdict on it
                raise
            except BaseException as exc:
                breaker.record_outcome(exc)
                raise
            breaker.record_success()
        except (HandlerBusy, OwnershipRefused):
            raise  # nothing ran (a refusal of this gateway, not the handler's failure)
        except CapabilityDenied as exc:
            scope.audit_denials(self.auditor, ctx, spec, access)  # its egress and database refusals
            audit_denial(self.auditor, exc, ctx, spec.name, access)  # any other (a credential)
            raise
        except TimeoutError as exc:
            raise ToolExecutionError("timeout", str(exc), retryable=True) from exc
        except ToolExecutionError as exc:
            audit_denial(self.auditor, exc, ctx, spec.name, access)  # one the handler wrapped
            audit_drift(self.auditor, exc, ctx, spec.name)  # a remote tool changed: nothing called
            reported = handler_failure(exc)  # its kind catalogued, its message redacted
            if reported is exc:
                raise
            raise reported from exc
        except Exception as exc:
            audit_denial(self.auditor, exc, ctx, spec.name, access)
            # an unclassified crash (a reset connection, a bug) answers this call only: the other
            # reads of the batch still report, and the message names the class, never the text
            raise ToolExecutionError(
                "server_error", f"the tool failed ({type(exc).__name__})", retryable=False
            ) from exc
        return raw

    def _slotted_handler(
        self,
        spec: ToolSpec,
        args: Any,
        ctx: HandlerContext,
        access: HandlerAccess,
        stream: OutputStream | None,
        unchecked: list[OwnershipLookups],
    ) -> Any:
        """The read's handler in one of its slots (`HandlerBusy` when none is free), under its
        timeout, behind the ownership lookups in ``unchecked`` if any (`first_refusal`); the slot
        is given back when the handler's thread finishes, even past its timeout, or at once when
        the lookups stop it from starting."""
        held = self.handler_slots.acquire(spec.name, spec.max_concurrency)
        given_back = threading.Lock()

        def give_back(_: object = None) -> None:
            if held and given_back.acquire(blocking=False):  # once, whichever comes first
                self.handler_slots.release(spec.name)

        # its result made plain data on its worker, under its timeout: the objects it returns run its code
        handler = plain_result(drained(spec.handler, stream), spec.result_model)
        ownership = unchecked[0] if unchecked else None
        try:
            if ownership is None:
                checked, future = None, loaded_code.start(handler, args, ctx, access=access)
            else:
                checked, future = loaded_code.start_checked(
                    ownership.calls(), ownership.allows, handler, args, ctx, access=access
                )
        except BaseException:
            give_back()
            raise
        future.add_done_callback(give_back)
        if checked is None or ownership is None:
            return loaded_code.wait(future, spec.timeout_s)
        try:
            return loaded_code.wait_checked(checked, future, loaded_code.LOOKUP_TIMEOUT_S, spec.timeout_s)
        except loaded_code.NotStarted:
            if checked.started:
                raise  # the handler's own exception
            give_back()  # a lookup still hung holds no handler slot
            raise OwnershipRefused(first_refusal(checked, ownership)) from None
        finally:
            if checked.started:  # its lookups allowed it: a retried attempt does not look again
                unchecked.clear()

    # ---- writes ------------------------------------------------------------------------

    def expire_if_due(
        self, op: OperationRecord, *, proposal: ProposalRecord | None = None, now: datetime | None = None
    ) -> OperationRecord:
        """Move a pending or approved operation past its proposal's expiry to ``expired``.

        A step that already holds the proposal (``proposal``: the stored record of ``op``) and read
        the store's time (``now``) passes them, so judging expiry costs no further round trip."""
        if op.status not in ("pending_approval", "approved") or op.proposal_id is None:
            return op
        if proposal is None or proposal.proposal_id != op.proposal_id:
            proposal = self.proposal(op.proposal_id)
        if proposal is None or not self.judged_by.expired(proposal, now):
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
            return self.store.operations.transition(op.operation_key, op.status, "expired", audit=[event])
        except InvalidTransitionError:
            return self.store.operations.get(op.operation_key) or op

    def deliver(
        self,
        operation_key: str,
        *,
        worker_id: str,
        lease_s: float = 60.0,
        wait_s: float = 30.0,
        call_id: str | None = None,
        operation: OperationRecord | None = None,
        now: datetime | None = None,
    ) -> Delivery:
        """Deliver one operation: execute it if this caller wins the claim, else return the stored result.

        A step that has just read the operation (``operation``) and the store's time (``now``)
        hands them down, so the delivery reads neither again: whatever changes after that read
        changes after this one too, and the claim's conditional update (status, owner and expiry
        on the database's clock) decides; a lost claim reads the row afresh. The decisions and
        the identities judged before the claim are never handed down: they are read right before
        it, in one statement (`toolgate.store.snapshots.Snapshots.for_claim`, with the operation
        and the store's time when no step handed them down: the expiry and the authority's
        judgment then take that time, no clock read of their own)."""
        op = operation if operation is not None and operation.operation_key == operation_key else None
        snapshot = None
        if (
            op is None
        ):  # the operation, what the authority judges before the claim and the time: one statement
            snapshot = self.store.snapshots.for_claim(operation_key, clock=now is None)
            op = snapshot.operation
            now = now or snapshot.now
        if op is None:
            return Delivery(
                operation_key=operation_key,
                status="missing",
                claim="NOT_ATTEMPTED",
                duplicate=False,
                reason="no such operation",
            )
        op = self.expire_if_due(op, now=now)
        attempted = False
        if op.status == "approved":
            refusal = self._verify(op, now, snapshot)
            if refusal:
                return Delivery(
                    operation_key=operation_key,
                    status=op.status,
                    claim="NOT_ATTEMPTED",
                    duplicate=False,
                    reason=refusal,
                )
            breaker = self.breakers.get(self.registry.breaker_key(op.tool, op.tenant_id))
            try:
                breaker.acquire()  # before the claim: an open breaker never claims, the op stays approved
            except BreakerOpenError as exc:
                error = {"kind": exc.kind, "message": exc.message, "retryable": exc.retryable}
                return deferred(self.auditor, op, "circuit_open", error)
            attempted = True
            hold = self._hold(op, worker_id)
            slotted = False
            try:
                try:  # a slot of the handler's own cap, held while this delivery runs
                    slotted = self.handler_slots.acquire(op.tool, self._spec(op).max_concurrency)
                except HandlerBusy as exc:
                    error = {"kind": exc.kind, "message": exc.message, "retryable": exc.retryable}
                    return deferred(self.auditor, op, "handler_busy", error)
                common = self._audit_fields(op, call_id)
                events = [
                    self.auditor.event(
                        "operation.claimed", "acquired", detail={"worker": worker_id}, **common
                    ),
                    self.auditor.event("handler.started", "started", **common),
                ]
                tenants = self._tenants(op)  # as the store's rows say: the events need no read of them
                try:  # the claim and the resource leases commit together, or neither (no deadlock)
                    claimed = hold.claim(
                        lambda: self.store.operations.claim(
                            operation_key, worker_id, lease_s, audit=events, resources=hold.lease, tenants=tenants
                        ),
                        wait_s,
                    )
                except ResourcesBusy:
                    message = "another write to the same resource is still running; still approved"
                    error = {"kind": "resource_busy", "message": message, "retryable": True}
                    return deferred(self.auditor, op, "resource_busy", error)
                if claimed is not None:
                    return self._execute(claimed, worker_id, common, breaker, lease_s, hold)
            finally:
                breaker.release()  # gives back this thread's unreported probe (claim lost); else no-op
                if slotted:
                    self.handler_slots.release(op.tool)
            op = self.store.operations.get(operation_key) or op
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

    def _verify(self, op: OperationRecord, now: datetime | None, snapshot: GuardSnapshot | None) -> str:
        """Why the approved ``op`` may not be claimed now ("": it may), as the authority judges
        it from the store's records right before the claim (and audits); ``now``: the store's
        time the caller read, if it did; ``snapshot``: the decisions and identities read with
        ``op`` (None: the authority reads them, in one statement, when ``op`` was handed down by
        a step that read it alone)."""
        refused = self.judged_by.before_claim(op, self.proposal(op.proposal_id), now, snapshot)
        return refused.reason if refused is not None else ""

    def _spec(self, op: OperationRecord) -> ToolSpec:
        """The tool ``op`` runs (`_verify` passed: it exists in this release)."""
        spec = self.registry.get_for(op.tool, op.tenant_id)
        assert spec is not None
        return spec

    def _hold(self, op: OperationRecord, worker_id: str) -> ResourceHold:
        """The resource leases a delivery of ``op`` needs (`_verify` passed: spec and proposal exist)."""
        spec, proposal = self.registry.get_for(op.tool, op.tenant_id), self.proposal(op.proposal_id)
        assert spec is not None and proposal is not None
        return ResourceHold.of(self.store, spec, op, proposal.tenant_id, proposal.arguments, worker_id)

    def _tenants(self, op: OperationRecord) -> dict[tuple[str, str], str | None]:
        """The tenants of ``op`` and of its stored proposal (`_verify` passed: it exists), as
        their rows say: what a delivery's events carry (`Operations.claim`, `.transition`)."""
        proposal = self.proposal(op.proposal_id)
        assert proposal is not None
        return {
            ("operations", op.operation_key): op.tenant_id,
            ("proposals", proposal.proposal_id): proposal.tenant_id,
        }

    def _audit_fields(self, op: OperationRecord, call_id: str | None) -> dict[str, Any]:
        """The fields every event of one delivery of ``op`` carries (its tool and proposal are
        known to exist: `_verify` passed)."""
        spec = self.registry.get_for(op.tool, op.tenant_id)
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
        hold: ResourceHold,
    ) -> Delivery:
        """Run the claimed operation's handler under this process's clock and persist its outcome
        (see `ClaimedWrite`)."""
        spec = self.registry.get_for(op.tool, op.tenant_id)
        assert spec is not None and op.proposal_id is not None
        proposal = self.proposal(op.proposal_id)
        assert proposal is not None
        claimed = ClaimedWrite(
            store=self.store,
            auditor=self.auditor,
            overruns=self.overruns,
            spec=spec,
            operation_key=op.operation_key,
            worker_id=worker_id,
            lease_s=lease_s,
            common=common,
            hold=hold,
            tenants=self._tenants(op),
        )
        return scope.run_write(claimed, proposal, breaker, self.credential_provider, self.clock.now())

    def _wait_for_terminal(self, operation_key: str, wait_s: float) -> OperationRecord:
        deadline = time.monotonic() + wait_s
        delay = 0.01
        while True:
            op = self.store.operations.get(operation_key)
            assert op is not None
            if op.status != "executing" or time.monotonic() >= deadline:
                return op
            time.sleep(delay)
            delay = min(delay * 2, 0.25)


def first_refusal(checked: loaded_code.CheckedCall, ownership: OwnershipLookups) -> Rejection:
    """The refusal of a read whose handler its ownership lookups did not let start: the first
    answer, in order, that `OwnershipLookups.judge` refuses (one that raised, or never came
    within its deadline, answered nothing: ``resolver_failed``)."""
    # the worker stops only at a refused answer: a refusal is always found
    return ownership.refusal(checked.answers) or ownership.unanswered(0)


__all__ = ["Executor", "first_refusal"]
