"""Circuit breakers: a dead dependency degrades one tool, fast, instead of freezing every task.

Without a breaker every call to a dead downstream waits out its full timeout (for example
10 calls x 30 s = 5 minutes per task, and a saturated worker pool for everyone else). A breaker per
tool or per downstream host counts consecutive *dependency* failures (server errors, timeouts,
connection failures); at the threshold it opens and refuses calls in microseconds with a structured,
non-retryable ``server_error`` the model can explain ("temporarily unavailable"). After the reset
timeout exactly one caller is let through as a probe; everyone else is still refused until the probe
reports, so a recovering service is not stampeded. Caller errors (bad arguments, not found) prove the
dependency is answering and never trip it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal, TypeVar

from toolgate.errors import ToolExecutionError

T = TypeVar("T")

BreakerState = Literal["closed", "open", "half_open"]

DEPENDENCY_FAILURE_KINDS: frozenset[str] = frozenset({"server_error", "timeout"})


class BreakerOpenError(ToolExecutionError):
    """Refused without calling the dependency: its circuit is open (or a probe is in flight).

    A ``server_error`` that is not retryable, so the model answers without the tool instead of
    calling it again in a loop; ``retry_after_s`` is for operators and metrics, not the model.
    """

    def __init__(self, name: str, retry_after_s: float) -> None:
        super().__init__("server_error", f"{name} is temporarily unavailable (circuit open)", retryable=False)
        self.name = name
        self.retry_after_s = retry_after_s


def counts_as_failure(exc: BaseException) -> bool:
    """Default predicate: True when ``exc`` says the dependency itself is failing.

    Server errors, timeouts and connection failures count. Caller errors do not (the downstream
    answered), and neither does another breaker's refusal (it never reached the dependency).
    """
    if isinstance(exc, BreakerOpenError):
        return False
    if isinstance(exc, ToolExecutionError):
        return exc.kind in DEPENDENCY_FAILURE_KINDS
    return isinstance(exc, TimeoutError | ConnectionError)


class CircuitBreaker:
    """One breaker: closed -> open after ``failure_threshold`` consecutive failures -> half-open probe.

    Thread-safe. Use ``call(fn, ...)``, or ``acquire()`` then ``reporting()`` / ``record_*`` when the
    call is split across code (the write path acquires before its claim and reports after the
    handler), with ``release()`` in a ``finally``: an unreported probe would leave the breaker
    half-open, refusing every caller. The probe is owned by the thread that acquired it, so
    ``release()`` can never cancel another thread's probe.
    """

    def __init__(
        self,
        name: str,
        failure_threshold: int = 5,
        reset_timeout_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        counts_as_failure: Callable[[BaseException], bool] = counts_as_failure,
    ) -> None:
        if failure_threshold < 1 or reset_timeout_s <= 0:
            raise ValueError("failure_threshold must be >= 1 and reset_timeout_s > 0")
        self.name = name
        self.failure_threshold = failure_threshold
        self.reset_timeout_s = reset_timeout_s
        self.counts_as_failure = counts_as_failure
        self._clock = clock
        self._lock = threading.Lock()
        self._state: BreakerState = "closed"
        self._failures = 0
        self._opened_at = 0.0
        self._probe_in_flight = False
        self._probe_owner: int | None = None
        self._rejected = 0
        self._times_opened = 0

    @property
    def state(self) -> BreakerState:
        """``closed``, ``open`` or ``half_open`` (an open breaker past its timeout reads ``open``
        until a caller takes the probe)."""
        with self._lock:
            return self._state

    def acquire(self) -> None:
        """Permission for one call; raises `BreakerOpenError` at once when refused."""
        with self._lock:
            if self._state == "closed":
                return
            if self._state == "open":
                remaining = self._opened_at + self.reset_timeout_s - self._clock()
                if remaining <= 0:
                    self._state = "half_open"
                    self._probe_in_flight = True
                    self._probe_owner = threading.get_ident()
                    return
                self._rejected += 1
                raise BreakerOpenError(self.name, remaining)
            # half_open: the single probe is out; everyone else waits for its verdict.
            self._rejected += 1
            raise BreakerOpenError(self.name, 0.0)

    def record_success(self) -> None:
        """The dependency answered: a probe's success closes the breaker; failures reset."""
        with self._lock:
            if self._state == "open":
                return  # a straggler from before the breaker opened; the probe decides
            self._state = "closed"
            self._failures = 0
            self._probe_in_flight = False
            self._probe_owner = None

    def record_failure(self) -> None:
        """The dependency failed: count it; at the threshold, or for this thread's probe, open with
        a fresh timer. A straggler admitted before the breaker opened never overrules the probe."""
        with self._lock:
            self._failures += 1
            probe = self._state == "half_open" and self._probe_owner == threading.get_ident()
            if probe or (self._state == "closed" and self._failures >= self.failure_threshold):
                self._open()

    def record_outcome(self, exc: BaseException | None = None) -> None:
        """Report a finished call: None is success; an exception counts only if the predicate says so.

        An exception the predicate does not count (a caller error) still proves the dependency
        answered, so it is a success. A non-``Exception`` (KeyboardInterrupt, cancellation) gives
        no verdict and only releases the acquisition.
        """
        if exc is None:
            self.record_success()
        elif not isinstance(exc, Exception):
            self.release()
        elif self.counts_as_failure(exc):
            self.record_failure()
        else:
            self.record_success()

    def release(self) -> None:
        """Give back an acquisition that got no verdict (the claim was lost, the store failed...).

        If this thread holds the unreported probe, the breaker returns to ``open`` with its old
        timer so the next caller may probe at once. Otherwise (already reported, not the probe)
        nothing changes, so it is safe in a ``finally``.
        """
        with self._lock:
            if self._state == "half_open" and self._probe_owner == threading.get_ident():
                self._state = "open"
                self._probe_in_flight = False
                self._probe_owner = None

    @contextmanager
    def reporting(self) -> Iterator[None]:
        """Record the outcome of the block for an acquisition made earlier (see `record_outcome`)."""
        try:
            yield
        except BaseException as exc:
            self.record_outcome(exc)
            raise
        self.record_success()

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` behind the breaker: acquire, call, record the outcome."""
        self.acquire()
        with self.reporting():
            return fn(*args, **kwargs)

    def snapshot(self) -> dict[str, Any]:
        """Current figures for metrics and the operator console."""
        with self._lock:
            retry_in = (
                max(0.0, self._opened_at + self.reset_timeout_s - self._clock())
                if self._state == "open"
                else 0.0
            )
            return {
                "name": self.name,
                "state": self._state,
                "consecutive_failures": self._failures,
                "failure_threshold": self.failure_threshold,
                "reset_timeout_s": self.reset_timeout_s,
                "retry_in_s": retry_in,
                "probe_in_flight": self._probe_in_flight,
                "rejected": self._rejected,
                "times_opened": self._times_opened,
            }

    def _open(self) -> None:
        self._state = "open"
        self._opened_at = self._clock()
        self._probe_in_flight = False
        self._probe_owner = None
        self._times_opened += 1


class BreakerRegistry:
    """One breaker per key (tool name or downstream host), created on first use with shared settings."""

    def __init__(
        self,
        failure_threshold: int = 5,
        reset_timeout_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        counts_as_failure: Callable[[BaseException], bool] = counts_as_failure,
    ) -> None:
        self._settings: dict[str, Any] = {
            "failure_threshold": failure_threshold,
            "reset_timeout_s": reset_timeout_s,
            "clock": clock,
            "counts_as_failure": counts_as_failure,
        }
        self._lock = threading.Lock()
        self._breakers: dict[str, CircuitBreaker] = {}

    def get(self, key: str) -> CircuitBreaker:
        """The breaker for ``key``, the same object for every caller."""
        with self._lock:
            breaker = self._breakers.get(key)
            if breaker is None:
                breaker = self._breakers[key] = CircuitBreaker(key, **self._settings)
            return breaker

    def snapshot(self) -> list[dict[str, Any]]:
        """Every breaker's figures, sorted by key."""
        with self._lock:
            breakers = sorted(self._breakers.items())
        return [b.snapshot() for _, b in breakers]


__all__ = [
    "BreakerOpenError",
    "BreakerRegistry",
    "BreakerState",
    "CircuitBreaker",
    "counts_as_failure",
]
