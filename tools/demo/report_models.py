"""The values the report tools exchange with the model: report types, dates, job ids and results.

Kept apart from `toolgate.tools.demo.reports` (the job service and the tool specs) because these
are the tools' contract with the model: the JSON schemas the manifest pins and the shapes
``sanitize_result`` bounds a reply to, and ``CheckJobStatusArgs``. ``SubmitReportJobArgs`` stays
in ``reports`` beside `toolgate.tools.demo.reports.date_range_problem`, the range rule that both
its validator and the ``submit_report_job`` handler apply: the reviewed manifest hashes that
function as part of the handler's code, under its module.
"""

from __future__ import annotations

import re
from datetime import date, datetime
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from toolgate.tools.spec import StrictArgs, ToolResult

ReportType = Literal["sales_summary", "refund_summary", "order_volume"]

JOB_PATTERN = r"^job_[0-9a-f]{16}$"
"""A job id as the service issues it."""
_ISO_DATE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")


def _iso_date_only(value: Any) -> Any:
    """Accept a date or ``YYYY-MM-DD`` text only (lax date parsing would also take timestamps)."""
    if isinstance(value, date) and not isinstance(value, datetime):
        return value
    if isinstance(value, str) and _ISO_DATE.match(value):
        return value
    raise ValueError("must be a calendar date written YYYY-MM-DD")


ReportDate = Annotated[
    date,
    BeforeValidator(_iso_date_only),
    Field(strict=False, ge=date(2000, 1, 1), le=date(2100, 12, 31)),
]


class CheckJobStatusArgs(StrictArgs):
    """Arguments of ``check_job_status``."""

    job_id: str = Field(
        pattern=JOB_PATTERN,
        description="The job_id returned by submit_report_job.",
        examples=["job_afea4f7509226529"],  # well-formed only: the service issues a random id per job
    )


class SubmitReportJobResult(ToolResult):
    """A job accepted for generation; the report is not ready yet."""

    job_id: str
    status: Literal["submitted"]
    estimated_seconds: int
    poll_after_seconds: int


class ReportSummary(ToolResult):
    """The bounded result of a complete report."""

    report_type: str
    date_from: str
    date_to: str
    row_count: int
    total_amount_cents: int
    total_refunded_cents: int


class JobStatusResult(ToolResult):
    """Where a job stands; ``poll_after_seconds`` says when to ask again (None once complete)."""

    job_id: str
    status: Literal["running", "complete"]
    poll_after_seconds: int | None
    summary: ReportSummary | None = None


__all__ = [
    "JOB_PATTERN",
    "CheckJobStatusArgs",
    "JobStatusResult",
    "ReportDate",
    "ReportSummary",
    "ReportType",
    "SubmitReportJobResult",
]
