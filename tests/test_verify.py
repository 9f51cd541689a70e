"""``toolgate verify``: passes on a healthy database, fails when a check is sabotaged.

The adversarial cases run once per session (the ``adversarial_report`` fixture in conftest.py,
asserted case by case in tests/test_adversarial.py): the command is run here with every other
check, and its adversarial check is shown to report that one run of every case."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from support import TEST_KEY, cli_env, kv_lines, toolgate

from toolgate import verify
from toolgate.config import Settings
from toolgate.evals.adversarial.case import AdversarialCase
from toolgate.evals.adversarial.cases import CASES
from toolgate.evals.adversarial.runner import RunReport
from toolgate.graph.bootstrap import open_app
from toolgate.testing import ScriptedChatModel
from toolgate.tools.demo.identities import demo_token

OTHER_CHECKS = [name for name in verify.CHECKS if name != "adversarial_dispatch"]
"""Every check but the adversarial cases, in checklist order."""


@pytest.mark.slow
def test_verify_passes_then_fails_after_audit_tampering(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    toolgate(["init"], env)  # verify checks an existing store; it creates none
    toolgate(["identities", "seed-demo"], env)
    # the idempotency check runs a write: an administrator of the demo people's tenant runs it
    env = {**env, "TOOLGATE_TOKEN": demo_token("ivy")}
    healthy = toolgate(
        ["verify", "--as", "ivy", *(arg for name in OTHER_CHECKS for arg in ("--check", name))], env
    )
    lines = healthy.stdout.splitlines()
    assert [line.split("=", 1)[0] for line in lines] == [*OTHER_CHECKS, "verify"]
    assert "idempotency=PASS deliveries=20 executions=1 stored_result_returned=19" in lines
    assert any(line.startswith("registry_audit=PASS") for line in lines)
    assert "verify=PASS" in lines

    key = next(
        line.split("=", 1)[1]
        for line in toolgate(["verify", "idempotency", "--concurrency", "5", "--as", "ivy"], env).stdout.splitlines()
        if line.startswith("operation_key=")
    )
    checked = toolgate(["worker", "verify", "--operation-key", key], env)
    row = kv_lines(checked.stdout)[0]
    assert row["claim"] == "ACQUIRED" and row["approval"] == "VALID" and row["status"] == "completed"
    assert row["duplicate_delivery"] == "stored_result_returned" and row["executions"] == "1"

    # sabotage: someone with raw database access drops the guard and edits history
    with sqlite3.connect(tmp_path / "toolgate.sqlite") as conn:
        conn.execute("DROP TRIGGER audit_no_update")
        conn.execute("UPDATE audit_events SET result = 'rejected' WHERE seq = 3")
    broken = toolgate(["verify", "--check", "audit_chain"], env, check=False)
    assert broken.returncode == 1
    assert (
        "audit_chain=FAIL first_bad_seq=3" in broken.stdout
        and "verify=FAIL failed=audit_chain" in broken.stdout
    )


def test_verify_reports_the_adversarial_run_of_every_case(
    adversarial_report: RunReport, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "adversarial_dispatch" in verify.CHECKS  # `toolgate verify` without --check runs it
    given: list[tuple[AdversarialCase, ...]] = []

    def the_sessions_run(cases: tuple[AdversarialCase, ...]) -> RunReport:
        given.append(tuple(cases))
        return adversarial_report

    monkeypatch.setattr(verify, "run_adversarial", the_sessions_run)
    app = open_app(
        Settings(data_dir=tmp_path, audit_key_value=TEST_KEY.decode()), model=ScriptedChatModel(responses=[])
    )
    try:
        [result] = verify.run_checks(app, ["adversarial_dispatch"])
    finally:
        app.store.close()
    assert given == [CASES]
    assert result.line() == (
        f"adversarial_dispatch=PASS cases={len(CASES)} handlers_executed_for_rejected=0 proposals_for_rejected=0"
    )


def test_verify_runs_the_gate_and_a_real_rollback_dry_run_on_a_fresh_store(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    toolgate(["init"], env)
    checks = ["schema_quality", "evals_gate", "rollback_dry_run"]
    out = toolgate(
        ["verify", *(arg for name in checks for arg in ("--check", name))], env
    ).stdout.splitlines()
    assert out[0] == "schema_quality=PASS tools=12 failing=0"
    gate = dict(part.split("=", 1) for part in out[1].split(" "))
    assert gate["evals_gate"] == "PASS" and gate["release"] == "ops-tools/1.1.0"
    assert int(gate["cases"]) == int(gate["passed"]) > 0 and int(gate["derived"]) > 0
    assert gate["unreviewed_critical"] == gate["critical"]  # a fresh store holds no sign-off
    # no rollout yet: the dry run checks the active release, what the next rollback restores
    rollback = dict(part.split("=", 1) for part in out[2].split(" "))
    assert rollback["rollback_dry_run"] == "PASS" and rollback["target"] == "ops-tools/1.1.0"
    assert (
        rollback["hashes"] == "verified"
        and rollback["critical"].split("/")[0] == rollback["critical"].split("/")[1]
    )
    assert out[3] == "verify=PASS"
    assert not (tmp_path / "reports").exists()  # verify writes no report
