"""``toolgate verify idempotency`` (and ``toolgate verify``, whose ``idempotency`` check runs the
same code) proposes a ``restart_service`` as the demo person ``sam``, approves it as ``omar`` and
delivers it, on the configured store. It ran with no token at all (redteam5): on a store whose
people include ``sam`` and ``omar`` the approval was written in omar's name by someone who never
proved to be anyone, the restart ran, and on a store without them it added them, unauthenticated.

The decision: the check is an administrator's act. It runs only for an authenticated
administrator of the demo people's tenant (``--as ADMIN`` with their ``TOOLGATE_TOKEN``), who is on
the record as the one who ran it (``verify.idempotency``) and who adds the demo people if they are
missing; and only on a demo release, whose ``restart_service`` writes the demo's system of record
(on any other release it would run that release's real handler). Everyone else is refused before
anything runs, audited ``identity.refused``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from support import cli_env, kv_lines, open_test_store, seed_people, toolgate

from toolgate.errors import ConfigurationError
from toolgate.tools.demo import release as demo_release
from toolgate.tools.demo.identities import demo_token


def _count(db: Path, sql: str) -> int:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return int(con.execute(sql).fetchone()[0])
    finally:
        con.close()


def _effects(db: Path) -> tuple[int, int]:
    return (
        _count(db, "SELECT COUNT(*) FROM approvals WHERE reviewer_id = 'omar'"),
        _count(db, "SELECT COUNT(*) FROM sor_restart_requests"),
    )


def _refusals(tmp_path: Path) -> list[str | None]:
    store = open_test_store(tmp_path)
    try:
        return [e.code for e in store.audit.events() if e.event == "identity.refused"]
    finally:
        store.close()


@pytest.mark.parametrize(
    ("token", "args", "code"),
    [
        (None, [], "missing_token"),  # nobody proved who they are
        ("wrong-token-0123456789", ["--as", "ivy"], "authentication_failed"),
        (demo_token("omar"), ["--as", "omar"], "not_admin"),  # the reviewer it acts as: not enough
        (demo_token("ivy"), ["--as", "omar"], "authentication_failed"),  # someone else's token
    ],
)
def test_verify_idempotency_runs_for_no_one_but_an_administrator(
    tmp_path: Path, token: str | None, args: list[str], code: str
) -> None:
    seed_people(tmp_path)  # the demo people, sam, omar and ivy among them, with their own tokens
    env = cli_env(tmp_path, **({"TOOLGATE_TOKEN": token} if token else {}))
    db = tmp_path / "toolgate.sqlite"
    for command in (["verify", "idempotency", "--concurrency", "2"], ["verify", "--check", "idempotency"]):
        result = toolgate([*command, *args], env, check=False)
        assert result.returncode == 2, result.stdout
        assert f"error={code}" in result.stderr
        assert _effects(db) == (0, 0)  # no approval in omar's name, no restart
    assert _refusals(tmp_path)[-2:] == [code, code]


def test_verify_without_the_write_check_needs_no_one(tmp_path: Path) -> None:
    seed_people(tmp_path)
    ran = toolgate(["verify", "--check", "audit_chain"], cli_env(tmp_path))
    assert "verify=PASS" in ran.stdout and _effects(tmp_path / "toolgate.sqlite") == (0, 0)


def test_an_administrator_runs_it_and_is_on_the_record(tmp_path: Path) -> None:
    seed_people(tmp_path)
    env = cli_env(tmp_path, TOOLGATE_TOKEN=demo_token("ivy"))
    ran = toolgate(["verify", "idempotency", "--concurrency", "2", "--as", "ivy"], env)
    assert "deliveries=2 executions=1 stored_result_returned=1" in ran.stdout
    key = kv_lines(ran.stdout)[-1]["operation_key"]
    assert _effects(tmp_path / "toolgate.sqlite") == (1, 1)
    store = open_test_store(tmp_path)
    try:
        started = [e for e in store.audit.events() if e.event == "verify.idempotency"]
        assert [(e.result, e.tenant_id) for e in started] == [("started", "acme")]
        assert store.identities.get("ivy") is not None and key
    finally:
        store.close()


def test_it_is_refused_on_a_release_that_is_not_the_demos(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On another release the check would run that release's own restart handler: a real effect."""
    from support import Harness

    from toolgate.store import SQLiteStore
    from toolgate.verify import authorize_verifier

    harness = Harness(SQLiteStore(tmp_path / "t.sqlite", key=b"k" * 32))
    app = harness.app()
    monkeypatch.setattr(demo_release, "DEMO_RELEASES", {})
    monkeypatch.setenv("TOOLGATE_TOKEN", demo_token("ivy"))
    with pytest.raises(ConfigurationError, match="not a demo release"):
        authorize_verifier(app, "ivy")
    refused = [(e.code, e.detail) for e in harness.store.audit.events() if e.event == "identity.refused"]
    assert refused == [("not_a_demo_release", {"command": "verify idempotency"})]
