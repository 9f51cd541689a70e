"""The operator CLI from a separate process: the offline demo and clear usage errors."""

from __future__ import annotations

from pathlib import Path

from support import cli_env, kv_lines, seed_people, toolgate

REQUIRED_LINES = [
    "status=pending_approval",
    "execution_started=false",
    "claim=ACQUIRED",
    "status=completed",
    "duplicate_delivery=stored_result_returned",
    "cross_tenant=REJECTED",
    "demo=PASS",
]


def test_demo_tells_the_refund_story_offline(tmp_path: Path) -> None:
    result = toolgate(["demo"], cli_env(tmp_path))
    for needle in REQUIRED_LINES:
        assert needle in result.stdout, needle
    assert "self_approval=REFUSED" in result.stdout
    assert "payment_requests=1 refunds=1" in result.stdout
    assert (tmp_path / "demo" / "toolgate.sqlite").exists()


def test_review_commands_and_usage_errors(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    seed_people(tmp_path)
    ran = toolgate(
        [
            "run",
            "My blender arrived broken, order O-5512. Please refund it.",
            "--as",
            "cust-ada",
            "--thread",
            "t-cli",
        ],
        env,
    )
    proposal_id = next(r["proposal"] for r in kv_lines(ran.stdout) if "proposal" in r)
    listed = toolgate(["proposals", "list", "--status", "pending_approval"], env)
    assert f"proposal={proposal_id}" in listed.stdout
    shown = toolgate(["proposals", "show", proposal_id], env).stdout
    assert "arguments_sha256=" in shown and "risk=danger" in shown and "status=pending_approval" in shown
    assert " timeout_s=15\n" in shown  # the reviewer sees the handler's hard timeout

    own = toolgate(["approve", proposal_id, "--as", "cust-ada"], env, check=False)
    assert own.returncode == 2 and "error=self_approval" in own.stderr and "Traceback" not in own.stderr
    stale = toolgate(["approve", proposal_id, "--as", "fiona", "--digest", "0" * 64], env, check=False)
    assert stale.returncode == 2 and "error=digest_mismatch" in stale.stderr
    unknown = toolgate(["approve", proposal_id, "--as", "mallory"], env, check=False)
    assert unknown.returncode == 2 and "error=authentication_failed" in unknown.stderr

    rejected = toolgate(["reject", proposal_id, "--as", "fiona", "--reason", "duplicate request"], env)
    assert "status=rejected" in rejected.stdout
    resumed = toolgate(["resume", "t-cli"], env)
    assert "issue_refund [" in resumed.stdout and "]: rejected" in resumed.stdout

    trace_key = next(
        line.split("operation_key=")[1].split()[0] for line in shown.splitlines() if "operation_key=" in line
    )
    trace = toolgate(["audit", "trace", trace_key, "--as", "audrey"], env).stdout
    events = [r["event"] for r in kv_lines(trace) if "event" in r]
    assert events[:3] == ["model.response", "call.accepted", "proposal.created"]
    assert "approval.refused" in events and "proposal.rejected" in events
    assert (
        "missing_transitions=0 release_ids=present approver=verified raw_secrets=0 tamper_check=PASS" in trace
    )
