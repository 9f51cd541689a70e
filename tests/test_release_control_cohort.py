"""The canary cohort, the canary's tool set and the stop rules: pure decisions, no I/O."""

from __future__ import annotations

import math

import pytest

from toolgate.releases.bundle import ReleaseEnv
from toolgate.releases.loader import load_release
from toolgate.releases.rules import (
    BUCKETS,
    Signals,
    arm_for,
    bp_to_percent,
    canary_specs,
    cohort_bucket,
    high_risk,
    p95,
    percent_to_bp,
    stop_reason,
)
from toolgate.store import SQLiteStore

SALT = "5f1c0e2a9b7d4c3e8a6f0b1d2c3e4f50"
USERS = [(f"tenant-{i % 37}", f"user-{i:05d}") for i in range(10_000)]


def test_the_same_user_lands_in_the_same_arm_every_time() -> None:
    first = [arm_for(SALT, 200, t, u) for t, u in USERS[:500]]
    again = [arm_for(SALT, 200, t, u) for t, u in reversed(USERS[:500])]
    assert first == list(reversed(again))
    assert all(0 <= cohort_bucket(SALT, t, u) < BUCKETS for t, u in USERS[:500])


def test_the_cohort_depends_on_the_tenant_and_the_rollouts_salt() -> None:
    same_user_other_tenant = sum(
        cohort_bucket(SALT, "acme", u) != cohort_bucket(SALT, "globex", u) for _, u in USERS[:200]
    )
    other_salt = sum(cohort_bucket(SALT, t, u) != cohort_bucket("another-salt", t, u) for t, u in USERS[:200])
    assert same_user_other_tenant > 190 and other_salt > 190


@pytest.mark.parametrize("percent", [2.0, 0.5, 10.0, 50.0])
def test_a_canary_stays_within_its_percentage_over_10000_users(percent: float) -> None:
    """Binomial tolerance: within 4 standard deviations of n*p (deterministic: hashing, no RNG)."""
    bp = percent_to_bp(percent)
    inside = sum(arm_for(SALT, bp, t, u) == "candidate" for t, u in USERS)
    n, p = len(USERS), percent / 100
    assert abs(inside - n * p) <= 4 * math.sqrt(n * p * (1 - p)), inside
    assert sum(arm_for(SALT, 10_000, t, u) == "candidate" for t, u in USERS[:100]) == 100


def test_percentages_are_bounded_and_printed_as_typed() -> None:
    assert percent_to_bp(2) == 200 and percent_to_bp(0.01) == 1 and percent_to_bp(100) == 10_000
    for bad in (0, -1, 100.5, 0.001):
        with pytest.raises(ValueError):
            percent_to_bp(bad)
    assert bp_to_percent(200) == "2" and bp_to_percent(50) == "0.5"


def test_high_risk_tools_are_left_out_of_a_canary(tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = SQLiteStore(tmp_path / "specs.sqlite", key=b"specs-only-never-connected")
    specs = load_release("ops-tools/1.1.0").registry(ReleaseEnv(store, secret=b"x" * 16)).tools.values()
    excluded = sorted(s.name for s in specs if high_risk(s))
    assert excluded == ["create_purchase_order", "issue_refund", "submit_filing"]  # danger, two-person
    kept = {s.name for s in canary_specs(specs)}
    assert "restart_service" in kept and "lookup_order" in kept and not kept & set(excluded)


def test_stop_rules_trip_at_once_on_safety_and_on_spikes_only_past_a_minimum() -> None:
    assert stop_reason(Signals(calls_judged=100)) == ""
    assert stop_reason(Signals(approval_bypasses=1)) == "approval_bypass:1"
    assert stop_reason(Signals(duplicate_effects=1)) == "duplicate_effect:1"
    assert stop_reason(Signals(ambiguous_operations=1)) == "ambiguous_operation:1"
    assert stop_reason(Signals(audit_gap="link broken before event 9")).startswith("audit_gap:link_broken")
    assert stop_reason(Signals(calls_judged=3, unknown_tools=3)) == ""  # not past the minimum
    assert stop_reason(Signals(calls_judged=100, unknown_tools=5)) == ""  # not past the share
    assert stop_reason(Signals(calls_judged=20, unknown_tools=5)) == "unknown_tool_spike:5/20"
    assert stop_reason(Signals(calls_judged=20, cross_tenant_denials=4)) == "cross_tenant_spike:4/20"
    assert stop_reason(Signals(loop_budget_breaches=2)) == ""
    assert stop_reason(Signals(loop_budget_breaches=3)) == "loop_budget_breach:3"


def test_p95_is_the_nearest_rank() -> None:
    assert p95([]) is None
    assert p95([5.0]) == 5.0
    assert p95([float(v) for v in range(1, 101)]) == 95.0
