"""The CLI's doors that change something without naming a person (redteam5).

``toolgate verify idempotency`` (and ``toolgate verify``, whose ``idempotency`` check runs the
same code) proposes a ``restart_service`` as the demo person ``sam``, approves it as ``omar`` and
delivers it, on the configured store, with no token at all. On a store whose people include
``sam`` and ``omar`` (the demo store, or any store seeded with the demo people) the approval is
written in omar's name by someone who never proved to be omar, and the restart runs: a write
approved and executed by an unauthenticated command. Deciding who may run the check, and as whom
it may act, is a design decision, so this is an open hole recorded as a strict xfail.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from support import cli_env, seed_people, toolgate


def _count(db: Path, sql: str) -> int:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return int(con.execute(sql).fetchone()[0])
    finally:
        con.close()


@pytest.mark.xfail(
    strict=True,
    reason="open hole (design decision): `toolgate verify idempotency` approves a restart in omar's "
    "name and executes it with no token; who may run the check and as whom is not decided",
)
def test_verify_idempotency_without_a_token_approves_in_nobodys_name_and_runs_nothing(tmp_path: Path) -> None:
    seed_people(tmp_path)  # the demo people, sam and omar among them, with their own tokens
    env = cli_env(tmp_path)  # no TOOLGATE_TOKEN: nobody proved who they are
    db = tmp_path / "toolgate.sqlite"
    result = toolgate(["verify", "idempotency", "--concurrency", "2"], env, check=False)
    omars = _count(db, "SELECT COUNT(*) FROM approvals WHERE reviewer_id = 'omar'")
    restarts = _count(db, "SELECT COUNT(*) FROM sor_restart_requests")
    assert (result.returncode, omars, restarts) == (2, 0, 0), result.stdout
    assert "error=missing_token" in result.stderr
