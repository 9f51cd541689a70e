"""Identities and approvals are evidence: kept in the store, bound by MACs, checked where they act.

Tokens are stored only as keyed hashes; a row written or promoted with database access alone
does not verify and cannot act; administrators act only in their own tenant; a revoked reviewer's
pending approval stops counting at execution; a forged approval row never executes and
verification names it; no store exists without its secret, and a read-only store writes nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import REFUND_REQUEST, TEST_KEY, Harness, principal, start

from toolgate.errors import ApprovalError, ConfigurationError, IdentityError, StoreError
from toolgate.graph.review.decisions import decide
from toolgate.policy.identities import IdentityDirectory, load_seed_file
from toolgate.policy.principal import Principal
from toolgate.store import IdentityRecord, PostgresStore, SQLiteStore, Store, open_store
from toolgate.store.chain import verify_records
from toolgate.testing import ScriptedChatModel, ai, tool_call
from toolgate.tools.demo.identities import demo_token

REFUND = {"order_id": "O-5512", "amount_cents": 4999, "reason": "damaged"}
NEWBIE = Principal(
    user_id="nora", tenant_id="acme", roles=frozenset({"support"}), scopes=frozenset({"orders:read"})
)


def directory(harness: Harness) -> IdentityDirectory:
    return harness.gateway().directory


def refused(harness: Harness, code: str) -> int:
    return sum(1 for e in harness.store.audit.events() if e.event == "identity.refused" and e.code == code)


def raw(store: Store, sql: str, params: tuple[object, ...] = ()) -> None:
    """A statement run with database access alone (no store secret)."""
    with store.transaction() as tx:
        tx.execute(sql, params)


def test_tokens_authenticate_rotate_and_revoke(harness: Harness) -> None:
    people = directory(harness)
    token = people.add(NEWBIE, by=principal("ivy"))
    assert token is not None and token.startswith("tg_")
    assert people.authenticate("nora", token).roles == frozenset({"support"})
    with harness.store.transaction(write=False) as tx:
        stored = tx.one("SELECT token_hash FROM identities WHERE user_id = 'nora'")
    assert stored is not None and token not in json.dumps(stored)
    fresh = people.rotate_token("nora", by=principal("ivy"))
    with pytest.raises(IdentityError) as old:
        people.authenticate("nora", token)
    assert old.value.code == "authentication_failed"
    assert people.authenticate("nora", fresh).user_id == "nora"
    people.revoke("nora", by=principal("ivy"))
    with pytest.raises(IdentityError) as gone:
        people.authenticate("nora", fresh)
    assert gone.value.code == "revoked" and people.active("nora", "acme") is None
    events = [e.event for e in harness.store.audit.events() if e.event.startswith("identity.")]
    assert events == [
        "identity.added",
        "identity.token_rotated",
        "identity.refused",
        "identity.revoked",
        "identity.refused",
    ]


@pytest.mark.parametrize(
    ("user", "token", "code"),
    [
        ("fiona", None, "missing_token"),
        ("fiona", "", "missing_token"),
        ("fiona", "demo-token-rita", "authentication_failed"),
        ("mallory", "demo-token-mallory", "authentication_failed"),
    ],
)
def test_every_failed_authentication_is_refused_and_audited(
    harness: Harness, user: str, token: str | None, code: str
) -> None:
    with pytest.raises(IdentityError) as exc:
        directory(harness).authenticate(user, token)
    assert exc.value.code == code and refused(harness, code) == 1


def test_a_failed_sign_in_names_the_claimed_person_but_never_as_its_actor(harness: Harness) -> None:
    """Anyone may name fiona with a wrong token: the refusal records whom they claimed to be
    (``detail.claimed``, a keyed hash), not fiona as the one who acted, so nobody can append
    events that say fiona did something. Only a token that was fiona's makes her the actor (a
    revoked identity signing in with its own token)."""
    people = directory(harness)
    actor = harness.gateway().auditor.actor
    for token in ("wrong-token", None):
        with pytest.raises(IdentityError):
            people.authenticate("fiona", token)
    nora_token = people.add(NEWBIE, by=None)
    people.revoke("nora", by=None)
    with pytest.raises(IdentityError):
        people.authenticate("nora", nora_token)
    refusals = [
        (e.code, e.actor_id, e.detail.get("claimed"))
        for e in harness.store.audit.events()
        if e.event == "identity.refused"
    ]
    assert refusals == [
        ("authentication_failed", None, actor("fiona")),
        ("missing_token", None, actor("fiona")),
        ("revoked", actor("nora"), actor("nora")),
    ]


def test_administrators_act_only_in_their_own_tenant(harness: Harness) -> None:
    people = directory(harness)
    with pytest.raises(IdentityError) as not_admin:
        people.add(NEWBIE, by=principal("rita"))
    assert not_admin.value.code == "not_admin"
    foreign = Principal(user_id="zed", tenant_id="globex", roles=frozenset({"finance"}))
    with pytest.raises(IdentityError) as other:
        people.add(foreign, by=principal("ivy"))
    assert other.value.code == "cross_tenant"
    with pytest.raises(IdentityError):
        people.revoke("gina", by=principal("ivy"))
    assert harness.store.identities.get("zed") is None
    assert people.active("gina", "globex") is not None
    assert {r.user_id for r in people.visible_to(principal("ivy"))} >= {"fiona", "rita"}
    assert "gina" not in {r.user_id for r in people.visible_to(principal("ivy"))}


@pytest.mark.parametrize("action", ["revoke", "rotate_token", "change_roles"])
def test_managing_an_identity_is_refused_alike_for_a_missing_one_and_every_refusal_is_audited(
    harness: Harness, action: str
) -> None:
    """A person without the admin role learns nothing from the answer (whether a user id exists
    in any tenant: ``not_admin`` for every target), and an administrator's attempt on a user id
    that does not exist is a refusal like the others: audited, naming who tried."""
    people = directory(harness)

    def attempt(user_id: str, by: str) -> str:
        act = getattr(people, action)
        with pytest.raises(IdentityError) as exc:
            if action == "change_roles":
                act(user_id, roles=frozenset({"admin"}), scopes=None, by=principal(by))
            else:
                act(user_id, by=principal(by))
        return exc.value.code

    before = harness.store.audit.events()[-1].seq
    codes = [attempt("gina", "rita"), attempt("no-such-user", "rita"), attempt("no-such-user", "ivy")]
    assert codes == ["not_admin", "not_admin", "unknown_identity"]
    refusals = [
        (e.event, e.code, e.actor_id) for e in harness.store.audit.events() if e.seq > before
    ]
    actor = harness.gateway().auditor.actor
    assert refusals == [
        ("identity.refused", "not_admin", actor("rita")),
        ("identity.refused", "not_admin", actor("rita")),
        ("identity.refused", "unknown_identity", actor("ivy")),
    ]
    assert people.active("gina", "globex") is not None


def test_the_token_of_an_all_tenant_auditor_is_rotated_only_by_a_holder_of_that_role(harness: Harness) -> None:
    """A new token is shown to the administrator who asked for it: rotating the token of otto,
    who reads every tenant's evidence (``auditor:all``), hands that reading to the administrator,
    which only a holder may grant (`IdentityDirectory.add`). Refused ``cross_tenant``, audited,
    the old token still otto's."""
    people = directory(harness)
    sid = Principal(user_id="sid", tenant_id="toolgate-staff", roles=frozenset({"admin"}))
    people.add(sid, by=None)
    with pytest.raises(IdentityError) as rekeyed:
        people.rotate_token("otto", by=sid)
    assert rekeyed.value.code == "cross_tenant" and refused(harness, "cross_tenant") == 1
    assert people.authenticate("otto", demo_token("otto")).user_id == "otto"
    holder = Principal(user_id="hal", tenant_id="toolgate-staff", roles=frozenset({"admin", "auditor:all"}))
    people.add(holder, by=None)
    assert people.rotate_token("otto", by=holder).startswith("tg_")


def test_a_row_promoted_with_database_access_alone_cannot_act(harness: Harness) -> None:
    raw(harness.store, "UPDATE identities SET roles = ? WHERE user_id = 'rita'", ('["finance", "support"]',))
    with pytest.raises(IdentityError) as forged:
        directory(harness).authenticate("rita", demo_token("rita"))
    assert forged.value.code == "forged_identity"
    assert directory(harness).active("rita", "acme") is None
    assert verify_records(harness.store).forged_identities == ["rita"]
    with pytest.raises(IdentityError) as resign:  # toolgate refuses to re-sign a forged row
        directory(harness).rotate_token("rita", by=principal("ivy"))
    assert resign.value.code == "forged_identity"


def test_a_row_inserted_with_database_access_alone_cannot_act(harness: Harness) -> None:
    raw(
        harness.store,
        "INSERT INTO identities (user_id, tenant_id, roles, scopes, display_name, token_hash, status,"
        " created_at, updated_at, mac) VALUES ('eve', 'acme', '[\"finance\"]', '[]', 'Eve', ?, 'active',"
        " '2026-01-01T00:00:00.000000Z', '2026-01-01T00:00:00.000000Z', ?)",
        ("0" * 64, "0" * 64),
    )
    with pytest.raises(IdentityError) as forged:
        directory(harness).authenticate("eve", "anything")
    assert forged.value.code == "forged_identity"


def test_seed_files_never_carry_tokens(tmp_path: Path) -> None:
    path = tmp_path / "seed.json"
    entry = {"user_id": "nora", "tenant_id": "acme", "roles": ["support"]}
    path.write_text(json.dumps({"schema_version": 1, "identities": [{**entry, "token_sha256": "ab"}]}))
    with pytest.raises(ConfigurationError, match="tokens are issued by toolgate"):
        load_seed_file(path)
    path.write_text(json.dumps({"schema_version": 2, "identities": [entry]}))
    with pytest.raises(ConfigurationError, match="schema_version"):
        load_seed_file(path)
    path.write_text(json.dumps({"schema_version": 1, "identities": [entry, entry]}))
    with pytest.raises(ConfigurationError, match="duplicate"):
        load_seed_file(path)


# ---- approvals ------------------------------------------------------------------------------


def pending_refund(harness: Harness, thread: str) -> dict[str, str]:
    model = ScriptedChatModel(responses=[ai("", tool_call("issue_refund", REFUND, "c1")), ai("done")])
    facts = start(harness.graph(model), REFUND_REQUEST, "cust-ada", thread)["__interrupt__"][0].value
    proposal: dict[str, str] = facts["toolgate"]["proposals"][0]
    return proposal


def test_a_forged_approval_row_never_executes_and_verification_names_it(harness: Harness) -> None:
    proposal = pending_refund(harness, "t-forged")
    raw(
        harness.store,
        "INSERT INTO approvals (approval_id, proposal_id, reviewer_id, reviewer_tenant_id, reviewer_roles,"
        " decision, digest, reason, decided_at, mac) VALUES ('apr_forged', ?, 'fiona', 'acme', '[\"finance\"]',"
        " 'approve', ?, '', '2026-12-01T00:00:00.000000Z', ?)",
        (proposal["proposal_id"], proposal["digest"], "f" * 64),
    )
    raw(
        harness.store,
        "UPDATE operations SET status = 'approved' WHERE operation_key = ?",
        (proposal["operation_key"],),
    )
    delivery = harness.gateway().executor.deliver(proposal["operation_key"], worker_id="w")
    assert delivery.claim == "NOT_ATTEMPTED" and harness.payments() == 0
    assert harness.handler_calls["issue_refund"] == 0
    voided = [e for e in harness.store.audit.events() if e.event == "approval.voided"]
    assert [e.code for e in voided] == ["forged_approval"] and voided[0].detail["approval_id"] == "apr_forged"
    assert verify_records(harness.store).forged_approvals == ["apr_forged"]


@pytest.mark.parametrize("change", ["revoked", "moved_with_database_access_alone"])
def test_an_approved_write_whose_requester_lost_their_identity_never_runs(harness: Harness, change: str) -> None:
    """The write runs on its requester's authority as much as on its reviewers': revoked since
    the approval, or their record changed without the store's secret (it no longer verifies), the
    write is refused ``requester_inactive`` before any claim, audited, and stays approved."""
    proposal = pending_refund(harness, f"t-requester-{change}")
    gw = harness.gateway()
    assert decide(gw, proposal["proposal_id"], principal("fiona"), "approve").operation.status == "approved"
    if change == "revoked":
        directory(harness).revoke("cust-ada", by=principal("ivy"))
    else:  # the requester "moved" to another tenant by a row edit: the MAC no longer verifies
        raw(harness.store, "UPDATE identities SET tenant_id = 'globex' WHERE user_id = 'cust-ada'")
    delivery = gw.executor.deliver(proposal["operation_key"], worker_id="w")
    assert delivery.claim == "NOT_ATTEMPTED" and delivery.reason.startswith("requester_inactive: ")
    assert harness.handler_calls["issue_refund"] == 0 and harness.payments() == 0
    assert harness.store.operations.get(proposal["operation_key"]).status == "approved"  # type: ignore[union-attr]
    refusals = [
        e for e in harness.store.audit.events(operation_key=proposal["operation_key"])
        if e.event == "approval.refused_at_execution"
    ]
    assert [e.code for e in refusals] == ["requester_inactive"]


def test_a_revoked_reviewers_pending_approval_stops_counting(harness: Harness) -> None:
    proposal = pending_refund(harness, "t-revoked")
    gw = harness.gateway()
    decide(gw, proposal["proposal_id"], principal("rita"), "approve")
    outcome = decide(gw, proposal["proposal_id"], principal("sam"), "approve")
    assert outcome.operation.status == "approved"  # two support reviewers
    directory(harness).revoke("rita", by=principal("ivy"))
    delivery = gw.executor.deliver(proposal["operation_key"], worker_id="w")
    assert delivery.claim == "NOT_ATTEMPTED" and "more approval" in delivery.reason
    assert harness.payments() == 0 and harness.handler_calls["issue_refund"] == 0
    assert any(
        e.event == "approval.voided" and e.code == "reviewer_inactive" for e in harness.store.audit.events()
    )
    with pytest.raises(ApprovalError) as revoked:  # and rita can no longer decide anything
        decide(gw, proposal["proposal_id"], principal("rita"), "reject", reason="changed my mind")
    assert revoked.value.code == "reviewer_inactive"


def test_the_same_person_twice_is_not_two_people_and_other_tenants_touch_nothing(harness: Harness) -> None:
    proposal = pending_refund(harness, "t-sod")
    gw = harness.gateway()
    decide(gw, proposal["proposal_id"], principal("rita"), "approve")
    with pytest.raises(ApprovalError) as twice:
        decide(gw, proposal["proposal_id"], principal("rita"), "approve")
    assert twice.value.code == "already_decided"
    with pytest.raises(ApprovalError) as foreign:
        decide(gw, proposal["proposal_id"], principal("gina"), "approve")
    assert foreign.value.code == "cross_tenant"
    with pytest.raises(ApprovalError) as own:
        decide(gw, proposal["proposal_id"], principal("cust-ada"), "approve")
    assert own.value.code == "self_approval"
    op = harness.store.operations.get(proposal["operation_key"])
    assert op is not None and op.status == "pending_approval" and harness.payments() == 0


def test_roles_come_from_the_store_not_from_the_caller(harness: Harness) -> None:
    proposal = pending_refund(harness, "t-roles")
    inflated = Principal(user_id="rita", tenant_id="acme", roles=frozenset({"finance"}))  # rita is support
    outcome = decide(harness.gateway(), proposal["proposal_id"], inflated, "approve")
    assert outcome.record.reviewer_roles == ("support",) and outcome.operation.status == "pending_approval"


# ---- the store's secret -----------------------------------------------------------------------


def test_no_store_exists_without_its_secret(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        SQLiteStore(tmp_path / "s.sqlite")  # type: ignore[call-arg]
    with pytest.raises(ConfigurationError, match="at least 16 bytes"):
        SQLiteStore(tmp_path / "s.sqlite", key=b"")
    with pytest.raises(ConfigurationError, match="at least 16 bytes"):
        PostgresStore("postgresql://nowhere/x", key=b"short")


def test_stores_with_different_secrets_do_not_trust_each_others_rows(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    first = Harness(SQLiteStore(path, key=TEST_KEY))
    proposal = pending_refund(first, "t-keys")
    decide(first.gateway(), proposal["proposal_id"], principal("fiona"), "approve")
    other = SQLiteStore(path, key=b"another-secret-of-this-deployment")
    assert [d.authentic for d in other.approvals.for_proposal(proposal["proposal_id"])] == [False]
    assert not any(i.authentic for i in other.identities.list())


def test_a_read_only_store_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="no toolgate store"):
        open_store(None, tmp_path / "missing", key=TEST_KEY, read_only=True)
    assert not (tmp_path / "missing").exists()
    Harness(SQLiteStore(tmp_path / "toolgate.sqlite", key=TEST_KEY))
    before = (tmp_path / "toolgate.sqlite").read_bytes()
    reader = SQLiteStore(tmp_path / "toolgate.sqlite", key=TEST_KEY, read_only=True)
    reader.require_schema()
    assert reader.identities.list() and verify_records(reader).ok
    with pytest.raises(StoreError, match="read-only"):
        reader.identities.add(
            IdentityRecord(user_id="x", tenant_id="acme", roles=(), scopes=(), display_name="")
        )
    assert (tmp_path / "toolgate.sqlite").read_bytes() == before
