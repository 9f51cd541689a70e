"""The retry matrix and the one retry loop for model transport: retries are defined by failure state.

Different failure states need different recovery, and a blind retry can evade a refusal, multiply
cost or repeat a real-world effect. So the matrix is data (one JSON entry per failure class,
reviewed like policy), and exactly one class may retry automatically: a transient
*model transport* failure (408, 429, 5xx). Everything else is never retried and names its fallback:
an invalid call goes to review, a refusal is explained, a pending approval waits, a handler timeout
is reconciled by its operation key, a completed operation returns its stored result.

`call_with_retry` is the only loop that repeats a model request: capped exponential backoff with
full jitter (so a short outage does not become a synchronized retry storm), a hard attempt cap, and
never a sleep that would end past the task's deadline.

`ReadRetry` is the chapter's §9.3 for handlers, and for reads only: an idempotent read whose handler
timed out or reported a 5xx-class failure (``timeout``, or a retryable ``server_error``) is tried
again with the same capped, jittered backoff and a bounded attempt count. A write never goes through
it: a write's retry is its operation key, the claim and reconciliation (``handler_timeout ->
reconcile_operation``), so a lost reply never becomes a second effect.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeGuard, TypeVar

from toolgate.errors import ConfigurationError, ToolExecutionError
from toolgate.policy.refusals import refusal_in_error

T = TypeVar("T")

TRANSPORT = "model_transport"
"""The only failure class that may retry automatically."""

NEVER_RETRIED: tuple[str, ...] = (
    "invalid_tool_call",
    "refusal",
    "pending_approval",
    "handler_timeout",
    "completed_operation",
)
"""Classes that must never retry automatically (a hard stop, not a setting); config cannot change it."""

FAILURE_CLASSES: tuple[str, ...] = (TRANSPORT, *NEVER_RETRIED)

FALLBACKS: frozenset[str] = frozenset(
    {"needs_review", "explain_or_review", "wait", "reconcile_operation", "return_stored_result"}
)
"""The recovery paths the gateway implements; a fallback outside this set is a configuration error."""

RETRYABLE_STATUSES: frozenset[int] = frozenset({408, 425, 429, *range(500, 600)})
"""Statuses a matrix may list as transient. Retrying a 400/401/403/404/422 never helps."""

DEFAULT_TRANSPORT_FALLBACK = "needs_review"
"""What a task does when transport retries are exhausted (the policy JSON names none)."""


@dataclass(frozen=True)
class RetryDecision:
    """Whether a failure class retries automatically, and what happens instead (or after)."""

    retry: bool
    fallback: str


@dataclass(frozen=True, kw_only=True)
class TransportRetry:
    """Which model transport statuses retry, and how many attempts a request gets in total."""

    retry: tuple[int, ...]
    max_attempts: int
    fallback: str = DEFAULT_TRANSPORT_FALLBACK


@dataclass(frozen=True, kw_only=True)
class RetryMatrix:
    """The retry policy as configuration: one transport rule, a fallback for every other class."""

    model_transport: TransportRetry
    fallbacks: Mapping[str, str] = field(default_factory=dict)
    """Fallback of each never-retried class, keyed by class name."""

    def decision(self, failure_class: str) -> RetryDecision:
        """The matrix's answer for one failure class; an unknown class is a programming error."""
        if failure_class == TRANSPORT:
            return RetryDecision(retry=True, fallback=self.model_transport.fallback)
        if failure_class not in self.fallbacks:
            raise ValueError(f"unknown failure class {failure_class!r}; expected one of {FAILURE_CLASSES}")
        return RetryDecision(retry=False, fallback=self.fallbacks[failure_class])

    def retries_status(self, status: int | None) -> bool:
        """True when a model transport failure with this HTTP status may be retried."""
        return status is not None and status in self.model_transport.retry

    @property
    def max_attempts(self) -> int:
        """Attempts in total (first try included) for one model request."""
        return self.model_transport.max_attempts

    def lines(self) -> list[str]:
        """The retry check line, rendered from this matrix (so a config change shows in it)."""
        short = {"reconcile_operation": "reconcile", "return_stored_result": "stored_result"}
        figures = [
            f"429={'retry_with_jitter' if self.retries_status(429) else 'no_retry'}",
            "invalid_arguments=no_retry",
            "refusal=no_retry",
            "pending_approval=no_retry",
            f"handler_timeout={short.get(self.fallbacks['handler_timeout'], self.fallbacks['handler_timeout'])}",
            "duplicate_delivery="
            + short.get(self.fallbacks["completed_operation"], self.fallbacks["completed_operation"]),
            f"max_attempts={self.max_attempts}",
        ]
        return [" ".join(figures)]

    def to_mapping(self) -> dict[str, Any]:
        """The matrix in the policy JSON shape (``from_mapping(m.to_mapping()) == m``)."""
        transport: dict[str, Any] = {
            "retry": list(self.model_transport.retry),
            "max_attempts": self.model_transport.max_attempts,
        }
        if self.model_transport.fallback != DEFAULT_TRANSPORT_FALLBACK:
            transport["fallback"] = self.model_transport.fallback
        out: dict[str, Any] = {TRANSPORT: transport}
        out.update({name: {"retry": False, "fallback": self.fallbacks[name]} for name in NEVER_RETRIED})
        return out

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> RetryMatrix:
        """Parse the policy JSON shape, failing closed on anything it does not understand.

        Refuses unknown or missing classes, unknown keys, a ``retry`` other than ``false`` for a
        never-retried class, non-transient statuses and unknown fallbacks: a matrix that silently
        retried refusals or unknown outcomes would be worse than no matrix.
        """
        unknown = sorted(set(data) - set(FAILURE_CLASSES))
        missing = [name for name in FAILURE_CLASSES if name not in data]
        if unknown or missing:
            raise ConfigurationError(f"retry matrix: unknown classes {unknown}, missing classes {missing}")
        raw = _entry(data, TRANSPORT, {"retry", "max_attempts", "fallback"})
        statuses = raw.get("retry")
        if not isinstance(statuses, list) or not all(_is_int(s) for s in statuses):
            raise ConfigurationError("retry matrix: model_transport.retry must be a list of HTTP statuses")
        bad = sorted(set(statuses) - RETRYABLE_STATUSES)
        if bad:
            raise ConfigurationError(f"retry matrix: statuses {bad} are not transient and must not retry")
        attempts = raw.get("max_attempts")
        if not _is_int(attempts) or not 1 <= attempts <= 10:
            raise ConfigurationError("retry matrix: model_transport.max_attempts must be an integer 1..10")
        transport = TransportRetry(
            retry=tuple(statuses),
            max_attempts=attempts,
            fallback=_fallback(TRANSPORT, raw.get("fallback", DEFAULT_TRANSPORT_FALLBACK)),
        )
        fallbacks: dict[str, str] = {}
        for name in NEVER_RETRIED:
            entry = _entry(data, name, {"retry", "fallback"})
            if entry.get("retry", False) is not False:
                raise ConfigurationError(f"retry matrix: {name} must never retry automatically")
            fallbacks[name] = _fallback(name, entry.get("fallback"))
        return cls(model_transport=transport, fallbacks=MappingProxyType(fallbacks))


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _entry(data: Mapping[str, Any], name: str, keys: set[str]) -> Mapping[str, Any]:
    entry = data[name]
    if not isinstance(entry, Mapping):
        raise ConfigurationError(f"retry matrix: {name} must be an object")
    extra = sorted(set(entry) - keys)
    if extra:
        raise ConfigurationError(f"retry matrix: unknown keys {extra} in {name}")
    return entry


def _fallback(name: str, value: Any) -> str:
    if value not in FALLBACKS:
        raise ConfigurationError(f"retry matrix: {name} has unknown fallback {value!r}")
    return str(value)


SEED_RETRY_POLICY: Mapping[str, Any] = MappingProxyType(
    {
        "model_transport": {"retry": [408, 429, 500, 502, 503, 504, 529], "max_attempts": 3},
        "invalid_tool_call": {"retry": False, "fallback": "needs_review"},
        "refusal": {"retry": False, "fallback": "explain_or_review"},
        "pending_approval": {"retry": False, "fallback": "wait"},
        "handler_timeout": {"retry": False, "fallback": "reconcile_operation"},
        "completed_operation": {"retry": False, "fallback": "return_stored_result"},
    }
)
"""The default retry policy, in the JSON shape a reviewed policy file uses."""

DEFAULT_RETRY_MATRIX = RetryMatrix.from_mapping(SEED_RETRY_POLICY)


# ---- classifying model errors ------------------------------------------------------------

_TIMEOUT_CLASSES = frozenset({"APITimeoutError", "TimeoutException"})
"""openai/anthropic ``APITimeoutError``; httpx and httpx2 ``TimeoutException`` (read, connect, pool...)."""
_CONNECTION_CLASSES = frozenset({"APIConnectionError", "NetworkError"})
"""openai/anthropic ``APIConnectionError``; httpx and httpx2 ``NetworkError`` (connect, read, write)."""


def classify_model_error(exc: BaseException) -> int | None:
    """The HTTP status of a model transport failure, or None when ``exc`` is not one.

    Matched by class name along the MRO as well as by attributes, because the same failure
    arrives as ``openai`` errors (which wrap ``httpx2`` in current releases), plain ``httpx``
    errors, or another provider's look-alike classes. Timeouts count as 408, connection failures
    as 503 (both transient); a status error reports its own status, retryable or not.
    """
    names = {cls.__name__ for cls in type(exc).__mro__}
    if names & _TIMEOUT_CLASSES:
        return 408
    if names & _CONNECTION_CLASSES:
        return 503
    status = getattr(exc, "status_code", None)
    if _is_int(status):
        return status
    status = getattr(getattr(exc, "response", None), "status_code", None)
    return status if _is_int(status) else None


# ---- the retry loop ---------------------------------------------------------------------


_JITTER = random.Random()
"""The jitter source when the caller gives none (seeded once per process, not once per call)."""


def call_with_retry(
    fn: Callable[[], T],
    *,
    matrix: RetryMatrix = DEFAULT_RETRY_MATRIX,
    deadline: float | None = None,
    base_delay_s: float = 0.5,
    max_delay_s: float = 8.0,
    sleep: Callable[[float], Any] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    rng: random.Random | None = None,
    on_retry: Callable[[int, int, float], None] | None = None,
) -> T:
    """Call ``fn`` and retry only transient model transport failures the matrix allows.

    Backoff is capped exponential with full jitter: before retry ``k`` (0-based) the delay is
    uniform in ``[0, min(max_delay_s, base_delay_s * 2**k)]``. ``deadline`` is a ``clock()``
    value (``time.monotonic()`` by default); a retry whose sleep would end past it is not taken
    and the last error is raised at once, so the caller can still answer within its budget.
    ``on_retry(attempt, status, delay)`` runs before each sleep (``attempt`` is the 1-based
    number of the attempt that failed) for audit and metrics. Anything else propagates at once,
    and so does a refusal (`toolgate.policy.refusals`) whatever its status.
    """
    rng = rng or _JITTER
    attempts = matrix.max_attempts
    for attempt in range(attempts):
        try:
            return fn()
        except Exception as exc:
            status = classify_model_error(exc)
            refused = refusal_in_error(exc) is not None  # the refusal class never retries
            if refused or not matrix.retries_status(status) or attempt + 1 >= attempts:
                raise
            assert status is not None
            delay = rng.uniform(0.0, min(max_delay_s, base_delay_s * 2**attempt))
            if deadline is not None and clock() + delay > deadline:
                raise
            if on_retry is not None:
                on_retry(attempt + 1, status, delay)
            sleep(delay)
    raise AssertionError("unreachable: the last attempt returns or raises")  # pragma: no cover


# ---- retrying idempotent reads -----------------------------------------------------------

READ_RETRIED_KINDS: frozenset[str] = frozenset({"timeout", "server_error"})
"""The handler failure kinds a read may retry: a timeout, or a downstream failure (5xx-class) the
handler reported as retryable. A ``caller_error`` (the arguments are wrong), an unclassified crash
(``server_error`` that is not retryable: a bug does not heal by waiting), an open circuit and a
capability refusal never retry."""


@dataclass(frozen=True, kw_only=True)
class ReadRetry:
    """How the handler of an idempotent read is retried: at most ``max_attempts`` attempts in all,
    before retry ``k`` (0-based) a wait uniform in ``[0, min(max_delay_s, base_delay_s * 2**k)]``
    (full jitter). ``sleep`` and ``rng`` are injectable so tests never sleep for real."""

    max_attempts: int = 3
    """Attempts in total, the first one included (1: reads are never retried)."""
    base_delay_s: float = 0.5
    """The cap of the first wait; it doubles for each further retry."""
    max_delay_s: float = 4.0
    """No wait is longer than this, however many retries came before."""
    sleep: Callable[[float], Any] = field(default=time.sleep, compare=False, repr=False)
    """How a wait is spent (a fake in tests)."""
    rng: random.Random | None = field(default=None, compare=False, repr=False)
    """The jitter source (None: the process's)."""

    def __post_init__(self) -> None:
        if not 1 <= self.max_attempts <= 10 or self.base_delay_s < 0 or self.max_delay_s < 0:
            raise ConfigurationError("read retry: max_attempts must be 1..10 and delays non-negative")

    def retries(self, exc: ToolExecutionError) -> bool:
        """True when a read that failed with ``exc`` may be tried again (attempts aside)."""
        if exc.kind not in READ_RETRIED_KINDS:
            return False
        return exc.kind == "timeout" or exc.retryable is True

    def delay(self, retry: int) -> float:
        """The jittered wait before retry number ``retry`` (0-based)."""
        return (self.rng or _JITTER).uniform(0.0, min(self.max_delay_s, self.base_delay_s * 2**retry))

    def call(
        self, fn: Callable[[], T], on_retry: Callable[[int, ToolExecutionError, float], None] | None = None
    ) -> T:
        """``fn()``, tried again after each failure `retries` accepts while attempts remain;
        ``on_retry(attempt, error, delay)`` runs before each wait (``attempt``: the 1-based number
        of the attempt that failed), for the audit log. The last failure propagates."""
        for attempt in range(self.max_attempts):
            try:
                return fn()
            except ToolExecutionError as exc:
                if not self.retries(exc) or attempt + 1 >= self.max_attempts:
                    raise
                wait_s = self.delay(attempt)
                if on_retry is not None:
                    on_retry(attempt + 1, exc, wait_s)
                self.sleep(wait_s)
        raise AssertionError("unreachable: the last attempt returns or raises")  # pragma: no cover


DEFAULT_READ_RETRY = ReadRetry()
"""Three attempts, waits of at most 0.5 s then 1 s (jittered): a short blip heals, an outage does
not hold the batch (each attempt still has the tool's own timeout)."""


__all__ = [
    "DEFAULT_READ_RETRY",
    "DEFAULT_RETRY_MATRIX",
    "FAILURE_CLASSES",
    "NEVER_RETRIED",
    "READ_RETRIED_KINDS",
    "SEED_RETRY_POLICY",
    "ReadRetry",
    "RetryDecision",
    "RetryMatrix",
    "TransportRetry",
    "call_with_retry",
    "classify_model_error",
]
