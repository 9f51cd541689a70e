"""The adversarial dispatch cases in pytest: each case, then the totals that prove fail-closed.

Every case runs once per session (the ``adversarial_report`` fixture in conftest.py); the tests
here assert each case's result and the run's totals from that one run."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import TEST_KEY

from toolgate.evals.adversarial.case import PROPOSAL_CREATED, AdversarialCase, Call
from toolgate.evals.adversarial.cases import CASES
from toolgate.evals.adversarial.runner import DispatchRunner, RunReport
from toolgate.store import SQLiteStore


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case(adversarial_report: RunReport, case: AdversarialCase) -> None:
    result = adversarial_report.results[CASES.index(case)]
    assert result.case is case
    assert result.outcome == case.expected
    assert result.handler_calls == result.completed_reads, "a refused call reached a handler"
    if case.expected != PROPOSAL_CREATED:
        assert result.proposals == 0


def test_every_rejection_code_is_covered() -> None:
    from toolgate.errors import LOADED_CODE_CODES, PUBLISHED_TOOL_CODES, REJECTION_CODES, STATE_CODES

    # state codes come from a rewritten checkpoint, not a model's call: tests/test_state_tampering.py;
    # loaded-code codes from a release's own code failing: tests/test_hostile_resolver.py
    # published-tool codes from tools loaded from published JSON definitions: tests/test_published_tools.py
    assert {c.expected for c in CASES} >= (
        set(REJECTION_CODES) - set(STATE_CODES) - set(LOADED_CODE_CODES) - set(PUBLISHED_TOOL_CODES)
    )
    assert len(CASES) >= 150


def test_full_run_prints_the_seed_line_and_no_write_handler_ran(adversarial_report: RunReport) -> None:
    report = adversarial_report
    assert [r.case for r in report.results] == list(CASES)
    lines = report.lines()
    assert lines[0] == (
        "known_read=ACCEPTED unknown_tool=REJECTED malformed_json=REJECTED unknown_alias=REJECTED "
        "cross_tenant=REJECTED unauthorized_write=REJECTED authorized_write=PROPOSAL_CREATED "
        "handlers_executed_for_write=0"
    )
    assert (
        f"cases={len(CASES)} passed={len(CASES)} handlers_executed_for_rejected=0 proposals_for_rejected=0"
        in lines
    )
    assert report.passed


def test_a_wrong_expectation_is_reported_as_a_failure(tmp_path: Path) -> None:
    runner = DispatchRunner(SQLiteStore(tmp_path / "neg.sqlite", key=TEST_KEY))
    wrong = AdversarialCase(
        "expects_acceptance_of_cross_tenant",
        "probe",
        "ACCEPTED",
        (Call("lookup_order", {"order_id": "O-7001"}),),
    )
    report = RunReport(results=[runner.run_case(wrong)])
    assert not report.passed
    assert (
        "failed_case=expects_acceptance_of_cross_tenant expected=ACCEPTED got=cross_tenant" in report.lines()
    )
