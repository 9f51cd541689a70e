"""How long a worker leaves alone an operation it could not deliver (`toolgate.graph.worker.loop`).

A worker that cannot deliver an approved operation leaves it approved and tries again later.
When it tries again depends on why it could not:

- refused (a delivery check failed: an approval that no longer verifies, a tool or proposal that
  is gone, a resource its requester no longer owns) or an error: the delay doubles with each
  consecutive one of that operation, ``retry_after_s``, 2x, 4x ... up to ``retry_max_s`` (15
  minutes by default). Such a refusal does not clear by itself (someone must fix a record or the
  release) and every attempt re-checks and re-audits it (``approval.refused_at_execution``), so a
  stream of identical events every pass becomes a handful an hour;
- deferred for load (``resource_busy``, ``circuit_open``, `toolgate.policy.admission.Overloaded`):
  the short fixed delay, the streak neither grown nor reset. Load clears by itself, usually within
  seconds, and the operation passed (or never reached) its checks: doubling would leave a
  deliverable operation waiting long after its slot, lease or breaker freed;
- delivered, lost to another worker, expired or no longer approved: the entry is dropped, so is
  that of any operation a pass finds no longer due (`keep_due`). The map never holds more than
  the store's due set plus one batch.

The back-off is scheduling only, never authority: it only decides when this worker asks again.
Whether an operation is delivered, and by whom, is still decided by the delivery's checks and
the store's claim. Each worker keeps its own (in memory, on its monotonic clock; a restart
starts afresh at ``retry_after_s``).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field


@dataclass
class _Entry:
    due: float
    """Monotonic time from which the operation may be picked again."""
    streak: int = 0
    """Consecutive refusals and errors (load deferrals do not count)."""
    delay: float = 0.0
    """The last refusal's delay (the next one doubles it)."""


@dataclass
class Backoff:
    """Per-operation retry times of one worker: ``base_s`` doubling per refusal up to ``cap_s``."""

    base_s: float
    cap_s: float
    _entries: dict[str, _Entry] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def ready(self, key: str, now: float) -> bool:
        """Whether ``key`` may be picked at ``now`` (an operation never refused always may)."""
        entry = self._entries.get(key)
        return entry is None or entry.due <= now

    def refused(self, key: str, now: float) -> float:
        """Record one more consecutive refusal (or error) of ``key``; the delay until its next pick."""
        entry = self._entries.setdefault(key, _Entry(due=now))
        cap = max(self.cap_s, self.base_s)
        entry.delay = min(entry.delay * 2, cap) if entry.streak else min(self.base_s, cap)
        entry.streak += 1
        entry.due = now + entry.delay
        return entry.delay

    def deferred(self, key: str, now: float, delay_s: float) -> float:
        """Record a deferral for load: ``key`` waits ``delay_s`` (its streak unchanged)."""
        entry = self._entries.setdefault(key, _Entry(due=now))
        entry.due = now + delay_s
        return delay_s

    def drop(self, key: str) -> None:
        """Forget ``key`` (delivered, or no longer approved): a next refusal starts afresh."""
        self._entries.pop(key, None)

    def keep_due(self, due: Collection[str]) -> None:
        """Forget every operation not in ``due`` (the whole due set: it left it)."""
        for key in [k for k in self._entries if k not in due]:
            del self._entries[key]

    def waiting(self, now: float) -> int:
        """Operations not to be picked at ``now``."""
        return sum(entry.due > now for entry in self._entries.values())

    def streak(self, key: str) -> int:
        """Consecutive refusals of ``key`` so far (0: none, or delivered since)."""
        entry = self._entries.get(key)
        return entry.streak if entry else 0


__all__ = ["Backoff"]
