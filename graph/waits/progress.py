"""The worker's wait pass: check each due job wait, record its progress, resume its thread when over.

Run by ``toolgate worker run`` on every pass of its loop (`toolgate.graph.worker.loop`), never by
the model. For each wait due by the store's clock it calls the declared status tool's handler
itself, as trusted code: with the requesting tenant and user the wait row records (MAC'd, from the
write's stored proposal), that user's forwarded credentials the status tool declares, sealed for
this wait (`toolgate.graph.waits.delegation`; a seal that is missing, tampered with, another
wait's or expired fails the wait closed as ``refused``, audited ``delegation.refused``), the
status tool's own capabilities (`toolgate.graph.delivery.handler_scope`), its timeout and its circuit
breaker. Each check is recorded in one conditional update
(`Store.waits.record_check`), so two workers never record the same check; the job done, or the
wait past its expiry by the store's clock, makes the wait ``ready``, and the pass resumes its
thread (``resume``; the LangGraph server's waker does the same for server threads). The resumed
thread acts on the store's row alone. A row that does not verify is refused once per process,
audited, and never checked or resumed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from langgraph.types import Command

from toolgate.clock import iso
from toolgate.errors import CapabilityDenied, ToolExecutionError
from toolgate.graph.context import Context
from toolgate.graph.delivery import handler_scope as scope
from toolgate.graph.delivery.capability_audit import audit_denial
from toolgate.graph.delivery.delegation import DelegationRefused
from toolgate.graph.delivery.executor import Executor
from toolgate.graph.nodes.wait import INVALID
from toolgate.graph.waits.delegation import forget, open_for_wait
from toolgate.policy.output import handler_failure, plain_result
from toolgate.store.base import Store
from toolgate.store.handler_access import HandlerAccess
from toolgate.store.waits import WaitRecord
from toolgate.tools import loaded_code

Report = Callable[[dict[str, Any]], None]


def job_status(executor: Executor, row: WaitRecord) -> tuple[str, dict[str, Any] | None, bool]:
    """One check of ``row``'s job: ``(status, sanitized result, done)``; a failed check is
    ``error:<kind>`` (the wait goes on until its expiry). A status tool that declares forwarded
    credentials runs with the requesting user's, sealed for this wait
    (`toolgate.graph.waits.delegation`); `DelegationRefused`, before its handler runs, when they
    are missing, do not open, belong to another wait or expired."""
    write = executor.registry.get(row.tool)
    spec = executor.registry.get_for(row.status_tool, row.tenant_id)  # the tenant's own, if any
    if write is None or write.wait is None or spec is None or spec.is_write:
        return "error:status_tool_missing", None, False
    wait = write.wait
    credentials = open_for_wait(executor.store, row) if spec.forwarded_credentials else {}
    ctx = scope.handler_context(
        spec,
        store=executor.store,
        provider=executor.credential_provider,
        tenant_id=row.tenant_id,
        user_id=row.user_id,
        credentials=credentials,  # the requesting user's own, sealed for this wait; never the worker's
        deadline=scope.deadline_of(executor.clock.now(), spec),
    )
    access = HandlerAccess(spec.name, timeout_s=spec.timeout_s)  # a status tool reads: it never writes
    try:
        args = spec.handler_arguments(spec.parse_arguments({wait.argument: row.job_ref}))
        breaker = executor.breakers.get(executor.registry.breaker_key(row.status_tool, row.tenant_id))
        raw = breaker.call(  # its result made plain data on its worker (`plain_result`)
            loaded_code.run_with_timeout,
            plain_result(spec.handler, spec.result_model),
            spec.timeout_s,
            args,
            ctx,
            access=access,
        )
        data = raw.unwrap()
    except CapabilityDenied as exc:
        scope.audit_denials(executor.auditor, ctx, spec, access)
        audit_denial(executor.auditor, exc, ctx, spec.name, access)
        return f"error:{exc.kind}", None, False
    except ToolExecutionError as exc:  # the job may still finish: the wait goes on until it expires
        return f"error:{handler_failure(exc).kind}", None, False
    except Exception as exc:  # loaded code broke (`HandlerAborted` included): the same
        return f"error:{type(exc).__name__}"[:80], None, False
    status = str(data.get(wait.status_field, "unknown"))
    return status, data, status in wait.done


def graph_resumer(graph: Any) -> Callable[[str], bool]:
    """Resume a thread of ``graph`` (this process's checkpointer) if it is interrupted: what
    ``toolgate resume THREAD`` does. The wake carries no authority."""

    def resume(thread: str) -> bool:
        config: Any = {"configurable": {"thread_id": thread}}
        if not graph.get_state(config).next:
            return False
        graph.invoke(Command(resume={"wake": True}), config, context=Context())
        return True

    return resume


@dataclass
class WaitPass:
    """One worker's wait pass (called once per loop pass)."""

    store: Store
    executor_for: Callable[[str], Executor]
    """The executor (and registry) of the release that proposed an operation."""
    resume: Callable[[str], bool] | None = None
    """Resumes a thread whose wait is ready; None leaves it to the server's waker."""
    report: Report = lambda facts: None
    batch: int = 10
    resume_grace_s: float = 60.0
    """A ready wait another worker made is resumed here only after this long (by the store's clock)."""
    _refused: set[str] = field(default_factory=set)
    _resumed: set[str] = field(default_factory=set)

    def __call__(self) -> int:
        """Check the waits due now, then resume the threads of the waits this pass made ready, and
        of ready waits nobody resumed within ``resume_grace_s`` (by the store's clock: another
        worker died between the two); how many checks were recorded."""
        made_ready: set[str] = set()
        recorded = 0
        for row in self.store.waits.due(self.batch):
            recorded += self.check(row, made_ready)
        if self.resume is not None:
            stale = iso(self.store.now() - timedelta(seconds=self.resume_grace_s))
            for row in self.store.waits.list("ready", limit=self.batch):
                mine = row.operation_key in made_ready or row.updated_at <= stale
                if mine and row.verified and row.operation_key not in self._resumed:
                    self._wake(row)
        return recorded

    def check(self, row: WaitRecord, made_ready: set[str] | None = None) -> int:
        """Check one due wait's job and record it; 1 when recorded."""
        key = row.operation_key
        if not row.verified:
            if key not in self._refused:
                self._refused.add(key)
                executor = self.executor_for(key)
                executor.auditor.record(
                    "wait.refused", "refused", code=INVALID, operation_key=key, thread_id=row.thread_id
                )
                self.report({"wait": key, "refused": INVALID})
            return 0
        executor = self.executor_for(key)
        refused = False
        try:
            status, data, done = job_status(executor, row)
        except DelegationRefused as exc:
            status, data, done, refused = self._refused_check(executor, row, exc)
        updated = self.store.waits.record_check(
            key, checks_seen=row.checks, job_status=status, result=data, done=done, refused=refused
        )
        if updated is None:
            return 0  # another worker recorded this check first
        self.report(updated.facts())
        if updated.state == "ready":
            forget(
                self.store, executor.registry, updated
            )  # the wait is over: the requesting user's sealed credentials go
            if made_ready is not None:
                made_ready.add(key)  # this worker resumes it: one resume per wait, not one per worker
            executor.auditor.record(
                "wait.ready", "completed", code=updated.outcome, operation_key=key, thread_id=row.thread_id,
                tool=row.tool, tenant_id=row.tenant_id, detail={"checks": updated.checks, "job_status": status},
            )  # fmt: skip
        return 1

    def _refused_check(
        self, executor: Executor, row: WaitRecord, exc: DelegationRefused
    ) -> tuple[str, dict[str, Any] | None, bool, bool]:
        """A check refused for want of the requesting user's sealed credentials (audited; its
        handler never ran), as a write refuses them: it fails closed at once, the wait ends
        ``refused`` with the code as its status. Credentials that expired with the wait are its
        natural end: recorded with the latest status, the wait ends ``expired``."""
        executor.auditor.record(
            "delegation.refused", "refused", code=exc.kind, user_id=row.user_id, operation_key=row.operation_key,
            thread_id=row.thread_id, tool=row.status_tool, tenant_id=row.tenant_id,
            detail={"reason": exc.message, "wait": "check"},
        )  # fmt: skip
        self.report({"wait": row.operation_key, "refused": exc.kind})
        if exc.kind == "delegation_expired":
            return row.last_status or f"error:{exc.kind}", row.result, False, False
        return f"error:{exc.kind}", None, False, True

    def _wake(self, row: WaitRecord) -> None:
        assert self.resume is not None
        try:
            woken = self.resume(row.thread_id)
        except Exception as exc:  # one thread failing never stops the worker; the next pass retries
            self.report({"wait": row.operation_key, "thread": row.thread_id, "resumed": "error",
                         "error": type(exc).__name__})  # fmt: skip
            return
        self._resumed.add(row.operation_key)
        after = self.store.waits.get(row.operation_key)
        self.report(
            {
                "wait": row.operation_key,
                "thread": row.thread_id,
                "resumed": str(woken).lower(),
                "state": after.state if after else "missing",
            }
        )


__all__ = ["WaitPass", "graph_resumer", "job_status"]
