"""Per-run context: the authenticated principal and the run's knobs (never model-controlled)."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from typing import Any

from toolgate.policy.principal import Principal
from toolgate.settings import setting


@dataclass(kw_only=True)
class Context:
    """Runtime context of one graph run (LangGraph ``context_schema``).

    Given by trusted code on every invoke or resume; the LangGraph server coerces a dict into it.
    A knob left out takes its ``TOOLGATE_*`` setting (`toolgate.settings`), read when the context
    is made.
    """

    principal: Principal | None = None
    """Authenticated caller. A thread remembers its first principal; a later run by another
    principal is refused. A resume by a reviewer or worker may omit it."""
    request_id: str | None = None
    """Internal request id for audit correlation."""
    trace_id: str | None = None
    """Trace id shared by spans and audit events."""
    max_model_turns: int = field(default_factory=lambda: setting("max_model_turns"))
    """Model calls allowed in one task. Like every budget here, read when a thread starts and kept
    in the thread (its ``budget``): later runs and resumes count against the thread's limits."""
    max_tool_calls: int = field(default_factory=lambda: setting("max_tool_calls"))
    """Tool calls accepted in one task: a hard cap on runaway loops. The default leaves room for
    realistic multi-step tasks (public agent suites need up to about 30); lower it per release."""
    max_calls_per_turn: int = field(default_factory=lambda: setting("max_calls_per_turn"))
    """Calls judged one by one in one model turn; the rest of the turn is refused as one batch
    (``too_many_calls``), so a runaway response costs a bounded number of audit events."""
    max_tools_per_request: int = field(default_factory=lambda: setting("max_tools_per_request"))
    """Tools offered to the model per request: the most relevant of the principal's visible
    tools (`toolgate.policy.tool_selection`)."""
    deadline_s: float = field(default_factory=lambda: setting("deadline_s"))
    """Autonomous running time of a task, counted from its start and from each human decision."""
    max_validation_retries: int = field(default_factory=lambda: setting("max_validation_retries"))
    """Invalid-argument retries allowed per tool before the task goes to human review."""
    max_identical_calls: int = field(default_factory=lambda: setting("max_identical_calls"))
    """How often the same tool with the same arguments may be called in one task."""
    credentials: dict[str, str] = field(default_factory=dict, repr=False)
    """The user's own forwarded credentials (e.g. ``crm_token``); never checkpointed, logged or shown."""
    reconcile_delays: tuple[float, ...] = field(default_factory=lambda: setting("reconcile_delays"))
    """Waits between status checks of an unknown outcome (by default 1, 2, 4, 8, 16 s)."""
    max_parallel_calls: int = field(default_factory=lambda: setting("max_parallel_calls"))
    """Independent calls of one turn that may run at the same time (the semaphore)."""
    batch_deadline_s: float = field(default_factory=lambda: setting("batch_deadline_s"))
    """Wall-clock budget of one turn's batch of calls."""
    claim_lease_s: float = field(default_factory=lambda: setting("claim_lease_s"))
    """Lease of an execution claim; recovery may reconcile an operation after it lapses."""
    duplicate_wait_s: float = field(default_factory=lambda: setting("duplicate_wait_s"))
    """How long a duplicate delivery waits for the owner's stored result before reporting in-flight."""
    worker_id: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    """Identity of this executing process, recorded as the claim owner."""

    def __post_init__(self) -> None:
        if isinstance(self.principal, dict):
            self.principal = Principal.from_dict(self.principal)
        elif self.principal is not None and not isinstance(self.principal, Principal):
            raise TypeError("Context.principal must be a Principal or a dict")

    def to_dict(self) -> dict[str, Any]:
        """Plain form (e.g. for the LangGraph SDK ``context=``)."""
        return {
            "principal": self.principal.to_dict() if self.principal else None,
            "request_id": self.request_id,
            "trace_id": self.trace_id,
            "max_model_turns": self.max_model_turns,
            "max_tool_calls": self.max_tool_calls,
        }


__all__ = ["Context"]
