"""``toolgate verify``: passes on a healthy database, fails when a check is sabotaged."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from support import cli_env, kv_lines, toolgate


@pytest.mark.slow
def test_verify_passes_then_fails_after_audit_tampering(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    healthy = toolgate(["verify"], env)
    lines = healthy.stdout.splitlines()
    assert "idempotency=PASS deliveries=20 executions=1 stored_result_returned=19" in lines
    assert any(line.startswith("registry_audit=PASS") for line in lines)
    assert any(line.startswith("adversarial_dispatch=PASS cases=") for line in lines)
    assert "verify=PASS" in lines

    key = next(
        line.split("=", 1)[1]
        for line in toolgate(["verify", "idempotency", "--concurrency", "5"], env).stdout.splitlines()
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
