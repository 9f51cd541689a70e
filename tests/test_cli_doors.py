"""Every CLI door that acts for a person, attacked from real subprocesses on embedded SQLite.

Doors covered (each a ``python -m toolgate`` subprocess, see `support.toolgate`):

1. Authentication at every command that acts for a person (``run``, ``approve``, ``reject``,
   ``edit``, ``rollback``, ``deadletter resolve``, ``identities add|import|list|revoke|
   rotate-token``): no token, a wrong token, another person's token and a revoked person's own
   token are each refused with exit 2 and one ``error=<code>`` line, and nothing changes in the
   store except exactly one ``identity.refused`` audit event per attempt.
2. Separation of duties: switching names with a valid token, an editor approving their edit,
   one reviewer approving twice, and another tenant's reviewer touching acme's records.
3. A revoked reviewer's pending approval stops counting at execution.
4. An approval row inserted with raw SQL never authorizes anything, and ``audit verify`` names it.
5. Bootstrap of identities: seeding once without an administrator, token hashes only, admin
   scope (``not_admin``, ``cross_tenant``), token fields refused, and ``TOOLGATE_IDENTITIES``
   trusted by nobody.
6. Verification commands only read: no store is created by them, and on an existing store they
   change no row of any table.

How: each test builds its state in-process on the very SQLite file the CLI uses (`open_app` with
a scripted model, so proposals, approvals and operations are made by the production code), then
snapshots the full contents of the relevant tables through a read-only ``sqlite3`` connection,
runs the attacks as subprocesses (concurrently, four at a time, when they all start from the same
state), and compares the snapshots and the new audit events afterwards.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.types import Command
from support import REFUND_REQUEST, TEST_KEY, cli_env, kv_lines, principal, seed_people, toolgate

from toolgate.config import Settings
from toolgate.graph import Context
from toolgate.graph.bootstrap import App, open_app
from toolgate.graph.review.decisions import decide
from toolgate.testing import ScriptedChatModel, ai, tool_call
from toolgate.tools.demo.identities import demo_token

DOMAIN_TABLES = (
    "proposals",
    "approvals",
    "operations",
    "identities",
    "dead_letters",
    "sor_payment_requests",
    "sor_refunds",
)
"""Tables whose rows no refused attempt may change (full row contents are compared)."""
REFUND_ARGS = {"order_id": "O-5512", "amount_cents": 4999, "reason": "damaged"}
EDITED_ARGS = {"order_id": "O-5512", "amount_cents": 2000, "reason": "damaged"}
INVENTORY_ARGS = {"sku": "SKU-7", "delta": -4, "reason": "shipped"}
WORKERS = 4


# ---- store inspection (read-only sqlite3, never through toolgate) -----------------------------


def _connect(db: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{db}?mode=ro", uri=True)


def rows(db: Path, tables: Sequence[str] = DOMAIN_TABLES) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of ``tables``, full contents, in a stable order."""
    con = _connect(db)
    try:
        return {t: sorted((tuple(r) for r in con.execute(f"SELECT * FROM {t}")), key=repr) for t in tables}
    finally:
        con.close()


def all_tables(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of the database file (audit log included)."""
    con = _connect(db)
    try:
        names = [
            r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        ]
    finally:
        con.close()
    return rows(db, names)


def assert_only_refusals_recorded(
    before: dict[str, list[tuple[Any, ...]]], after: dict[str, list[tuple[Any, ...]]]
) -> None:
    """Refused attempts changed nothing but their record: audit events, and the sign-in
    throttle's counts of failed sign-ins (``signin:*`` rows of ``rate_counters``)."""
    counted = [row for row in after.get("rate_counters", []) if row not in before.get("rate_counters", [])]
    assert all(str(row[0]).startswith("signin:") for row in counted), counted
    recorded = ("audit_", "sqlite_sequence", "rate_counters")
    assert {t: r for t, r in after.items() if not t.startswith(recorded)} == {
        t: r for t, r in before.items() if not t.startswith(recorded)
    }


def audit_seq(db: Path) -> int:
    """The newest audit sequence number."""
    con = _connect(db)
    try:
        return int(con.execute("SELECT COALESCE(MAX(seq), 0) FROM audit_events").fetchone()[0])
    finally:
        con.close()


def audit_since(db: Path, seq: int) -> list[tuple[str, str | None]]:
    """``(event, code)`` of every audit event after ``seq``."""
    con = _connect(db)
    try:
        return [
            (str(e), c)
            for e, c in con.execute("SELECT event, code FROM audit_events WHERE seq > ? ORDER BY seq", (seq,))
        ]
    finally:
        con.close()


def count(db: Path, table: str, **where: str) -> int:
    """Rows of ``table`` matching ``where``."""
    clause = " AND ".join(f"{k} = ?" for k in where) or "1 = 1"
    con = _connect(db)
    try:
        return int(
            con.execute(f"SELECT COUNT(*) FROM {table} WHERE {clause}", tuple(where.values())).fetchone()[0]
        )
    finally:
        con.close()


def operation_status(db: Path, operation_key: str) -> str:
    con = _connect(db)
    try:
        row = con.execute(
            "SELECT status FROM operations WHERE operation_key = ?", (operation_key,)
        ).fetchone()
    finally:
        con.close()
    assert row is not None, operation_key
    return str(row[0])


def main_files(data_dir: Path) -> list[str]:
    """Files of a data directory, ignoring SQLite's transient -wal/-shm companions."""
    return sorted(p.name for p in data_dir.iterdir() if not p.name.endswith(("-wal", "-shm")))


def payments(db: Path) -> int:
    """Requests the demo payment system received for order O-5512."""
    return count(db, "sor_payment_requests", order_id="O-5512")


# ---- CLI outcomes ------------------------------------------------------------------------------


def assert_refused(result: Any, code: str | set[str]) -> str:
    """Exit 2, exactly one ``error=<code> message="..."`` line on stderr, no traceback, no stdout."""
    codes = {code} if isinstance(code, str) else code
    detail = f"args={result.args[3:]}\nstdout={result.stdout}\nstderr={result.stderr}"
    assert result.returncode == 2, detail
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout, detail
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, detail
    got = lines[0].split()[0].removeprefix("error=")
    assert lines[0].startswith("error=") and got in codes, detail
    assert ' message="' in lines[0], detail
    assert result.stdout.strip() == "", detail
    return got


def run_each(attempts: Sequence[tuple[list[str], dict[str, str]]]) -> list[Any]:
    """Independent CLI invocations, one after another (in this process); results in the order given."""
    return [toolgate(args, env, check=False) for args, env in attempts]


def run_at_once(attempts: Sequence[tuple[list[str], dict[str, str]]]) -> list[Any]:
    """Independent CLI invocations, each its own process, all started together: concurrent doors
    on one store (what a shared data directory sees); results in the order given."""
    with ThreadPoolExecutor(max_workers=len(attempts)) as pool:
        return list(pool.map(lambda a: toolgate(a[0], a[1], check=False, process=True), attempts))


# ---- state built in-process by the production code --------------------------------------------


@dataclass(frozen=True)
class World:
    """A store with one record of every kind a door can act on (tenant acme)."""

    data_dir: Path
    env: dict[str, str]
    pending: str
    """Proposal of a pending issue_refund requested by cust-ada (two-person support/finance)."""
    pending_key: str
    """Its operation key."""
    pending_thread: str
    dead_key: str
    """An approved refund whose outcome went unknown and was dead-lettered."""
    done_key: str
    """A completed update_inventory (it declares a rollback), requested by lee, approved by wanda."""

    @property
    def db(self) -> Path:
        return self.data_dir / "toolgate.sqlite"


def _open(data_dir: Path) -> App:
    settings = Settings(data_dir=data_dir, audit_key_value=TEST_KEY.decode())
    return open_app(settings, model=ScriptedChatModel(responses=[]))


def _start(
    app: App, user: str, thread: str, tool: str, args: dict[str, Any]
) -> tuple[dict[str, Any], ScriptedChatModel]:
    """Propose ``tool`` as ``user`` on ``thread``: the proposal's facts, and the model (to resume with)."""
    model = ScriptedChatModel(responses=[ai("", tool_call(tool, args, f"c-{thread}")), ai("done")])
    with app.graph(dataclasses.replace(app.gateway, model=model)) as graph:
        state = graph.invoke(
            {"messages": [HumanMessage(f"{tool} please")]},
            {"configurable": {"thread_id": thread}},
            context=Context(principal=principal(user)),
        )
    return state["__interrupt__"][0].value["toolgate"]["proposals"][0], model


def build_world(tmp_path: Path) -> World:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    seed_people(data_dir)
    app = _open(data_dir)
    try:
        pending, _ = _start(app, "cust-ada", "t-pending", "issue_refund", REFUND_ARGS)

        dead, _ = _start(app, "cust-ada", "t-dead", "issue_refund", REFUND_ARGS)
        decide(app.gateway, dead["proposal_id"], principal("fiona"), "approve")
        key = dead["operation_key"]
        assert app.store.operations.claim(key, "doomed-worker", 0.0) is not None
        app.store.operations.transition(key, "executing", "unknown")
        time.sleep(0.05)  # the claim lease lapses
        assert app.store.operations.dead_letter(key, "outcome unknown", {"tool": "issue_refund"}) is not None

        done, model = _start(app, "lee", "t-done", "update_inventory", INVENTORY_ARGS)
        decide(app.gateway, done["proposal_id"], principal("wanda"), "approve")
        with app.graph(dataclasses.replace(app.gateway, model=model)) as graph:
            graph.invoke(
                Command(resume={"wake": True}), {"configurable": {"thread_id": "t-done"}}, context=Context()
            )
        finished = app.store.operations.get(done["operation_key"])
        assert finished is not None and finished.status == "succeeded"
    finally:
        app.store.close()
    world = World(
        data_dir=data_dir,
        env=cli_env(data_dir),
        pending=pending["proposal_id"],
        pending_key=pending["operation_key"],
        pending_thread="t-pending",
        dead_key=key,
        done_key=done["operation_key"],
    )
    assert operation_status(world.db, world.pending_key) == "pending_approval"
    assert operation_status(world.db, world.dead_key) == "dead_lettered"
    assert payments(world.db) == 0
    return world


def with_token(env: dict[str, str], token: str) -> dict[str, str]:
    return {**env, "TOOLGATE_TOKEN": token}


def refund_key_of(db: Path, proposal_id: str) -> str:
    con = _connect(db)
    try:
        row = con.execute(
            "SELECT operation_key FROM proposals WHERE proposal_id = ?", (proposal_id,)
        ).fetchone()
    finally:
        con.close()
    assert row is not None
    return str(row[0])


# ---- 1. authentication at every door ----------------------------------------------------------


def person_commands(world: World, seed_file: Path) -> dict[str, tuple[list[str], str]]:
    """Every command that acts for a person: its arguments (without ``--as``) and who it names."""
    return {
        "run": (["run", REFUND_REQUEST, "--thread", "t-door"], "cust-ada"),
        "approve": (["approve", world.pending], "fiona"),
        "reject": (["reject", world.pending, "--reason", "not needed"], "fiona"),
        "edit": (["edit", world.pending, "--args", json.dumps(EDITED_ARGS)], "fiona"),
        "rollback": (["rollback", world.done_key], "lee"),
        "deadletter resolve": (
            ["deadletter", "resolve", world.dead_key, "--outcome", "succeeded", "--note", "found pay_1"],
            "fiona",
        ),
        "identities add": (["identities", "add", "newbie", "--tenant", "acme", "--roles", "support"], "ivy"),
        "identities import": (["identities", "import", str(seed_file)], "ivy"),
        "identities list": (["identities", "list"], "ivy"),
        "identities revoke": (["identities", "revoke", "rita"], "ivy"),
        "identities rotate-token": (["identities", "rotate-token", "rita"], "ivy"),
    }


@pytest.mark.slow
def test_every_person_door_refuses_bad_tokens_and_changes_nothing(tmp_path: Path) -> None:
    world = build_world(tmp_path)
    seed_file = tmp_path / "more-people.json"
    seed_file.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "identities": [
                    {
                        "user_id": "newcomer",
                        "tenant_id": "acme",
                        "roles": ["support"],
                        "scopes": ["orders:read"],
                    }
                ],
            }
        ),
        encoding="utf-8",
    )
    revoked = toolgate(["identities", "revoke", "sam", "--as", "ivy"], world.env)
    assert kv_lines(revoked.stdout) == [{"identity": "sam", "status": "revoked"}]
    # this test is about each door's own token check: dozens of failures for one person in a
    # minute would be throttled (`sign_in_throttled`, tests/test_sign_in_throttle.py) first
    world.env["TOOLGATE_SIGN_IN_FAILURES_PER_PERSON"] = "1000"

    attempts: list[tuple[list[str], dict[str, str]]] = []
    expected: list[tuple[str, str, str]] = []
    for name, (args, user) in person_commands(world, seed_file).items():
        other = "rita" if user != "rita" else "lee"
        for case, acting, token, code in (
            ("no token", user, "", "missing_token"),
            ("wrong token", user, "tg_not-anyones-token-0000000000000000000000", "authentication_failed"),
            ("another person's token", user, demo_token(other), "authentication_failed"),
            ("revoked person's own token", "sam", demo_token("sam"), "revoked"),
        ):
            attempts.append(([*args, "--as", acting], with_token(world.env, token)))
            expected.append((name, case, code))

    before, seq = rows(world.db), audit_seq(world.db)
    # the first door's four refusals run as concurrent processes, the rest one after another
    results = run_at_once(attempts[:WORKERS]) + run_each(attempts[WORKERS:])
    after, events = rows(world.db), audit_since(world.db, seq)

    for (name, case, code), result in zip(expected, results, strict=True):
        try:
            assert_refused(result, code)
        except AssertionError as exc:
            raise AssertionError(f"{name} with {case}: {exc}") from None
    for table in DOMAIN_TABLES:
        assert after[table] == before[table], f"{table} changed by refused attempts"
    assert {event for event, _ in events} <= {"identity.refused"}, events
    assert len(events) == len(attempts), "exactly one identity.refused event per refused attempt"
    assert Counter(code for _, code in events) == Counter(code for _, _, code in expected)
    assert payments(world.db) == 0
    chain = toolgate(
        ["audit", "verify", "--as", "otto"], world.env
    )  # concurrent refusals kept the chain intact
    assert "tamper_check=PASS" in chain.stdout


# ---- 2. separation of duties ------------------------------------------------------------------


def test_a_reviewer_cannot_request_as_a_customer_by_switching_names(tmp_path: Path) -> None:
    world = build_world(tmp_path)
    before, seq = rows(world.db), audit_seq(world.db)
    switched = toolgate(
        ["run", REFUND_REQUEST, "--as", "cust-ada", "--thread", "t-switch"],
        with_token(world.env, demo_token("fiona")),
        check=False,
    )
    assert_refused(switched, "authentication_failed")
    assert rows(world.db) == before, "nothing proposed"
    assert audit_since(world.db, seq) == [("identity.refused", "authentication_failed")]


def test_an_editor_cannot_approve_their_own_edit(tmp_path: Path) -> None:
    world = build_world(tmp_path)
    edited = toolgate(["edit", world.pending, "--as", "fiona", "--args", json.dumps(EDITED_ARGS)], world.env)
    new = kv_lines(edited.stdout)[0]
    assert new["supersedes"] == world.pending and new["status"] == "pending_approval"
    before = rows(world.db)
    own = toolgate(["approve", new["proposal"], "--as", "fiona"], world.env, check=False)
    assert_refused(own, "editor_approval")
    assert rows(world.db) == before
    assert operation_status(world.db, refund_key_of(world.db, new["proposal"])) == "pending_approval"
    assert payments(world.db) == 0


def test_an_edit_whose_arguments_are_not_one_json_object_changes_nothing(tmp_path: Path) -> None:
    world = build_world(tmp_path)
    before = rows(world.db)
    attempts = [
        ["edit", world.pending, "--as", "fiona", "--args", "{not json"],
        ["edit", world.pending, "--as", "fiona", "--args", "[1, 2]"],
    ]
    for result in run_each([(args, world.env) for args in attempts]):
        assert_refused(result, "malformed_arguments")
    assert rows(world.db) == before
    assert operation_status(world.db, world.pending_key) == "pending_approval"


def test_one_reviewer_approving_twice_is_not_two_people(tmp_path: Path) -> None:
    world = build_world(tmp_path)
    first = toolgate(["approve", world.pending, "--as", "rita"], world.env)
    assert "status=pending_approval" in first.stdout
    before = rows(world.db)
    again = toolgate(["approve", world.pending, "--as", "rita"], world.env, check=False)
    assert_refused(again, "already_decided")
    assert rows(world.db) == before
    assert operation_status(world.db, world.pending_key) == "pending_approval"
    assert count(world.db, "approvals", proposal_id=world.pending) == 1
    delivered = toolgate(["worker", "execute", "--operation-key", world.pending_key], world.env)
    assert "claim=NOT_ATTEMPTED" in delivered.stdout
    assert payments(world.db) == 0


def test_another_tenants_reviewer_touches_nothing(tmp_path: Path) -> None:
    world = build_world(tmp_path)
    attempts = [
        ["approve", world.pending, "--as", "gina"],
        ["reject", world.pending, "--as", "gina", "--reason", "not yours"],
        ["edit", world.pending, "--as", "gina", "--args", json.dumps(EDITED_ARGS)],
        ["rollback", world.done_key, "--as", "gina"],
        ["deadletter", "resolve", world.dead_key, "--outcome", "succeeded", "--as", "gina", "--note", "x"],
    ]
    before, seq = rows(world.db), audit_seq(world.db)
    results = run_each([(args, world.env) for args in attempts])
    after, events = rows(world.db), audit_since(world.db, seq)
    codes = [assert_refused(result, "cross_tenant") for result in results]
    assert codes == ["cross_tenant"] * len(attempts)
    for table in DOMAIN_TABLES:
        assert after[table] == before[table], f"{table} changed by another tenant's reviewer"
    assert payments(world.db) == 0
    # every refusal is audited: one refusal event per attempt, none of them a change
    assert all(event.endswith(".refused") and code == "cross_tenant" for event, code in events), events
    assert len(events) == len(attempts), f"one refusal event per attempt, got {events}"


# ---- 3. revoked reviewer ----------------------------------------------------------------------


def test_a_revoked_reviewers_pending_approval_stops_counting(tmp_path: Path) -> None:
    world = build_world(tmp_path)
    toolgate(["approve", world.pending, "--as", "rita"], world.env)
    both = toolgate(["approve", world.pending, "--as", "sam"], world.env)
    assert "status=approved" in both.stdout
    con = _connect(world.db)
    try:
        rita_approval = con.execute(
            "SELECT approval_id FROM approvals WHERE proposal_id = ? AND reviewer_id = 'rita'",
            (world.pending,),
        ).fetchone()[0]
    finally:
        con.close()
    toolgate(["identities", "revoke", "rita", "--as", "ivy"], world.env)

    seq = audit_seq(world.db)
    delivered = toolgate(["worker", "execute", "--operation-key", world.pending_key], world.env)
    facts = kv_lines(delivered.stdout)[0]
    assert facts["claim"] == "NOT_ATTEMPTED" and facts["status"] == "approved", delivered.stdout
    assert payments(world.db) == 0 and count(world.db, "sor_refunds", order_id="O-5512") == 0
    assert operation_status(world.db, world.pending_key) == "approved"
    events = audit_since(world.db, seq)
    assert ("approval.voided", "reviewer_inactive") in events, events
    assert ("approval.refused_at_execution", "approval_invalid") in events, events
    con = _connect(world.db)
    try:
        voided = [
            json.loads(detail)
            for (detail,) in con.execute(
                "SELECT p.detail FROM audit_events e JOIN audit_payloads p ON p.event_id = e.event_id"
                " WHERE e.event = 'approval.voided' AND e.seq > ?",
                (seq,),
            )
        ]
    finally:
        con.close()
    assert [d.get("approval_id") for d in voided] == [rita_approval], voided


# ---- 4. forged approval row -------------------------------------------------------------------


def test_a_forged_approval_row_authorizes_nothing_and_audit_verify_names_it(tmp_path: Path) -> None:
    world = build_world(tmp_path)
    toolgate(["approve", world.pending, "--as", "rita"], world.env)  # a real row, one of two needed
    forged_id = "apr_forged0000000000000000"
    con = sqlite3.connect(world.db)
    try:
        con.row_factory = sqlite3.Row
        real = dict(con.execute("SELECT * FROM approvals WHERE proposal_id = ?", (world.pending,)).fetchone())
        digest = con.execute(
            "SELECT digest FROM proposals WHERE proposal_id = ?", (world.pending,)
        ).fetchone()[0]
        forged = {
            **real,
            "approval_id": forged_id,
            "reviewer_id": "fiona",
            "reviewer_roles": json.dumps(["finance"]),
            "digest": digest,
            "mac": "0" * 64,
        }
        con.execute(
            f"INSERT INTO approvals ({', '.join(forged)}) VALUES ({', '.join('?' for _ in forged)})",
            tuple(forged.values()),
        )
        con.commit()
    finally:
        con.close()

    pending = toolgate(["worker", "execute", "--operation-key", world.pending_key], world.env)
    assert kv_lines(pending.stdout)[0]["claim"] == "NOT_ATTEMPTED"
    assert operation_status(world.db, world.pending_key) == "pending_approval" and payments(world.db) == 0

    con = sqlite3.connect(world.db)  # and even with the operation flipped to approved by hand
    try:
        con.execute("UPDATE operations SET status = 'approved' WHERE operation_key = ?", (world.pending_key,))
        con.commit()
    finally:
        con.close()
    seq = audit_seq(world.db)
    refused = toolgate(["worker", "execute", "--operation-key", world.pending_key], world.env)
    assert kv_lines(refused.stdout)[0]["claim"] == "NOT_ATTEMPTED", refused.stdout
    assert operation_status(world.db, world.pending_key) == "approved" and payments(world.db) == 0
    events = audit_since(world.db, seq)
    assert ("approval.voided", "forged_approval") in events, events

    shown = toolgate(["proposals", "show", world.pending], world.env).stdout
    assert "reviewer=fiona" in shown and "authentic=false" in shown
    verified = toolgate(["audit", "verify", "--as", "otto"], world.env, check=False)
    assert verified.returncode == 1, verified.stdout + verified.stderr
    assert f"forged_approvals={forged_id}" in verified.stdout
    assert kv_lines(verified.stdout)[-1]["tamper_check"] == "FAIL"  # the verdict never reads as a pass
    assert "Traceback" not in verified.stderr


# ---- 5. bootstrap of identities ---------------------------------------------------------------


def _seed(path: Path, *identities: dict[str, Any]) -> Path:
    path.write_text(json.dumps({"schema_version": 1, "identities": list(identities)}), encoding="utf-8")
    return path


ROOT = {"user_id": "root", "tenant_id": "acme", "roles": ["admin"], "scopes": [], "display_name": "Root"}
PAT = {"user_id": "pat", "tenant_id": "acme", "roles": ["support"], "scopes": ["orders:read"]}


def test_bootstrap_seeds_once_and_then_only_admins_manage_their_tenant(tmp_path: Path) -> None:
    data_dir = tmp_path / "fresh"
    data_dir.mkdir()
    env = cli_env(data_dir)
    seeded = toolgate(["identities", "import", str(_seed(tmp_path / "seed.json", ROOT, PAT))], env)
    issued = {r["identity"]: r["token"] for r in kv_lines(seeded.stdout)}
    assert set(issued) == {"root", "pat"} and all(t.startswith("tg_") for t in issued.values())
    assert [r["status"] for r in kv_lines(seeded.stdout)] == ["added", "added"]
    stored = b"".join(p.read_bytes() for p in data_dir.iterdir() if p.is_file())
    for token in issued.values():
        assert token.encode() not in stored, "the store keeps only keyed hashes of tokens"
    con = _connect(data_dir / "toolgate.sqlite")
    try:
        hashes = {u: h for u, h in con.execute("SELECT user_id, token_hash FROM identities")}
    finally:
        con.close()
    assert set(hashes) == {"root", "pat"} and not set(hashes.values()) & set(issued.values())

    db = data_dir / "toolgate.sqlite"
    before = rows(db)
    again = toolgate(
        ["identities", "import", str(_seed(tmp_path / "again.json", {**PAT, "user_id": "eve"}))],
        env,
        check=False,
    )
    assert_refused(again, "missing_admin")
    added = toolgate(["identities", "add", "eve", "--tenant", "acme", "--roles", "admin"], env, check=False)
    assert_refused(added, "missing_admin")
    demo = toolgate(["identities", "seed-demo"], env, check=False)  # demo tokens only on an empty store
    assert_refused(demo, "not_empty")
    assert rows(db) == before

    as_root = with_token(env, issued["root"])
    carl = toolgate(
        ["identities", "add", "carl", "--tenant", "acme", "--roles", "support", "--as", "root"], as_root
    )
    assert kv_lines(carl.stdout)[0]["token"].startswith("tg_")
    before = rows(db)
    globex = toolgate(
        ["identities", "add", "gus", "--tenant", "globex", "--as", "root"], as_root, check=False
    )
    assert_refused(globex, "cross_tenant")
    as_pat = with_token(env, issued["pat"])
    not_admin = toolgate(["identities", "add", "pal", "--tenant", "acme", "--as", "pat"], as_pat, check=False)
    assert_refused(not_admin, "not_admin")
    for field in ("token", "token_sha256"):
        tokened = _seed(tmp_path / f"{field}.json", {**PAT, "user_id": "tok", field: "chosen-by-caller"})
        refused = toolgate(["identities", "import", str(tokened), "--as", "root"], as_root, check=False)
        assert_refused(refused, "configuration_error")
        assert "never read from a file" in refused.stderr
    assert rows(db) == before


def test_a_seed_file_with_tokens_is_refused_on_a_fresh_store(tmp_path: Path) -> None:
    for field in ("token", "token_sha256"):
        data_dir = tmp_path / field
        data_dir.mkdir()
        seed = _seed(tmp_path / f"{field}.json", {**ROOT, field: "chosen-by-caller"})
        refused = toolgate(["identities", "import", str(seed)], cli_env(data_dir), check=False)
        assert_refused(refused, "configuration_error")
        assert "never read from a file" in refused.stderr
        db = data_dir / "toolgate.sqlite"
        assert not db.exists() or count(db, "identities") == 0


def test_an_identities_file_the_caller_wrote_authenticates_nobody(tmp_path: Path) -> None:
    world = build_world(tmp_path)
    planted = world.data_dir / "identities.json"  # the old default location, and named explicitly
    planted.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "identities": [
                    {**ROOT, "user_id": "mallory", "roles": ["admin", "finance"], "token": "mallory-secret"},
                    {
                        "user_id": "fiona",
                        "tenant_id": "acme",
                        "roles": ["finance"],
                        "scopes": ["orders:read"],
                        "token": "fiona-chosen",
                        "token_sha256": "0" * 64,
                    },
                ],
            }
        ),
        encoding="utf-8",
    )
    env = {**world.env, "TOOLGATE_IDENTITIES": str(planted)}
    before, seq = rows(world.db), audit_seq(world.db)
    results = run_each(
        [
            (["approve", world.pending, "--as", "mallory"], with_token(env, "mallory-secret")),
            (["identities", "list", "--as", "mallory"], with_token(env, "mallory-secret")),
            (["approve", world.pending, "--as", "fiona"], with_token(env, "fiona-chosen")),
        ]
    )
    for result in results:
        assert_refused(result, "authentication_failed")
    assert rows(world.db) == before
    assert audit_since(world.db, seq) == [("identity.refused", "authentication_failed")] * 3


# ---- 6. verification commands only read -------------------------------------------------------


def test_verification_on_a_missing_store_fails_and_creates_nothing(tmp_path: Path) -> None:
    data_dir = tmp_path / "empty"
    data_dir.mkdir()
    env = cli_env(data_dir)
    commands = [["audit", "verify"], ["audit", "export"], ["proposals", "list"], ["deadletter", "list"]]
    for args, result in zip(commands, run_each([(args, env) for args in commands]), strict=True):
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error="), (args, result.stderr)
    assert list(data_dir.iterdir()) == [], "a verification command created files"


def test_verification_commands_write_nothing_on_an_existing_store(tmp_path: Path) -> None:
    world = build_world(tmp_path)
    databases = sorted(p for p in world.data_dir.iterdir() if p.suffix == ".sqlite")
    assert world.db in databases
    files = main_files(world.data_dir)
    before = {db.name: all_tables(db) for db in databases}
    commands = [  # audit reads are not among them: each appends its own audit.read (test_audit_access)
        ["proposals", "list"],
        ["proposals", "show", world.pending],
        ["deadletter", "list"],
        ["worker", "verify", "--operation-key", world.done_key],
    ]
    results = run_each([(args, world.env) for args in commands])
    for args, result in zip(commands, results, strict=True):
        assert result.returncode == 0, (args, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr
    after = {db.name: all_tables(db) for db in databases}
    for name, tables in before.items():
        for table, table_rows in tables.items():
            assert after[name][table] == table_rows, f"{name}:{table} changed by a verification command"
    assert main_files(world.data_dir) == files, "a verification command created a file"

    _, shown, letters, worker = results
    assert f"proposal={world.pending}" in shown.stdout
    assert f"operation_key={world.dead_key}" in letters.stdout
    assert "approval=VALID" in worker.stdout and "duplicate_delivery=stored_result_returned" in worker.stdout
