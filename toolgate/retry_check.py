"""``toolgate test-retries --all-states``: the guide's retry checkpoint ("simulate failure classes").

The first line is the retry matrix's check line in the guide's form, rendered from the matrix the
gateway runs with (`toolgate.policy.retry.RetryMatrix.lines`). With ``--all-states`` the failure
classes are then simulated, not restated: a model request answered 429 twice and one answered 400
go through the model's retry loop (`call_with_retry`), and a read and an approved write whose
handlers answer 503 go through a real gateway on a fresh embedded store (the demo release, its
records and identities), counting handler calls and audit events. Every wait is recorded, never
slept. The check passes when only the transient classes retried: the 429 and the read, within the
attempt cap, each read retry audited, while the 400 and the write ran once (the write's stored
outcome is what a second delivery gets).
"""

from __future__ import annotations

import contextlib
import secrets
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from toolgate.errors import ToolExecutionError
from toolgate.graph.bootstrap import initialize_store
from toolgate.graph.review.decisions import decide
from toolgate.graph.review.proposals import draft_proposal, store_proposal
from toolgate.policy.identities import IdentityDirectory
from toolgate.policy.retry import DEFAULT_RETRY_MATRIX, ReadRetry, RetryMatrix, call_with_retry
from toolgate.store.sqlite import SQLiteStore
from toolgate.testing import open_test_app
from toolgate.tools.demo import REFUND_RELEASE, DemoSystem, demo_specs
from toolgate.tools.demo.identities import demo_principals, seed_demo_identities
from toolgate.tools.demo.release import DEMO_RELEASES
from toolgate.tools.registry import Registry

READ_TOOL = "get_service_status"
WRITE_TOOL = "restart_service"


@dataclass(frozen=True, kw_only=True)
class RetryCheck:
    """What the simulated failure classes did."""

    matrix: RetryMatrix
    model_429_attempts: int
    """Attempts of a model request answered 429, 429, then 200."""
    model_400_attempts: int
    """Attempts of a model request answered 400 (invalid: never retried)."""
    read_handler_calls: int
    """Calls of a read handler that answered 503 once, then its result."""
    read_retries_audited: int
    """``call.retried`` events that read left."""
    write_handler_calls: int
    """Calls of an approved write's handler that answered 503 (delivered twice)."""
    write_status: str
    """The write's operation status afterwards."""

    @property
    def passed(self) -> bool:
        """Only transient classes retried, within the cap; the write ran once and is reconciled
        (its 503 may have come after its effect), never retried blindly."""
        cap = self.matrix.max_attempts
        return (
            (
                self.model_429_attempts == min(3, cap)
                if self.matrix.retries_status(429)
                else self.model_429_attempts == 1
            )
            and self.model_400_attempts == 1
            and self.read_handler_calls == 2
            and self.read_retries_audited == 1
            and self.write_handler_calls == 1
            and self.write_status == "unknown"  # writes reconcile: a 503 may have followed the effect
        )

    def _write_503(self) -> str:
        if self.write_handler_calls > 1:
            return "retried"
        return "reconcile" if self.write_status == "unknown" else "no_retry"

    def lines(self) -> list[str]:
        """The matrix's check line, the observed line, and the verdict."""
        return [
            *self.matrix.lines(),
            f"model_429_attempts={self.model_429_attempts} model_400_attempts={self.model_400_attempts} "
            f"read_503={'retried' if self.read_handler_calls > 1 else 'no_retry'} "
            f"read_handler_calls={self.read_handler_calls} "
            f"write_503={self._write_503()} "
            f"write_handler_calls={self.write_handler_calls} write_status={self.write_status} "
            f"read_retries_audited={self.read_retries_audited}",
            f"retries={'PASS' if self.passed else 'FAIL'}",
        ]


class _StatusError(Exception):
    """A model transport failure with an HTTP status (classified like the providers' errors)."""

    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status} (simulated)")
        self.status_code = status


def _model_attempts(statuses: list[int], matrix: RetryMatrix) -> int:
    """Attempts `call_with_retry` makes of a request answered ``statuses`` in turn, then 200."""
    attempts: list[int] = []

    def request() -> str:
        attempts.append(1)
        if len(attempts) <= len(statuses):
            raise _StatusError(statuses[len(attempts) - 1])
        return "ok"

    with contextlib.suppress(_StatusError):  # the last failure propagates: counted, not an error here
        call_with_retry(request, matrix=matrix, sleep=lambda _: None)
    return len(attempts)


def _unavailable(handler: Callable[..., Any], calls: list[int], times: int) -> Callable[..., Any]:
    """``handler`` answering 503 on its first ``times`` calls (each counted in ``calls``)."""

    def run(args: Any, ctx: Any) -> Any:
        calls.append(1)
        if len(calls) <= times:
            raise ToolExecutionError("server_error", "HTTP 503 (simulated)", retryable=True)
        return handler(args, ctx)

    return run


def run_retry_check(matrix: RetryMatrix = DEFAULT_RETRY_MATRIX, directory: Path | None = None) -> RetryCheck:
    """Simulate every failure class on a fresh embedded store in ``directory`` (a temporary one)."""
    with tempfile.TemporaryDirectory(prefix="toolgate-retries-") as tmp:
        store = SQLiteStore(Path(directory or tmp) / "retries.sqlite", key=secrets.token_bytes(32))
        try:
            return _simulate(store, matrix)
        finally:
            store.close()


def _simulate(store: SQLiteStore, matrix: RetryMatrix) -> RetryCheck:
    initialize_store(store, DEMO_RELEASES["ops-tools/1.1.0"])
    seed_demo_identities(IdentityDirectory(store))
    system = DemoSystem(store)
    read_calls: list[int] = []
    write_calls: list[int] = []
    specs = []
    for spec in demo_specs(system):
        if spec.name == READ_TOOL:
            spec = replace(spec, handler=_unavailable(spec.handler, read_calls, 1))
        elif spec.name == WRITE_TOOL:
            spec = replace(spec, handler=_unavailable(spec.handler, write_calls, 10))
        specs.append(spec)
    gw = open_test_app(
        release=DEMO_RELEASES[REFUND_RELEASE],
        tools=Registry.of(REFUND_RELEASE, specs, system),
        store=store,
        start=False,
        read_retry=ReadRetry(max_attempts=matrix.max_attempts, sleep=lambda _: None),
    ).gateway
    people = demo_principals()
    requester, reviewer = people["sam"], people["omar"]
    read = gw.registry.get(READ_TOOL)
    write = gw.registry.get(WRITE_TOOL)
    assert read is not None and write is not None
    gw.executor.run_read(
        read, {"service_alias": "web"}, requester, audit_fields={"call_id": "retry-check-read"}
    )
    draft = draft_proposal(
        gw,
        write,
        tenant_id=requester.tenant_id,
        requester_id=requester.user_id,
        thread_id="retry-check",
        call_id="retry-check-write",
        arguments={"service_alias": "web", "reason": "toolgate test-retries"},
    )
    proposal, _, _ = store_proposal(gw, write, draft, actor=requester.user_id)
    decide(gw, proposal.proposal_id, reviewer, "approve")
    for worker in ("retry-check-1", "retry-check-2"):  # a duplicate delivery gets the stored outcome
        gw.executor.deliver(proposal.operation_key, worker_id=worker)
    op = store.operations.get(proposal.operation_key)
    retried = [e for e in store.audit.events() if e.event == "call.retried"]
    return RetryCheck(
        matrix=matrix,
        model_429_attempts=_model_attempts([429, 429], matrix),
        model_400_attempts=_model_attempts([400], matrix),
        read_handler_calls=len(read_calls),
        read_retries_audited=len(retried),
        write_handler_calls=len(write_calls),
        write_status=op.status if op is not None else "missing",
    )


__all__ = ["RetryCheck", "run_retry_check"]
