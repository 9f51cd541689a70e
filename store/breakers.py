"""Circuit-breaker state shared by every process on one store.

A breaker opened by one process refuses in every other, and in half-open exactly one caller across
all processes gets the probe: the probe is claimed by one conditional update. Every time decision
(how long the breaker stays open, when an unreported probe lapses) is judged by the store's clock,
so a process with a skewed clock can neither reopen nor close a breaker early
(`toolgate.policy.shared_breaker` is the breaker on top of these rows).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Literal

Admit = Literal["closed", "probe", "open"]


@dataclass(frozen=True)
class BreakerRow:
    """One breaker's shared state."""

    name: str
    state: Literal["closed", "open", "half_open"]
    failures: int
    """Consecutive dependency failures recorded (any process)."""
    retry_in_s: float
    """Seconds of the store's clock until an open breaker lets a probe through (0 otherwise)."""
    probe_owner: str | None
    times_opened: int


class BreakerStates(abc.ABC):
    """The breaker part of the `Store` contract."""

    @abc.abstractmethod
    def breaker_admit(self, name: str, holder: str, probe_lease_s: float) -> tuple[Admit, float, int]:
        """May ``holder`` call the dependency behind breaker ``name`` now? ``("closed", 0, failures)``
        when the breaker is closed; ``("probe", 0, failures)`` when ``holder`` just claimed the one
        probe (the breaker was open past its timeout, or the last probe went unreported for
        ``probe_lease_s``); ``("open", retry_in_s, failures)`` otherwise. Judged by the store's clock."""

    @abc.abstractmethod
    def breaker_report(
        self, name: str, holder: str, *, failed: bool, failure_threshold: int, reset_timeout_s: float
    ) -> BreakerRow:
        """Record one call's verdict. A failure counts; at ``failure_threshold`` consecutive ones, or
        when it is ``holder``'s probe, the breaker opens for ``reset_timeout_s`` of the store's clock.
        A success resets the count and, from the probe's holder, closes the breaker; a success
        reported while the breaker is open (a straggler) changes nothing. Returns the row after."""

    @abc.abstractmethod
    def breaker_release(self, name: str, holder: str) -> bool:
        """Give back ``holder``'s unreported probe (back to open with its old timer, so the next
        caller may probe at once); False when ``holder`` holds no probe of ``name``."""

    @abc.abstractmethod
    def breaker_row(self, name: str) -> BreakerRow | None:
        """The shared state of ``name`` (None: never failed anywhere)."""


__all__ = ["Admit", "BreakerRow", "BreakerStates"]
