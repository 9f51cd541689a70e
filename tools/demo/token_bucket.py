"""`TokenBucket`: the outbound rate limit of one integration (the demo CRM's), shared by every
call and tenant of that integration."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

_EPSILON = 1e-9
_MIN_SLEEP_S = 0.001
"""Waits never shorter than this, so a wait always makes progress."""


class TokenBucket:
    """Thread-safe token bucket: ``burst`` calls at once, then ``rate_per_second`` on average.

    ``clock`` and ``sleep`` are injectable so tests drive time instead of waiting for it.
    """

    def __init__(
        self,
        rate_per_second: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if rate_per_second <= 0 or burst < 1:
            raise ValueError("a token bucket needs a positive rate and a burst of at least 1")
        self.rate_per_second = rate_per_second
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(burst)
        self._last = clock()
        self._lock = threading.Lock()

    def _take(self) -> float:
        """Refill, then take a token if one is there: 0.0 on success, else seconds until one is."""
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.rate_per_second)
            self._last = now
            if self._tokens >= 1.0 - _EPSILON:  # refill arithmetic in floats may land a hair short
                self._tokens = max(0.0, self._tokens - 1.0)
                return 0.0
            return (1.0 - self._tokens) / self.rate_per_second

    def try_acquire(self) -> bool:
        """Take a token now, or return False without waiting."""
        return self._take() == 0.0

    def acquire(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for a token; False (at once) when none can come in time."""
        deadline = self._clock() + max(0.0, timeout_s)
        while True:
            wait = self._take()
            if wait == 0.0:
                return True
            if self._clock() + wait > deadline:
                return False
            self._sleep(max(wait, _MIN_SLEEP_S))


__all__ = ["TokenBucket"]
