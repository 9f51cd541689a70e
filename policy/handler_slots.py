"""Per-handler concurrency caps: at most ``ToolSpec.max_concurrency`` calls of one tool's handler
run at once in this process.

The process and tenant caps (`toolgate.policy.admission`) protect the gateway; this one protects a
downstream that only takes so much at once (a legacy service with four connections, a report
generator), whoever calls it. A call that finds every slot of its handler taken waits at most
``wait_s`` (well under a second; nothing is queued past it) and is then refused with
`HandlerBusy` (code ``handler_busy``, retryable): a read answers the model so and its handler never
runs; a write is not claimed and stays approved for a later delivery (``operation.deferred``).
A tool without a cap costs nothing here.

A read's slot is held until its handler's thread finishes, not until its timeout fires: a handler
that overran its deadline still counts against its downstream. A write's slot is held while its
delivery runs.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

from toolgate.errors import ToolExecutionError
from toolgate.settings import setting


class HandlerBusy(ToolExecutionError):
    """Every slot of the tool's handler stayed taken for the whole wait; nothing ran.

    Attributes:
        code: always ``handler_busy`` (also its ``kind``).
        tool: the tool whose handler was full.
        limit: its ``max_concurrency``.
    """

    code = "handler_busy"

    def __init__(self, tool: str, limit: int) -> None:
        super().__init__(
            self.code,
            f"{tool} already runs {limit} call(s) at once, its limit; try again shortly",
            retryable=True,
        )
        self.tool = tool
        self.limit = limit


class HandlerSlots:
    """The running calls of each capped handler of one process, counted under one condition."""

    def __init__(self, wait_s: float | None = None) -> None:
        self.wait_s = setting("admission_wait_s") if wait_s is None else wait_s
        """The longest a call waits for a free slot before it is refused."""
        self._cond = threading.Condition()
        self._running: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()
        """Refusals per tool since the process started (for operators and tests)."""

    def acquire(self, tool: str, limit: int | None) -> bool:
        """Take a slot of ``tool`` (capped at ``limit``; None: no cap, nothing counted), waiting
        at most `wait_s`; `HandlerBusy` when none became free. True when a slot was taken (give it
        back with `release`)."""
        if limit is None:
            return False
        deadline = time.monotonic() + self.wait_s
        with self._cond:
            while self._running[tool] >= limit:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._cond.wait(remaining):
                    if self._running[tool] < limit:
                        break
                    self.refused[tool] += 1
                    raise HandlerBusy(tool, limit)
            self._running[tool] += 1
            return True

    def release(self, tool: str) -> None:
        """Give back one slot of ``tool`` taken by `acquire`."""
        with self._cond:
            self._running[tool] -= 1
            if self._running[tool] <= 0:
                del self._running[tool]
            self._cond.notify_all()

    def running(self, tool: str) -> int:
        """Calls of ``tool`` holding a slot now."""
        with self._cond:
            return self._running[tool]


_PROCESS: HandlerSlots | None = None
_PROCESS_LOCK = threading.Lock()


def process_handler_slots() -> HandlerSlots:
    """This process's handler slots, shared by every executor of the process (so two gateways of
    one release, or of two releases, never run a capped handler more than its cap)."""
    global _PROCESS
    with _PROCESS_LOCK:
        if _PROCESS is None:
            _PROCESS = HandlerSlots()
        return _PROCESS


__all__ = ["HandlerBusy", "HandlerSlots", "process_handler_slots"]
