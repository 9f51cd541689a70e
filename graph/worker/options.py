"""How one ``toolgate worker run`` loop runs (`LoopOptions`) and what it did (`LoopSummary`).

Apart from `toolgate.graph.worker.loop` so its delivery pass (`toolgate.graph.worker.delivery`)
and its back-off (`toolgate.graph.worker.backoff`) share them without importing the loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from toolgate.graph.delivery.recovery import DEFAULT_DELAYS

Report = Callable[[dict[str, Any]], None]
"""Receives one fact line per event (a delivery, a recovery, a status check)."""

RETRY_MAX_S = 900.0
"""Default cap of the growing back-off of an operation a worker keeps failing to deliver."""


@dataclass(frozen=True, kw_only=True)
class LoopOptions:
    """How one worker loop runs."""

    worker_id: str
    poll_s: float = 1.0
    """Wait between passes that found nothing to do."""
    batch: int = 10
    """Operations tried per pass."""
    once: bool = False
    """Drain what is due (deliveries and scheduled status checks), then stop."""
    max_operations: int | None = None
    """Stop after this many claims won."""
    lease_s: float = 60.0
    grace_s: float = 30.0
    recover_every_s: float = 10.0
    delays: tuple[float, ...] = DEFAULT_DELAYS
    retry_after_s: float = 30.0
    """How long this worker leaves alone an operation it was refused or deferred on: the first
    delay of the growing back-off (`toolgate.graph.worker.backoff`), and the fixed one of a
    deferral for load."""
    retry_max_s: float = RETRY_MAX_S
    """The back-off's cap: consecutive refusals of one operation double its delay up to this."""


@dataclass
class LoopSummary:
    """What one run did (the CLI's closing line)."""

    claimed: int = 0
    succeeded: int = 0
    failed: int = 0
    unknown: int = 0
    refused: int = 0
    deferred: int = 0
    lost: int = 0
    expired: int = 0
    errors: int = 0
    recovered: int = 0
    reconciled: int = 0
    dead_lettered: int = 0
    backing_off: int = 0
    """Operations still due that this worker was leaving alone when it stopped (its back-off)."""
    stopped: str = ""

    def facts(self) -> dict[str, Any]:
        """The summary as ``key=value`` facts, ``stopped`` first."""
        data = asdict(self)
        return {"stopped": data.pop("stopped"), **data}


__all__ = ["RETRY_MAX_S", "LoopOptions", "LoopSummary", "Report"]
