"""A write's declared wait: its result starts a job the orchestrator, not the model, waits for.

A write tool that starts a long-running job (``submit_report_job``) declares `Wait`: which read
tool reports the job's status, where the job's id is in the write's result and what that tool's
argument is called, which status values end the wait, how often to check and for how long at
most. When such a write completes, the thread suspends durably (`toolgate.graph.nodes.wait`), the
worker checks the job on the schedule (`toolgate.graph.waits.progress`), and the model sees one bounded
summary as the result of its original call: no model turn runs while the job runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toolgate.errors import RegistryError


@dataclass(frozen=True, kw_only=True)
class Wait:
    """How to wait for the job a write's result starts."""

    status_tool: str
    """The read tool that reports the job's status (e.g. ``check_job_status``)."""
    job_field: str
    """The field of the write's result holding the job's id (e.g. ``job_id``)."""
    argument: str
    """The status tool's argument the job id is passed as."""
    status_field: str = "status"
    """The field of the status tool's result that says where the job is."""
    done: frozenset[str] = frozenset({"complete"})
    """Status values that end the wait: the job finished (successfully or not)."""
    every_s: float = 15.0
    """Seconds between two checks (the store's clock decides when one is due)."""
    max_wait_s: float = 3600.0
    """The wait ends as ``expired`` this long after it began, the job done or not."""

    def __post_init__(self) -> None:
        if not (0 < self.every_s <= self.max_wait_s):
            raise RegistryError(f"a wait checks every 0 < every_s <= max_wait_s seconds, got {self.every_s}")
        if not self.done:
            raise RegistryError("a wait needs at least one status value that ends it")

    def job_ref(self, result: Any) -> str | None:
        """The job id in a write's stored result, or None when it holds none usable."""
        value = result.get(self.job_field) if isinstance(result, dict) else None
        return value if isinstance(value, str) and 0 < len(value) <= 200 else None


__all__ = ["Wait"]
