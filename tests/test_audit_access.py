"""Evidence for the entitled (issue 15, item 2): reading the audit log authenticates, an auditor
sees their own tenant (``auditor:all`` every tenant), every read and every refused read is itself
audited, every event carries its tenant, identity changes name their actor, and the chain still
verifies with rows written before tenants were recorded. SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from langgraph.types import Command
from support import Harness, cli_env, kv_lines, open_test_store, principal, start, toolgate

from toolgate.errors import IdentityError
from toolgate.graph.review.decisions import decide
from toolgate.policy.identities import IdentityDirectory
from toolgate.policy.principal import Principal
from toolgate.store import AuditEventIn, PostgresStore, Store
from toolgate.store.audit import Auditor
from toolgate.store.chain import verify_chain
from toolgate.testing import ScriptedChatModel, ai, tool_call

pytestmark = pytest.mark.slow


@dataclass
class World:
    env: dict[str, str]
    store: Store
    acme_key: str
    globex_key: str


def _refund(harness: Harness, user: str, reviewer: str, order: str, call: str, thread: str) -> str:
    """A refund of ``order`` asked by ``user``, approved by ``reviewer`` and executed: its key."""
    model = ScriptedChatModel(
        responses=[
            ai(
                "",
                tool_call(
                    "issue_refund", {"order_id": order, "amount_cents": 100, "reason": "damaged"}, call
                ),
            ),
            ai("done"),
        ]
    )
    graph = harness.graph(model)
    first = start(graph, f"refund {order}", user, thread)
    facts = first["__interrupt__"][0].value["toolgate"]["proposals"][0]
    decide(harness.gateway(), facts["proposal_id"], principal(reviewer), "approve")
    graph.invoke(Command(resume={"wake": True}), {"configurable": {"thread_id": thread}})
    return str(facts["operation_key"])


@pytest.fixture
def world(tmp_path: Path, database_url: str | None) -> World:
    store = open_test_store(tmp_path, database_url)
    harness = Harness(store)
    # rows written before events carried a tenant: no tenant, hashed the old way
    store.audit.append(AuditEventIn(event="legacy.event", result="ok", detail={"n": 1}))
    acme = _refund(harness, "cust-ada", "fiona", "O-5512", "call_acme", "t-acme")
    globex = _refund(harness, "cust-gina", "gina", "O-7001", "call_globex", "t-globex")
    return World(cli_env(tmp_path, database_url), store, acme, globex)


def _reads(store: Store, since: int) -> list[tuple[str, str, str | None, str]]:
    """(event, result, code, scope) of the audit reads and identity refusals after ``since``."""
    return [
        (e.event, e.result, e.code, str(e.detail.get("scope", "")))
        for e in store.audit.events()
        if e.seq > since and e.event in ("audit.read", "identity.refused")
    ]


def _last_seq(store: Store) -> int:
    return store.audit.events()[-1].seq


def test_every_event_of_an_operation_carries_its_tenant(world: World) -> None:
    for key, tenant in ((world.acme_key, "acme"), (world.globex_key, "globex")):
        events = world.store.audit.events(operation_key=key)
        assert events and {e.tenant_id for e in events} == {tenant}
    by_thread = Counter((e.thread_id, e.tenant_id) for e in world.store.audit.events() if e.thread_id)
    assert {(thread, tenant) for thread, tenant in by_thread} == {("t-acme", "acme"), ("t-globex", "globex")}
    legacy = [e for e in world.store.audit.events() if e.event == "legacy.event"]
    assert [e.tenant_id for e in legacy] == [None]


def test_audit_reads_without_a_valid_credential_are_refused_and_audited(world: World) -> None:
    since = _last_seq(world.store)
    env = {k: v for k, v in world.env.items() if k != "TOOLGATE_TOKEN"}
    cases = [
        (["audit", "trace", world.acme_key], env, "missing_token"),
        (["audit", "export"], env, "missing_token"),
        (["audit", "verify"], env, "missing_token"),
        (
            ["audit", "trace", world.acme_key, "--as", "audrey"],
            {**env, "TOOLGATE_TOKEN": ""},
            "missing_token",
        ),
        (
            ["audit", "trace", world.acme_key],
            {**env, "TOOLGATE_TOKEN": "demo-token-nobody"},
            "authentication_failed",
        ),
        (
            ["audit", "trace", world.acme_key, "--as", "audrey"],
            {**env, "TOOLGATE_TOKEN": "demo-token-glen"},  # someone else's token
            "authentication_failed",
        ),
        (["audit", "export", "--as", "fiona"], env, "not_auditor"),  # authentic, but no auditor role
    ]
    for args, case_env, code in cases:
        result = toolgate(args, case_env, check=False)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error={code} message="), (args, result.stderr)
        assert "event=" not in result.stdout and "schema_version" not in result.stdout
    before = world.store.audit.events()
    wrong = toolgate(
        ["audit", "export", "--as", "otto"],
        {**world.env, "TOOLGATE_AUDIT_KEY": "not-the-store-secret-000000000"},
        check=False,
    )
    assert wrong.returncode == 2 and wrong.stdout == ""
    assert (
        wrong.stderr.startswith("error=configuration_error message=") and len(wrong.stderr.splitlines()) == 1
    )
    assert world.store.audit.events() == before  # nothing appended under the wrong secret
    refused = _reads(world.store, since)
    assert [code for _, _, code, _ in refused] == [code for _, _, code in cases]
    assert refused[-1] == ("audit.read", "refused", "not_auditor", "acme")
    assert all(result == "refused" for _, result, _, _ in refused)
    assert verify_chain(world.store).ok


def test_a_tenant_auditor_sees_only_their_tenant(world: World) -> None:
    since = _last_seq(world.store)
    mine = toolgate(["audit", "trace", world.acme_key, "--as", "audrey"], world.env)
    assert "tamper_check=PASS" in mine.stdout and "missing_transitions=0" in mine.stdout
    # another tenant's operation answers like an unknown one
    theirs = toolgate(["audit", "trace", world.globex_key, "--as", "audrey"], world.env, check=False)
    unknown = toolgate(["audit", "trace", "op_unknown", "--as", "audrey"], world.env, check=False)
    assert theirs.returncode == unknown.returncode == 2 and theirs.stdout == unknown.stdout == ""
    assert theirs.stderr.replace(world.globex_key, "K") == unknown.stderr.replace("op_unknown", "K")
    call = toolgate(["audit", "trace", "--call", "call_globex", "--as", "audrey"], world.env, check=False)
    assert call.returncode == 2 and "event=" not in call.stdout

    exported = toolgate(["audit", "export", "--as", "audrey"], world.env)
    rows = [json.loads(line) for line in exported.stdout.splitlines()]
    assert rows and {r["tenant_id"] for r in rows} == {"acme"}
    assert not [r for r in rows if r["operation_key"] == world.globex_key or r["thread_id"] == "t-globex"]
    globex_rows = [
        json.loads(line)
        for line in toolgate(["audit", "export", "--as", "glen"], world.env).stdout.splitlines()
    ]
    assert globex_rows and {r["tenant_id"] for r in globex_rows} == {"globex"}

    verified = toolgate(["audit", "verify", "--as", "audrey"], world.env)
    assert "tamper_check=PASS" in verified.stdout and "approvals=1 " in verified.stdout

    reads = _reads(world.store, since)
    assert reads == [
        ("audit.read", "read", None, "acme"),
        ("audit.read", "refused", "not_found", "acme"),
        ("audit.read", "refused", "not_found", "acme"),
        ("audit.read", "refused", "not_found", "acme"),
        ("audit.read", "read", None, "acme"),
        ("audit.read", "read", None, "globex"),
        ("audit.read", "read", None, "acme"),
    ]
    read_events = [e for e in world.store.audit.events() if e.seq > since and e.event == "audit.read"]
    assert read_events[0].actor_id == Auditor(world.store, "x").actor("audrey")
    assert (
        read_events[0].detail["command"] == "audit trace"
        and read_events[0].detail["subject"] == world.acme_key
    )


def test_an_all_tenant_auditor_sees_every_tenant_and_the_tenantless_events(world: World) -> None:
    since = _last_seq(world.store)
    for key in (world.acme_key, world.globex_key):  # the token alone identifies the auditor too
        traced = toolgate(["audit", "trace", key], {**world.env, "TOOLGATE_TOKEN": "demo-token-otto"})
        assert "tamper_check=PASS" in traced.stdout
    rows = [
        json.loads(line)
        for line in toolgate(["audit", "export", "--as", "otto"], world.env).stdout.splitlines()
    ]
    assert {"acme", "globex", None} <= {r["tenant_id"] for r in rows}
    assert "legacy.event" in {r["event"] for r in rows}
    assert {r["event"] for r in rows if r["event"] == "audit.read"}  # earlier reads are evidence too
    assert _reads(world.store, since) == [("audit.read", "read", None, "*")] * 3


def test_a_tenant_admin_cannot_grant_every_tenant_to_an_auditor(world: World) -> None:
    directory = IdentityDirectory(world.store, Auditor(world.store, "x"))
    wide = Principal(user_id="sneaky", tenant_id="acme", roles=frozenset({"auditor:all"}))
    with pytest.raises(IdentityError) as refused:
        directory.add(wide, by=principal("ivy"))
    assert refused.value.code == "cross_tenant" and world.store.identities.get("sneaky") is None


def test_an_identity_change_is_audited_with_its_actor(world: World) -> None:
    added = toolgate(
        ["identities", "add", "newbie", "--tenant", "acme", "--roles", "support", "--as", "ivy"], world.env
    )
    assert "identity=newbie" in added.stdout
    toolgate(["identities", "rotate-token", "newbie", "--as", "ivy"], world.env)
    toolgate(["identities", "revoke", "newbie", "--as", "ivy"], world.env)
    exported = toolgate(["audit", "export", "--as", "audrey"], world.env).stdout
    ivy = Auditor(world.store, "x").actor("ivy")
    newbie = Auditor(world.store, "x").actor("newbie")
    changes = [
        (r["event"], r["actor_id"], r["tenant_id"])
        for r in map(json.loads, exported.splitlines())
        if r["event"].startswith("identity.") and r["detail"].get("identity") == newbie
    ]
    assert changes == [
        ("identity.added", ivy, "acme"),
        ("identity.token_rotated", ivy, "acme"),
        ("identity.revoked", ivy, "acme"),
    ]


def test_the_chain_verifies_with_old_rows_and_a_changed_tenant_breaks_it(world: World) -> None:
    assert verify_chain(world.store).ok
    verified = toolgate(["audit", "verify", "--as", "otto"], world.env)
    assert "tamper_check=PASS" in verified.stdout
    target = next(e for e in world.store.audit.events(operation_key=world.globex_key))
    with world.store.transaction() as tx:  # an attacker with database access moves an event to acme
        if isinstance(world.store, PostgresStore):
            tx.execute("ALTER TABLE audit_events DISABLE TRIGGER USER")
        else:
            tx.execute("DROP TRIGGER audit_no_update")
        tx.execute("UPDATE audit_events SET tenant_id = 'acme' WHERE seq = ?", (target.seq,))
    report = verify_chain(world.store)
    assert not report.ok and report.first_bad_seq == target.seq
    broken = toolgate(["audit", "verify", "--as", "otto"], world.env, check=False)
    assert broken.returncode == 1 and f"first_bad_seq={target.seq}" in broken.stdout
    legacy = next(e for e in world.store.audit.events() if e.event == "legacy.event")
    with world.store.transaction() as tx:
        tx.execute("UPDATE audit_events SET tenant_id = 'globex' WHERE seq = ?", (target.seq,))
        tx.execute("UPDATE audit_events SET tenant_id = 'acme' WHERE seq = ?", (legacy.seq,))
    assert verify_chain(world.store).first_bad_seq == legacy.seq  # giving an old row a tenant breaks it too


def test_verify_prints_the_head_and_fails_on_a_chain_cut_off_after_it(world: World) -> None:
    """The head one verify prints, given to the next, shows that the newest events were cut off
    (the rest of the chain still links, and verify alone passes)."""
    first = kv_lines(toolgate(["audit", "verify", "--as", "otto"], world.env).stdout)[-1]
    seq, head_hash = first["head"].split(":")
    events = world.store.audit.events()
    assert [e.hash for e in events if e.seq == int(seq)] == [head_hash]
    assert [e.event for e in events if e.seq > int(seq)] == ["audit.read"]  # the verify's own, after it
    again = toolgate(["audit", "verify", "--as", "otto", "--expect-head", first["head"]], world.env)
    assert kv_lines(again.stdout)[-1]["tamper_check"] == "PASS"
    with world.store.transaction() as tx:  # an attacker with database access cuts off the newest events
        if isinstance(world.store, PostgresStore):
            tx.execute("ALTER TABLE audit_events DISABLE TRIGGER USER")
        else:
            tx.execute("DROP TRIGGER audit_no_delete")
        tx.execute("DELETE FROM audit_events WHERE seq >= ?", (int(seq) - 2,))
    assert kv_lines(toolgate(["audit", "verify", "--as", "otto"], world.env).stdout)[-1]["chain"] == "PASS"
    cut = toolgate(["audit", "verify", "--as", "otto", "--expect-head", first["head"]], world.env, check=False)
    verdict = kv_lines(cut.stdout)[-1]
    assert cut.returncode == 1
    assert (verdict["tamper_check"], verdict["chain"], verdict["first_bad_seq"]) == ("FAIL", "FAIL", seq)
    malformed = toolgate(["audit", "verify", "--as", "otto", "--expect-head", "7"], world.env, check=False)
    assert malformed.returncode == 2 and "SEQ:HASH" in malformed.stderr


def test_the_store_sets_the_tenant_from_its_own_records(store: Store) -> None:
    harness = Harness(store)
    model = ScriptedChatModel(
        responses=[
            ai(
                "",
                tool_call(
                    "issue_refund", {"order_id": "O-5512", "amount_cents": 100, "reason": "damaged"}, "c-s"
                ),
            )
        ]
    )
    first = start(harness.graph(model), "refund", "cust-ada", "t-store")
    facts = first["__interrupt__"][0].value["toolgate"]["proposals"][0]
    auditor = Auditor(store, "x")
    claimed = auditor.record("probe", "ok", proposal_id=facts["proposal_id"], tenant_id="globex")
    by_key = auditor.record("probe", "ok", operation_key=facts["operation_key"])
    given = auditor.record("probe", "ok", tenant_id="globex")
    from_detail = auditor.record("probe", "ok", detail={"tenant_id": "initech"})
    unknown = auditor.record("probe", "ok", operation_key="op_nowhere")
    # the proposal's tenant wins over what the writer says; without a record, the writer's word
    assert [e.tenant_id for e in (claimed, by_key, given, from_detail, unknown)] == [
        "acme",
        "acme",
        "globex",
        "initech",
        None,
    ]
    stored = {e.seq: e.tenant_id for e in store.audit.events()}
    assert stored[claimed.seq] == "acme" and stored[unknown.seq] is None
    assert verify_chain(store).ok
