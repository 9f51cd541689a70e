"""How much more a candidate release may spend per task than its control before the gate fails.

Why: a release change that makes the model call more tools, take more turns or read more tokens
per task (a longer description, a chattier tool, a model swap) costs money and latency on every
task, and aggregate accuracy does not show it. The release gate compares the per-task cost of the
candidate with its control's on the cases both ran (`toolgate.evals.gate`), and fails a metric
more than its limit worse. Limits live in the release's policy document (``cost_limits``), so a
change is a reviewed change; the gate applies the stricter of the candidate's and the control's,
so a candidate can tighten them, never loosen them for itself.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from toolgate.errors import ConfigurationError

COST_METRICS = ("tool_calls_per_task", "model_turns_per_task", "tokens_per_task")
"""Per-task costs the gate compares (tokens: provider-reported where the model reports usage)."""

DEFAULT_PERCENT = 20.0


@dataclass(frozen=True)
class CostLimits:
    """Percent a candidate may exceed its control per task, for each of `COST_METRICS`."""

    tool_calls_per_task: float = DEFAULT_PERCENT
    model_turns_per_task: float = DEFAULT_PERCENT
    tokens_per_task: float = DEFAULT_PERCENT

    @classmethod
    def from_mapping(cls, raw: Any) -> CostLimits:
        """Parse a policy's ``cost_limits`` (missing metrics keep the default); refuses unknown
        metrics and anything but a finite number >= 0."""
        if not isinstance(raw, Mapping):
            raise ConfigurationError("policy cost_limits must be an object of metric: percent")
        unknown = sorted(set(raw) - set(COST_METRICS))
        if unknown:
            raise ConfigurationError(
                f"unknown cost limit(s) {', '.join(map(str, unknown))} in policy cost_limits"
                f" (known: {', '.join(COST_METRICS)})"
            )
        values: dict[str, float] = {}
        for name, value in raw.items():
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value < 0
            ):
                raise ConfigurationError(f"policy cost_limits.{name} must be a percent >= 0 (got {value!r})")
            values[name] = float(value)
        return cls(**values)

    def stricter(self, other: CostLimits) -> CostLimits:
        """Each metric's smaller limit of the two."""
        return CostLimits(
            **{f.name: min(getattr(self, f.name), getattr(other, f.name)) for f in fields(self)}
        )

    def percent(self, metric: str) -> float:
        """The limit of ``metric`` (one of `COST_METRICS`)."""
        return float(getattr(self, metric))


def over_limit(candidate: float, control: float, percent: float) -> bool:
    """True when ``candidate`` is more than ``percent`` worse than ``control`` (any increase
    over a control of zero)."""
    if candidate <= control:
        return False
    return control == 0 or candidate > control * (1 + percent / 100)


__all__ = ["COST_METRICS", "DEFAULT_PERCENT", "CostLimits", "over_limit"]
