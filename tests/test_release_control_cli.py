"""``toolgate release shadow|canary|promote|rollback|status`` through the real CLI (subprocesses).

The demo releases: ``ops-tools/1.0.0`` is configured (the control), ``ops-tools/1.1.0`` the
candidate. One test walks the whole rollout and its rollback, gathering its evidence the way an
operator does (``evals run``, ``release waive-review``, ``release rollback --dry-run``) and
refused at each step until it has it; the others attack the doors: no token, a wrong token,
another person's token and a non-admin's own token are each refused with exit 2 and one
``error=<code>`` line, and nothing changes but one refusal audit event each.
"""

from __future__ import annotations

import importlib.util
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from release_control_support import ADMIN_CREDENTIALS
from support import TEST_KEY, cli_env, kv_lines, open_test_store, seed_people, toolgate
from test_cli_doors import (
    all_tables,
    assert_only_refusals_recorded,
    assert_refused,
    audit_seq,
    audit_since,
    run_each,
)

from toolgate.canonical import digest
from toolgate.evals.fixtures import DEFAULT_DATASET, load_dataset
from toolgate.graph.bootstrap import release_manifest
from toolgate.policy.identities import IdentityDirectory
from toolgate.policy.principal import Principal
from toolgate.releases.bundle import ReleaseEnv
from toolgate.releases.loader import load_release
from toolgate.store.evidence import record as record_evidence
from toolgate.tools.demo.identities import demo_token

CONTROL, CANDIDATE = "ops-tools/1.0.0", "ops-tools/1.1.0"
STATUS_CALL = 'call get_service_status {"service_alias": "web"}'
RESTART_CALL = 'call restart_service {"service_alias": "web", "reason": "stuck after deploy"}'


def facts(result: Any) -> dict[str, str]:
    """The first ``key=value`` line of a command's output."""
    assert result.returncode == 0, result.stderr
    return kv_lines(result.stdout)[0]


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    data_dir = tmp_path / "data"
    seed_people(data_dir)
    return data_dir, cli_env(
        data_dir, TOOLGATE_RELEASE=CONTROL, TOOLGATE_CANARY_MIN_CALLS="1", TOOLGATE_CANARY_MIN_MINUTES="0"
    )


def add_admin(data_dir: Path, user_id: str) -> None:
    """Another admin beside ivy, with the demo token for ``user_id``."""
    store = open_test_store(data_dir)
    try:
        admin = Principal(user_id=user_id, tenant_id="acme", roles=frozenset({"admin"}))
        IdentityDirectory(store).add(admin, by=None, token=demo_token(user_id))
    finally:
        store.close()


def with_evidence(data_dir: Path) -> None:
    """The rows ``evals run`` (a PASS) and ``release rollback --dry-run`` (a PASS) record for the
    candidate over the control, written directly: these tests attack what comes after."""
    store = open_test_store(data_dir)
    try:
        sha = {}
        for release_id in (CONTROL, CANDIDATE):
            release = load_release(release_id)
            sha[release_id] = digest(
                release_manifest(release, release.registry(ReleaseEnv(store, secret=TEST_KEY)))
            )
        dataset = load_dataset(DEFAULT_DATASET).sha256
        record_evidence(
            store,
            "gate",
            release=CANDIDATE,
            manifest_sha256=sha[CANDIDATE],
            control=CONTROL,
            control_sha256=sha[CONTROL],
            dataset_sha256=dataset,
            verdict="PASS",
            recorded_by="toolgate.evals",
            detail={"derived": 120},  # a complete gate run: the derived cases ran too
        )
        record_evidence(
            store,
            "rollback_dry_run",
            release=CONTROL,
            manifest_sha256=sha[CONTROL],
            verdict="PASS",
            recorded_by="ivy",
        )
    finally:
        store.close()


def test_shadow_canary_promote_and_rollback_through_the_cli(world: tuple[Path, dict[str, str]]) -> None:
    if importlib.util.find_spec("toolgate.evals.gate") is None:
        pytest.skip("rollback runs the critical fixtures of toolgate.evals.gate, not installed yet")
    data_dir, env = world
    db = data_dir / "toolgate.sqlite"
    status = facts(toolgate(["release", "status"], env))
    assert (status["phase"], status["automatic_stop"], status["rollback_release"]) == (
        "none",
        "not_applicable",
        "none",
    )
    shadow = ["release", "shadow", CANDIDATE, "--as", "ivy"]
    assert_refused(toolgate(shadow, env, check=False), "gate_not_passed")
    gate = toolgate(
        ["evals", "run", "--candidate", CANDIDATE, "--control", CONTROL, "--report-dir", str(data_dir / "r")],
        env,
        check=False,
    )
    assert gate.returncode == 1 and gate.stdout.splitlines()[0].endswith("gate=FAIL"), gate.stdout
    assert "gate_failure unreviewed_critical=" in gate.stdout  # review is required by default
    assert "evidence=recorded verdict=PASS" in gate.stdout  # everything but review passed
    assert_refused(toolgate(shadow, env, check=False), "review_missing")
    missing = toolgate(["release", "evidence", CANDIDATE], env, check=False)
    assert missing.returncode == 1
    assert [line.get("missing") for line in kv_lines(missing.stdout)[1:]] == [
        "review_missing",
        "rollback_dry_run_missing",
    ]
    add_admin(data_dir, "ines")
    waive = [
        "release",
        "waive-review",
        CANDIDATE,
        "--reason",
        "demo release, cases read in the walkthrough",
    ]
    waived = facts(toolgate([*waive, "--as", "ines"], env))  # four eyes: ines waives, ivy moves it
    assert (waived["review"], waived["by"]) == ("waived", "ines")
    assert_refused(toolgate(shadow, env, check=False), "rollback_dry_run_missing")
    ready = facts(toolgate(["release", "rollback", "--dry-run", "--as", "ivy"], env))
    assert (ready["rollback_dry_run"], ready["from"], ready["target"], ready["evidence"]) == (
        "PASS",
        "none",
        CONTROL,
        "recorded",
    )
    complete = facts(toolgate(["release", "evidence", CANDIDATE], env))
    assert (
        complete["gate"],
        complete["review_waived"],
        complete["rollback_dry_run"],
        complete["evidence"],
    ) == (
        "PASS",
        "yes",
        "PASS",
        "complete",
    )

    own = toolgate(["release", "shadow", CANDIDATE, "--as", "ines"], env, check=False)
    assert_refused(own, "own_waiver")  # the waiver's author does not move it herself
    assert facts(toolgate(shadow, env))["phase"] == "shadow"
    assert facts(toolgate(["run", STATUS_CALL, "--as", "sam"], env))["release"] == CONTROL
    status = facts(toolgate(["release", "status"], env))
    assert (status["release"], status["phase"], status["shadow_calls"]) == (CANDIDATE, "shadow", "1")

    canary = facts(toolgate(["release", "canary", CANDIDATE, "--percent", "100", "--as", "ivy"], env))
    assert (canary["phase"], canary["canary_percent"]) == ("canary", "100")
    assert_refused(
        toolgate(["release", "promote", "--as", "ivy"], env, check=False), "canary_traffic_too_low"
    )
    waiting = toolgate(["run", RESTART_CALL, "--as", "sam"], env)
    first, proposal = kv_lines(waiting.stdout)[:2]
    assert (first["status"], first["release"]) == ("awaiting_approval", CANDIDATE)
    status = facts(toolgate(["release", "status"], env))
    for key, value in {
        "phase": "canary",
        "canary_percent": "100",
        "approval_bypasses": "0",
        "duplicate_effects": "0",
        "ambiguous_operations": "0",
        "rollback_release": CONTROL,
        "automatic_stop": "armed",
        "audit_chain": "verified",
    }.items():
        assert status[key] == value, (key, status)
    assert "p95_latency_ms" in status and status["latency_basis"] == "handler_audit"

    promoted = facts(toolgate(["release", "promote", "--as", "ivy"], env))
    assert (promoted["release"], promoted["rollback_release"]) == (CANDIDATE, CONTROL)
    dry = facts(toolgate(["release", "rollback", "--dry-run", "--as", "ivy"], env))
    assert (dry["rollback_dry_run"], dry["target"], dry["hashes"]) == ("PASS", CONTROL, "verified")
    passed, total = dry["critical"].split("/")
    assert passed == total and int(total) > 0
    verify = toolgate(["verify", "--check", "rollback_dry_run"], env)
    assert (
        f"rollback_dry_run=PASS target={CONTROL} hashes=verified critical={dry['critical']}" in verify.stdout
    )

    before = audit_seq(db)
    done = facts(toolgate(["release", "rollback", "--as", "ivy"], env))
    assert (done["rollback"], done["from"], done["target"]) == ("done", CANDIDATE, CONTROL)
    assert ("release.rolled_back", None) in audit_since(db, before)
    status = facts(toolgate(["release", "status", "--verify-rollback"], env))
    assert (status["active"], status["phase"], status["rollback_release"]) == (CONTROL, "rolled_back", "none")
    assert facts(toolgate(["run", STATUS_CALL, "--as", "sam"], env))["release"] == CONTROL

    # the candidate's in-flight proposal: approvable under its own release, never executed
    approved = facts(toolgate(["approve", proposal["proposal"], "--as", "omar"], env))
    assert approved["status"] == "approved"
    resumed = facts(toolgate(["resume", first["thread"]], env))
    assert resumed["status"] == "needs_review"
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    key = con.execute(
        "SELECT operation_key FROM proposals WHERE proposal_id = ?", (proposal["proposal"],)
    ).fetchone()[0]
    worker = facts(toolgate(["worker", "execute", "--operation-key", key], env))
    assert (worker["claim"], worker["status"]) == ("NOT_ATTEMPTED", "approved")
    assert con.execute("SELECT COUNT(*) FROM sor_restart_requests").fetchone()[0] == 0
    refused = con.execute(
        "SELECT COUNT(*) FROM audit_events WHERE event = 'approval.refused_at_execution' AND code = 'approval_invalid'"
        " AND proposal_id = ?",
        (proposal["proposal"],),
    ).fetchone()[0]
    con.close()
    assert refused == 2  # the resumed thread and the worker


COMMANDS = {
    "shadow": ["release", "shadow", CANDIDATE, "--as", "ivy"],
    "canary": ["release", "canary", CANDIDATE, "--percent", "5", "--as", "ivy"],
    "promote": ["release", "promote", "--as", "ivy"],
    "rollback": ["release", "rollback", "--as", "ivy"],
}


def test_every_release_change_refuses_a_missing_wrong_borrowed_or_non_admin_credential(
    world: tuple[Path, dict[str, str]],
) -> None:
    data_dir, env = world
    db = data_dir / "toolgate.sqlite"
    with_evidence(data_dir)
    facts(toolgate(["release", "shadow", CANDIDATE, "--as", "ivy"], env))  # something to change
    before, seq = all_tables(db), audit_seq(db)
    attempts, expected = [], []
    # this test is about each command's own credential check: dozens of failures for ivy in a
    # minute would be throttled (`sign_in_throttled`, tests/test_sign_in_throttle.py) first
    unthrottled = {**env, "TOOLGATE_SIGN_IN_FAILURES_PER_PERSON": "1000"}
    for args in COMMANDS.values():
        for extra, who, refusal in ADMIN_CREDENTIALS.values():
            call = [a if a != "ivy" else who for a in args]
            attempts.append((call, {**unthrottled, **extra}))
            expected.append(refusal)
    results = run_each(attempts)
    for result, (_, code) in zip(results, expected, strict=True):
        assert_refused(result, code)
    after = all_tables(db)
    assert_only_refusals_recorded(before, after)
    assert sorted(audit_since(db, seq)) == sorted(expected)


def test_an_edited_rollout_row_is_refused_by_every_command(world: tuple[Path, dict[str, str]]) -> None:
    data_dir, env = world
    db = data_dir / "toolgate.sqlite"
    with_evidence(data_dir)
    facts(toolgate(["release", "shadow", CANDIDATE, "--as", "ivy"], env))
    con = sqlite3.connect(db)
    con.execute("UPDATE release_rollouts SET phase = 'canary', canary_bp = 10000")
    con.commit()
    con.close()
    status = toolgate(["release", "status"], env, check=False)
    assert status.returncode == 1 and kv_lines(status.stdout)[0]["state"] == "tampered"
    for args in COMMANDS.values():
        assert_refused(toolgate(args, env, check=False), "release_state_tampered")
    served = toolgate(["run", STATUS_CALL, "--as", "sam"], env)
    assert kv_lines(served.stdout)[0]["release"] == CONTROL  # the configured release, not the edit's
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    codes = [r[0] for r in con.execute("SELECT code FROM audit_events WHERE event = 'release.refused'")]
    con.close()
    assert codes.count("release_state_tampered") >= 4 and json.dumps(codes)
