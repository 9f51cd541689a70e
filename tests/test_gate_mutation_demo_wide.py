"""Issue 25: every single-point loosening of the default demo release, ``ops-tools/1.1.0`` (twelve
tools, four rules, an escalation), fails the gate on the packaged dataset: mutation score 100%.
A rule limit raised past what the tool's schema already refuses is equivalent (no call can tell
it from the release) and is listed, not scored."""

from __future__ import annotations

import pytest
from test_gate_mutation_demo import assert_every_mutant_killed

from toolgate.evals.fixtures import DEFAULT_DATASET, load_dataset
from toolgate.evals.mutation import mutate


@pytest.mark.slow
def test_every_loosening_of_the_default_release_fails_the_gate() -> None:
    report = mutate("ops-tools/1.1.0", load_dataset(DEFAULT_DATASET))
    assert_every_mutant_killed(report)
    assert len(report.killed) >= 120
    equivalent = {r.mutant.id: r.reasons[0] for r in report.results if r.status == "equivalent"}
    assert equivalent == {
        "limit_raised:inventory.adjustment_limit:warehouse": (
            "the schema of update_inventory bounds delta at 500: no call reaches the limit"
        )
    }
    wrote = {r.mutant.id for r in report.killed if r.mutant.kind == "write_declared_read"}
    assert wrote == {
        f"write_declared_read:{tool}"
        for tool in (
            "create_purchase_order",
            "restart_service",
            "submit_filing",
            "submit_report_job",
            "update_inventory",
        )
    }
