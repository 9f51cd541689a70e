"""Unknown outcomes and dead workers: reconcile before anything may write again.

A handler timeout, a lost response or a worker that died holding a claim leaves an operation
whose effect may or may not have happened. Nothing retries it blindly. The tool's status check
(by idempotency key, or by the legacy system's natural key) is asked with backoff; a found effect
becomes ``succeeded`` with its real result; an absent one is re-approved for delivery only when
the downstream dedupes on the same key; anything still unknown goes to the dead-letter list for
a person, with the context they need, so no outcome stays unknown silently (brandur's "completer").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from toolgate.errors import InvalidTransitionError, ToolExecutionError
from toolgate.graph.delivery import handler_scope as scope
from toolgate.graph.delivery.delegation import DelegationRefused
from toolgate.graph.delivery.executor import Executor
from toolgate.policy.output import redacted_traceback
from toolgate.store.records import OperationRecord, ProposalRecord

log = logging.getLogger(__name__)

DEFAULT_DELAYS: tuple[float, ...] = (1, 2, 4, 8, 16)
"""Status-check backoff: five checks over 31 seconds, time for a slow downstream to settle."""
STATUS_CHECK_BROKE = "status_check_broke"
"""The code of a status check that raised (loaded code broke; it proves nothing either way)."""


@dataclass(frozen=True, kw_only=True)
class Reconciliation:
    """What reconciling one operation found."""

    operation_key: str
    status: Literal["succeeded", "approved", "dead_lettered", "in_flight", "pending", "unchanged", "error"]
    """``error``: the status check itself broke (loaded code: it raised, or exited in its thread;
    audited ``operation.status_check_failed``); the operation stays ``unknown`` and is checked
    again later (the worker's schedule ends in `dead_letter_broken`). ``in_flight``: the effect is not
    found yet, but its handler may still be running (its owner's lease is live); nothing is
    delivered again and nothing is dead-lettered until that lease ends. ``pending``: not found by
    these checks, and they were not the last of its schedule (``final``)."""
    checks: int
    found: bool


def reconcile(
    executor: Executor,
    operation_key: str,
    *,
    delays: Sequence[float] = DEFAULT_DELAYS,
    sleep: Callable[[float], None] = time.sleep,
    final: bool = True,
) -> Reconciliation:
    """Resolve an ``unknown`` operation from the system of record; never re-executes it here.

    The status check runs after each delay (the first after ``delays[0]``, never at once). A found
    effect becomes ``succeeded``; an absent one becomes ``approved`` again (retry-safe tools only)
    but only once the claim's lease has lapsed by the store's clock and no handler of this process
    still runs for it, so an overrunning handler is never raced by a second delivery.
    ``final=False`` (a scheduled check that is not the schedule's last, `toolgate.graph.worker.loop`):
    an effect still not found leaves the operation ``unknown`` (``pending``), never dead-lettered.
    """
    store, auditor = executor.store, executor.auditor
    op = store.operations.get(operation_key)
    if op is None or op.status != "unknown":
        return Reconciliation(operation_key=operation_key, status="unchanged", checks=0, found=False)
    spec = executor.registry.get_for(op.tool, op.tenant_id)
    proposal = store.proposals.get(op.proposal_id) if op.proposal_id else None
    common = _audit_fields(op, proposal)
    history: list[dict[str, str]] = []
    checks = 0
    if spec is not None and spec.reconcile is not None and proposal is not None:
        check = scope.status_check(executor, spec, proposal, **common)  # as the requesting user
        for delay in delays or (0.0,):
            sleep(delay)
            checks += 1
            try:
                found = check()
            except DelegationRefused as exc:  # fails closed: a person decides (dead letter)
                history.append({"check": str(checks), "error": exc.kind})
                break
            except ToolExecutionError as exc:
                history.append({"check": str(checks), "error": exc.kind})
                continue
            except Exception as exc:  # loaded code broke: audited here; the caller decides what next
                auditor.record(
                    "operation.status_check_failed",
                    "error",
                    code=STATUS_CHECK_BROKE,
                    detail={"checks": checks, "error": type(exc).__name__},
                    **common,
                )
                raise
            if found is not None:
                try:
                    result = found.unwrap()
                except ToolExecutionError as exc:  # an answer that breaks its contract proves nothing
                    history.append({"check": str(checks), "error": exc.kind})
                    continue
                try:
                    store.operations.transition(operation_key, "unknown", "succeeded", result=result)
                except InvalidTransitionError:
                    # another worker reconciled it first: its record stands, nothing runs again
                    settled = store.operations.get(operation_key)
                    return Reconciliation(
                        operation_key=operation_key,
                        status="succeeded" if settled and settled.status == "succeeded" else "unchanged",
                        checks=checks,
                        found=True,
                    )
                scope.forget(store, operation_key, spec)  # its sealed credentials are no longer needed
                auditor.record("operation.reconciled", "completed", detail={"checks": checks}, **common)
                return Reconciliation(
                    operation_key=operation_key, status="succeeded", checks=checks, found=True
                )
            history.append({"check": str(checks), "result": "absent"})
            if not spec.retry_safe_when_absent or executor.overruns.running(operation_key):
                continue
            try:
                store.operations.transition(operation_key, "unknown", "approved", lease_lapsed=True)
            except InvalidTransitionError:
                continue  # the owner's lease is live: its handler may still act
            auditor.record("operation.reconciled", "absent_retry_safe", detail={"checks": checks}, **common)
            return Reconciliation(operation_key=operation_key, status="approved", checks=checks, found=False)
    if not final and checks:
        return Reconciliation(operation_key=operation_key, status="pending", checks=checks, found=False)
    reason = (
        "no status check for this tool"
        if spec is None or spec.reconcile is None
        else (f"effect not found after {checks} status checks")
    )
    return _to_a_person(executor, op, reason, history, checks, "unresolved")


def dead_letter_broken(executor: Executor, operation_key: str, *, error: str, checks: int) -> Reconciliation:
    """The last check of an ``unknown`` outcome's schedule broke (loaded code raised ``error``,
    audited by `reconcile`): a person decides, as for an effect never found (code
    ``status_check_broke``), so no outcome stays unknown for ever behind a check that always breaks."""
    op = executor.store.operations.get(operation_key)
    if op is None or op.status != "unknown":
        return Reconciliation(operation_key=operation_key, status="unchanged", checks=0, found=False)
    reason = f"the status check broke ({error}) on the last of {checks} checks"
    history = [{"check": str(checks), "error": error}]
    return _to_a_person(executor, op, reason, history, checks, STATUS_CHECK_BROKE)


def _audit_fields(op: OperationRecord, proposal: ProposalRecord | None) -> dict[str, Any]:
    """The fields every audit event about reconciling ``op`` carries."""
    return {
        "operation_key": op.operation_key,
        "proposal_id": op.proposal_id,
        "tool": op.tool,
        "handler_revision": proposal.handler_revision if proposal else None,
    }


def _to_a_person(
    executor: Executor, op: OperationRecord, reason: str, history: list[dict[str, str]], checks: int, code: str
) -> Reconciliation:
    """Dead-letter the ``unknown`` ``op`` with the context a person needs (audited with ``code``),
    unless its handler may still be running (``in_flight``: not a person's case yet)."""
    store, auditor, operation_key = executor.store, executor.auditor, op.operation_key
    proposal = store.proposals.get(op.proposal_id) if op.proposal_id else None
    common = _audit_fields(op, proposal)
    context = {
        "tool": op.tool,
        "proposal_id": op.proposal_id,
        "attempts": op.attempts,
        "last_error": op.error,
        "arguments_sha256": proposal.arguments_sha256 if proposal else None,
        "history": history,
    }
    running = executor.overruns.running(operation_key)
    if running or store.operations.dead_letter(operation_key, reason, context) is None:
        current = None if running else store.operations.get(operation_key)
        if current is not None and current.status != "unknown":
            # another worker settled it meanwhile (a raced check): its record stands, nothing to say
            return Reconciliation(operation_key=operation_key, status="unchanged", checks=checks, found=False)
        # its handler may still be running (here, or under a live lease elsewhere): not a person's case yet
        auditor.record("operation.reconciled", "in_flight", detail={"checks": checks}, **common)
        return Reconciliation(operation_key=operation_key, status="in_flight", checks=checks, found=False)
    auditor.record("operation.dead_lettered", "dead_lettered", code=code, detail={"reason": reason}, **common)
    return Reconciliation(operation_key=operation_key, status="dead_lettered", checks=checks, found=False)


def verify_effect(executor: Executor, operation_key: str) -> tuple[str, str]:
    """Ask the tool's status check whether the system of record shows what the store says of the
    finished ``operation_key``: ``("active", "")`` when the check ran and agrees (an effect for
    ``succeeded``, none for ``failed``); ``("mismatch", why)`` when it ran and disagrees;
    ``("failed", why)`` when it errored; ``("passive", why)`` when it was not called."""
    store = executor.store
    op = store.operations.get(operation_key)
    if op is None:
        return "passive", "missing"
    if op.status not in ("succeeded", "failed"):
        return "passive", f"status_{op.status}"
    spec = executor.registry.get_for(op.tool, op.tenant_id)
    proposal = store.proposals.get(op.proposal_id) if op.proposal_id else None
    if spec is None or proposal is None:
        return "passive", "tool_not_in_release"
    if spec.reconcile is None:
        return "passive", "no_status_check"
    common = {"operation_key": operation_key, "proposal_id": op.proposal_id, "tool": op.tool}
    try:
        found = scope.status_check(executor, spec, proposal, **common)()  # as the requesting user
    except ToolExecutionError as exc:
        return "failed", f"status_check_{exc.kind}"
    except Exception as exc:  # the check itself broke: say so, never "active"
        return "failed", f"status_check_{type(exc).__name__}"
    if (found is not None) != (op.status == "succeeded"):
        return "mismatch", "effect_found" if found is not None else "effect_absent"
    return "active", ""


@dataclass(frozen=True, kw_only=True)
class RecoveryReport:
    """What one recovery pass did."""

    recovered: list[str]
    reconciled: list[Reconciliation]
    redelivered: list[str]


def recover(
    executor: Executor,
    *,
    worker_id: str,
    grace_s: float = 30.0,
    delays: Sequence[float] = DEFAULT_DELAYS,
    sleep: Callable[[float], None] = time.sleep,
    redeliver: bool = True,
) -> RecoveryReport:
    """Find claims whose lease lapsed more than ``grace_s`` ago, mark them unknown, reconcile every
    unknown operation, and deliver again those the status check proved absent (same key)."""
    recovered = recover_abandoned(executor, grace_s)
    executor.store.delegations.purge()  # sealed credentials of ended or expired operations
    reconciled = [
        reconciled_or_error(executor, op.operation_key, delays=delays, sleep=sleep)
        for op in executor.store.operations.list("unknown")
    ]
    redelivered: list[str] = []
    if redeliver:
        for item in reconciled:
            if item.status == "approved":
                executor.deliver(item.operation_key, worker_id=worker_id)
                redelivered.append(item.operation_key)
    return RecoveryReport(recovered=recovered, reconciled=reconciled, redelivered=redelivered)


def reconciled_or_error(
    executor: Executor,
    operation_key: str,
    *,
    delays: Sequence[float] = DEFAULT_DELAYS,
    sleep: Callable[[float], None] = time.sleep,
) -> Reconciliation:
    """`reconcile`, where a status check that breaks (loaded code) is that operation's ``error``,
    logged redacted, never the caller's: the other operations are still reconciled, the run or
    the command goes on, and the operation stays ``unknown`` for the next check."""
    try:
        return reconcile(executor, operation_key, delays=delays, sleep=sleep)
    except Exception as exc:
        log.warning("the status check of %s broke; it stays unknown:\n%s", operation_key, redacted_traceback(exc))
        return Reconciliation(operation_key=operation_key, status="error", checks=1, found=False)


def recover_abandoned(executor: Executor, grace_s: float) -> list[str]:
    """Mark ``unknown`` (audited ``operation.recovered``) every claim whose lease lapsed more than
    ``grace_s`` ago by the store's clock: its worker is gone, its effect may or may not have
    happened. Returns their keys; reconciling them is the caller's next step."""
    store = executor.store
    recovered: list[str] = []
    for op in store.operations.stale_executing(grace_s):
        try:
            store.operations.transition(
                op.operation_key,
                "executing",
                "unknown",
                owner=op.owner,
                lease_lapsed=True,  # by the store's clock now, not only when listed: a slow owner renews
                error={"kind": "worker_lost", "message": f"claim of {op.owner} lapsed", "retryable": False},
            )
        except InvalidTransitionError:
            continue  # the owner finished or renewed its lease in the meantime
        executor.auditor.record(
            "operation.recovered",
            "unknown",
            operation_key=op.operation_key,
            proposal_id=op.proposal_id,
            tool=op.tool,
            detail={"previous_owner": op.owner or ""},
        )
        recovered.append(op.operation_key)
    return recovered


__all__ = [
    "DEFAULT_DELAYS",
    "STATUS_CHECK_BROKE",
    "Reconciliation",
    "RecoveryReport",
    "dead_letter_broken",
    "reconcile",
    "reconciled_or_error",
    "recover",
    "recover_abandoned",
    "verify_effect",
]
