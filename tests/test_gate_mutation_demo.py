"""Issue 25: every single-point loosening of the demo's previous bundle, ``ops-tools/1.0.0``, fails
the gate on the packaged dataset (mutation score 100%). The wider ``ops-tools/1.1.0`` is scored in
``test_gate_mutation_demo_wide.py`` (its own file, so the two run on different workers)."""

from __future__ import annotations

import pytest

from toolgate.evals.fixtures import DEFAULT_DATASET, load_dataset
from toolgate.evals.mutation import MutationReport, mutate


def assert_every_mutant_killed(report: MutationReport) -> None:
    """Score 100% over every kind, each survivor named if there is one."""
    assert report.base_failures == []
    assert [r.mutant.id for r in report.survived] == []
    assert report.score == 100.0 and len(report.killed) >= 50
    for result in report.killed:  # by the cases derived for its kind of loosening, never by a crash
        assert result.reasons and all(
            r.startswith(("loosened=", "derived_unsafe=")) for r in result.reasons
        ), result
    kinds = report.kinds()
    for kind in (
        "write_declared_read",
        "approval_widened",
        "scope_dropped",
        "ownership_dropped",
        "staff_widened",
        "resources_dropped",
        "output_bound_raised",
        "secrets_reviewed",
        "rule_removed",
        "limit_raised",
        "allowlist_widened",
        "escalation_removed",
        "escalation_threshold_raised",
        "escalation_lowered",
        "rate_limit_raised",
        "approval_window_extended",
    ):
        killed, total = kinds[kind]
        assert killed == total > 0, kind


@pytest.mark.slow
def test_every_loosening_of_the_previous_bundle_fails_the_gate() -> None:
    report = mutate("ops-tools/1.0.0", load_dataset(DEFAULT_DATASET))
    assert_every_mutant_killed(report)
    refused = {r.mutant.id: r.reasons[0] for r in report.results if r.status == "refused_at_load"}
    # the registry itself refuses a misclassified refund: its escalation could not raise "none"
    assert list(refused) == ["write_declared_read:issue_refund"]
    assert "would not raise issue_refund's approval class none" in refused["write_declared_read:issue_refund"]
