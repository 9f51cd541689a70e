"""The demo report service: ``submit_report_job`` and ``check_job_status`` (submit, then poll).

A report takes longer than one tool round trip, so it is modelled as submit / poll: submit
returns a ``job_id`` immediately, and the status tool says ``running`` until the job's duration
has passed, then ``complete`` with a small, bounded summary. Status is computed from the stored
``submitted_at`` and duration against an injectable clock: no background thread, no sleeping,
nothing that blocks a worker. Submit declares a `Wait`: the worker polls the status tool and
the model gets the job's final status as the submit's result (`toolgate.graph.nodes.wait`), with
no turn per poll; the status tool keeps its polling cadence for a wait that expired.

The summary is computed from ``sor_orders`` when the job is submitted (the demo orders have no
dates, so the date range is recorded and echoed rather than filtered on) and revealed only when
the job is complete. Requests are logged in ``sor_report_requests``; jobs dedupe on the
idempotency key. The report types, dates and result models are in
`toolgate.tools.demo.report_models`.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from pydantic import Field, model_validator

from toolgate.clock import iso, parse_iso, utcnow
from toolgate.errors import ToolExecutionError
from toolgate.store import Migration
from toolgate.tools.demo.report_models import (
    CheckJobStatusArgs,
    JobStatusResult,
    ReportDate,
    ReportType,
    SubmitReportJobResult,
)
from toolgate.tools.demo.service import DemoService, Owner, Seed
from toolgate.tools.spec import (
    ApprovalClass,
    HandlerContext,
    NoRollback,
    ResourceRef,
    StrictArgs,
    ToolSpec,
    Wait,
)

_SCHEMA = """
CREATE TABLE sor_report_requests (
    request_id TEXT PRIMARY KEY, idempotency_key TEXT, tenant_id TEXT NOT NULL, report_type TEXT NOT NULL,
    date_from TEXT NOT NULL, date_to TEXT NOT NULL, received_at TEXT NOT NULL
);
CREATE TABLE sor_report_jobs (
    job_id TEXT PRIMARY KEY, idempotency_key TEXT NOT NULL UNIQUE, tenant_id TEXT NOT NULL,
    report_type TEXT NOT NULL, date_from TEXT NOT NULL, date_to TEXT NOT NULL,
    submitted_at TEXT NOT NULL, duration_s INTEGER NOT NULL,
    row_count INTEGER NOT NULL, total_amount_cents BIGINT NOT NULL, total_refunded_cents BIGINT NOT NULL
)"""

MIGRATIONS: tuple[Migration, ...] = (
    Migration(name="demo reports: requests and jobs", sqlite=_SCHEMA, postgres=_SCHEMA),
)

REPORT_DURATIONS_S: dict[str, int] = {"sales_summary": 120, "refund_summary": 60, "order_volume": 90}
"""How long each report type takes to generate (the demo's stand-in for real work)."""

_ALL_ORDERS = (
    "SELECT COUNT(*) AS row_count, COALESCE(SUM(amount_cents), 0) AS amount,"
    " COALESCE(SUM(refunded_cents), 0) AS refunded FROM sor_orders WHERE tenant_id = ?"
)
_TOTALS_SQL: dict[str, str] = {
    "sales_summary": _ALL_ORDERS,
    "order_volume": _ALL_ORDERS,
    "refund_summary": _ALL_ORDERS + " AND refunded_cents > 0",
}
"""Fixed aggregate queries per report type, always scoped to the tenant."""

POLL_MIN_S = 10
POLL_MAX_S = 15
"""The polling cadence stated to the model: every 10-15 seconds, no more often."""
WAIT_MAX_S = 1800
"""How long toolgate waits for a submitted report job before giving the model its latest status."""


class SubmitReportJobArgs(StrictArgs):
    """Arguments of ``submit_report_job``."""

    report_type: ReportType = Field(description="Which report to generate.", examples=["sales_summary"])
    date_from: ReportDate = Field(
        description="First day covered, YYYY-MM-DD (on or before date_to).", examples=["2026-01-01"]
    )
    date_to: ReportDate = Field(
        description="Last day covered, YYYY-MM-DD (at most 366 days after date_from).",
        examples=["2026-03-31"],
    )

    @model_validator(mode="after")
    def _ordered_range(self) -> SubmitReportJobArgs:
        problem = date_range_problem(self.date_from, self.date_to)
        if problem:
            raise ValueError(problem)
        return self


SEED_JOB = (
    "job_5eed000000000001",
    "seed-job-acme-1",
    "acme",
    "sales_summary",
    "2024-01-01",
    "2024-01-31",
    "2024-02-01T00:00:00.000000Z",
    5,
    0,
    0,
    0,
)
"""A report job of acme that finished long ago (its id is what ``check_job_status`` cases read)."""


def date_range_problem(date_from: date, date_to: date) -> str | None:
    """The cross-field rule of a report range, shared by the model validator and the handler."""
    if date_from > date_to:
        return "date_from must be on or before date_to"
    if (date_to - date_from).days > 366:
        return "a report covers at most 366 days"
    return None


def _poll_after(remaining_s: float) -> int:
    return int(min(POLL_MAX_S, max(POLL_MIN_S, math.ceil(remaining_s))))


@dataclass
class ReportService(DemoService):
    """The report system of record; ``now`` is injectable so tests move time instead of sleeping.

    One finished job of acme is seeded (`SEED_JOB`), so a status read has a job to find
    without first running a write; every other job exists only once submitted.
    """

    now: Callable[[], datetime] = utcnow

    component = "demo_reports"
    migrations = MIGRATIONS
    owners = {"job": Owner("sor_report_jobs", "job_id")}
    seeds = (
        Seed(
            "sor_report_jobs",
            (
                "job_id",
                "idempotency_key",
                "tenant_id",
                "report_type",
                "date_from",
                "date_to",
                "submitted_at",
                "duration_s",
                "row_count",
                "total_amount_cents",
                "total_refunded_cents",
            ),
            (SEED_JOB,),
        ),
    )
    """A job belongs to the tenant that submitted it."""
    countable = frozenset({"sor_report_requests", "sor_report_jobs"})
    tables = countable
    reads = frozenset({"sor_orders"})
    """The totals of a report come from the orders of the refund story's system."""

    def submit(
        self, tenant_id: str, report_type: str, date_from: date, date_to: date, idempotency_key: str
    ) -> dict[str, Any]:
        """Log the request and create the job once per idempotency key."""
        received = iso(self.now())
        span = (date_from.isoformat(), date_to.isoformat())
        with self.records.transaction() as tx:
            tx.execute(
                "INSERT INTO sor_report_requests VALUES (?, ?, ?, ?, ?, ?, ?)",
                ("rpreq_" + secrets.token_hex(8), idempotency_key, tenant_id, report_type, *span, received),
            )
            totals = tx.one(_TOTALS_SQL[report_type], (tenant_id,))
            assert totals is not None
            tx.execute(
                "INSERT INTO sor_report_jobs (job_id, idempotency_key, tenant_id, report_type, date_from, date_to,"
                " submitted_at, duration_s, row_count, total_amount_cents, total_refunded_cents)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (idempotency_key) DO NOTHING",
                (
                    "job_" + secrets.token_hex(8),
                    idempotency_key,
                    tenant_id,
                    report_type,
                    *span,
                    received,
                    REPORT_DURATIONS_S[report_type],
                    int(totals["row_count"]),
                    int(totals["amount"]),
                    int(totals["refunded"]),
                ),
            )
            job = tx.one(
                "SELECT * FROM sor_report_jobs WHERE tenant_id = ? AND idempotency_key = ?",
                (tenant_id, idempotency_key),
            )
        if job is None:
            raise ToolExecutionError("caller_error", "this idempotency key belongs to another account's job")
        return job

    def job_by_key(self, tenant_id: str, idempotency_key: str) -> dict[str, Any] | None:
        """The job created under an idempotency key, if any (status query for reconciliation)."""
        return self._by_key("sor_report_jobs", tenant_id, idempotency_key)

    def status(self, tenant_id: str, job_id: str) -> dict[str, Any]:
        """Running until ``submitted_at + duration_s``, then complete with the stored summary."""
        with self.records.transaction(write=False) as tx:
            job = tx.one(
                "SELECT * FROM sor_report_jobs WHERE tenant_id = ? AND job_id = ?", (tenant_id, job_id)
            )
        if job is None:
            raise ToolExecutionError("caller_error", f"no job {job_id} for this account")
        elapsed = (self.now() - parse_iso(job["submitted_at"])).total_seconds()
        remaining = job["duration_s"] - elapsed
        if remaining > 0:
            return {"job_id": job_id, "status": "running", "poll_after_seconds": _poll_after(remaining)}
        return {"job_id": job_id, "status": "complete", "poll_after_seconds": None, "summary": job}


def _submitted(job: dict[str, Any]) -> SubmitReportJobResult:
    return SubmitReportJobResult(
        job_id=job["job_id"],
        status="submitted",
        estimated_seconds=job["duration_s"],
        poll_after_seconds=_poll_after(job["duration_s"]),
    )


def report_specs(service: ReportService) -> list[ToolSpec]:
    """``submit_report_job`` and ``check_job_status``, bound to ``service``."""

    def submit_report_job(args: SubmitReportJobArgs, ctx: HandlerContext) -> SubmitReportJobResult:
        problem = date_range_problem(args.date_from, args.date_to)
        if problem:  # the model validator already refuses this; handlers re-check their own rules
            raise ToolExecutionError("caller_error", problem)
        job = service.submit(
            ctx.tenant_id, args.report_type, args.date_from, args.date_to, ctx.require_idempotency_key()
        )
        return _submitted(job)

    def job_status(args: SubmitReportJobArgs, ctx: HandlerContext) -> SubmitReportJobResult | None:
        job = service.job_by_key(ctx.tenant_id, ctx.require_idempotency_key())
        return _submitted(job) if job else None

    def check_job_status(args: CheckJobStatusArgs, ctx: HandlerContext) -> JobStatusResult:
        return JobStatusResult.model_validate(service.status(ctx.tenant_id, args.job_id))

    return [
        ToolSpec(
            name="submit_report_job",
            version="1.0.0",
            owner="analytics",
            description=(
                "Start generating a report (sales_summary, refund_summary or order_volume) for a date range. "
                "An analyst must approve the job first; toolgate then waits for the job and returns its final "
                "status and summary as this call's result (no polling needed). If the result says the wait "
                "expired, use check_job_status with its job_id later; never submit the same report again to "
                "check on it."
            ),
            args_model=SubmitReportJobArgs,
            result_model=SubmitReportJobResult,
            risk="caution",
            effect="Starts one report job over the tenant's orders; it uses reporting capacity for minutes.",
            timeout_s=10,
            max_output_bytes=1024,
            approval=ApprovalClass.role("analyst"),
            required_scopes=frozenset({"reports:write"}),
            handler=submit_report_job,
            handler_revision="submit-report-job/1.0.0",
            rollback=NoRollback("a report job only reads data; there is nothing to undo once it has run"),
            audit_fields=frozenset({"report_type", "date_from", "date_to"}),
            reconcile=job_status,
            retry_safe_when_absent=True,  # jobs dedupe on the idempotency key
            # the orchestrator waits for the job (a durable wait the worker checks), not the model
            wait=Wait(
                status_tool="check_job_status",
                job_field="job_id",
                argument="job_id",
                done=frozenset({"complete"}),
                every_s=POLL_MAX_S,
                max_wait_s=WAIT_MAX_S,
            ),
        ),
        ToolSpec(
            name="check_job_status",
            version="1.0.0",
            owner="analytics",
            description=(
                "Check a report job started by submit_report_job, by its job_id. Poll every 10-15 seconds, "
                "no more often, and wait at least poll_after_seconds before asking again; stop once the status "
                "is 'complete' (the summary is then included). To start a new report use submit_report_job."
            ),
            args_model=CheckJobStatusArgs,
            result_model=JobStatusResult,
            risk="read-only",
            effect="Reads the status of one report job of the authenticated tenant.",
            timeout_s=5,
            max_output_bytes=2048,
            approval=ApprovalClass.none(),
            required_scopes=frozenset({"reports:read"}),
            handler=check_job_status,
            handler_revision="check-job-status/1.0.0",
            pollable=True,
            rollback=NoRollback("read-only: nothing to undo"),
            resource=ResourceRef(kind="job", argument="job_id", conflict=False),
            audit_fields=frozenset({"job_id"}),
        ),
    ]


__all__ = [
    "MIGRATIONS",
    "REPORT_DURATIONS_S",
    "SEED_JOB",
    "WAIT_MAX_S",
    "CheckJobStatusArgs",
    "ReportService",
    "SubmitReportJobArgs",
    "date_range_problem",
    "report_specs",
]
