"""Time, in one place: the process clock as an injectable value, and the text form times are kept in.

Two clocks matter in toolgate. The store's clock (`Store.now`: PostgreSQL's ``clock_timestamp()``,
or the host clock for SQLite) judges everything that must not depend on a worker: expiry, leases,
rate-limit windows, recorded times. The process clock (`Clock`) measures what the process itself
waits for: a handler's deadline, which the handler checks against the same clock. Code takes a
`Clock` (the gateway's, `Gateway.clock`) instead of calling ``datetime.now``, so a test can give
it a fixed or moving one.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """A source of the current time (timezone-aware UTC)."""

    def now(self) -> datetime:
        """The current time."""
        ...


@dataclass(frozen=True)
class SystemClock:
    """The host's clock."""

    def now(self) -> datetime:
        """``datetime.now(UTC)``."""
        return datetime.now(UTC)


SYSTEM_CLOCK = SystemClock()
"""The process clock unless one is injected."""


def utcnow() -> datetime:
    """The host clock, for code outside the gateway (simulated downstream systems, scripts)."""
    return SYSTEM_CLOCK.now()


def iso(moment: datetime) -> str:
    """Fixed-width ISO-8601 UTC text, so string order equals time order in both databases."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_ISO_TEXT = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z", re.ASCII)
"""The exact shape `iso` writes (ASCII digits): parsed by ``fromisoformat``, which reads it as
``strptime`` does at a tenth of the cost."""


def parse_iso(text: str) -> datetime:
    """Inverse of `iso`: text of its exact shape by ``fromisoformat``, anything else by
    ``strptime("%Y-%m-%dT%H:%M:%S.%fZ")`` (which also takes what `iso` never writes, such as
    fewer fraction digits, and refuses the rest with `ValueError`)."""
    if type(text) is str and _ISO_TEXT.fullmatch(text):
        return datetime.fromisoformat(text[:-1]).replace(tzinfo=UTC)
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def later(now: str, seconds: float) -> str:
    """``now`` (`iso` text) moved by ``seconds``: a lease's or an expiry's end on the store's clock."""
    return iso(parse_iso(now) + timedelta(seconds=seconds))


def new_id(prefix: str) -> str:
    """A random, time-ordered identifier such as ``evt_0193...``."""
    millis = int(utcnow().timestamp() * 1000)
    return f"{prefix}_{millis:012x}{secrets.token_hex(8)}"


__all__ = ["SYSTEM_CLOCK", "Clock", "SystemClock", "iso", "new_id", "parse_iso", "utcnow"]
