"""Proposal rows carry a MAC under the store's secret: a row written or changed with database
access alone (or written before proposals carried a MAC) is never reviewed, edited or executed.

The tampering here is a database owner's: the immutability trigger lifted, one column rewritten
(with its unkeyed digests recomputed, as anyone can), the trigger put back. Both backends.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import (
    REFUND_REQUEST,
    Harness,
    audit_events,
    cli_env,
    kv_lines,
    open_test_store,
    principal,
    start,
    toolgate,
)

from toolgate.canonical import canonical_json, digest
from toolgate.errors import ApprovalError
from toolgate.graph.review.decisions import decide
from toolgate.graph.review.edits import edit_proposal
from toolgate.store import SQLiteStore, Store
from toolgate.store.chain import verify_records
from toolgate.store.records import ProposalRecord
from toolgate.testing import ScriptedChatModel, ai, tool_call

REFUND = {"order_id": "O-5512", "amount_cents": 1000, "reason": "damaged"}


@contextlib.contextmanager
def _owner_access(store: Store) -> Iterator[Any]:
    """A transaction with the proposals' immutability trigger lifted (database-owner access)."""
    sqlite = isinstance(store, SQLiteStore)
    with store.transaction() as tx:
        if sqlite:
            tx.execute("DROP TRIGGER proposals_no_update")
        else:
            tx.execute("ALTER TABLE proposals DISABLE TRIGGER proposals_immutable")
        yield tx
        if sqlite:
            tx.execute(
                "CREATE TRIGGER proposals_no_update BEFORE UPDATE ON proposals"
                " BEGIN SELECT RAISE(ABORT, 'proposals are immutable'); END"
            )
        else:
            tx.execute("ALTER TABLE proposals ENABLE TRIGGER proposals_immutable")


def _rewrite(store: Store, proposal: ProposalRecord, **changes: Any) -> None:
    """Rewrite the proposal row's ``changes`` in place, recomputing its unkeyed digests; ``mac``
    (when given) replaces the row's MAC (None: a row from before proposals carried one)."""
    columns: dict[str, Any] = {}
    if "mac" in changes:
        columns["mac"] = changes.pop("mac")
    if changes:
        changed = dataclasses.replace(proposal, **changes)
        changed = dataclasses.replace(changed, arguments_sha256=digest(changed.arguments))
        columns.update(
            {k: canonical_json(v) if k == "arguments" else v for k, v in changes.items()},
            arguments_sha256=changed.arguments_sha256,
            digest=digest(changed.content()),
        )
    with _owner_access(store) as tx:
        tx.execute(
            f"UPDATE proposals SET {', '.join(f'{k} = ?' for k in columns)} WHERE proposal_id = ?",
            (*columns.values(), proposal.proposal_id),
        )


def _pending(harness: Harness, thread: str, amount: int = 1000) -> dict[str, Any]:
    """A refund proposal pending approval (its interrupt facts)."""
    call = tool_call("issue_refund", {**REFUND, "amount_cents": amount}, f"c-{thread}")
    model = ScriptedChatModel(responses=[ai("", call), ai("done")])
    facts = start(harness.graph(model), REFUND_REQUEST, "cust-ada", thread)["__interrupt__"][0].value
    found: dict[str, Any] = facts["toolgate"]["proposals"][0]
    return found


def _approve_row(store: Store, operation_key: str) -> None:
    """The operation flipped to approved by hand (database access), as if review had passed."""
    with store.transaction() as tx:
        tx.execute("UPDATE operations SET status = 'approved' WHERE operation_key = ?", (operation_key,))


def _codes(store: Store, event: str, proposal_id: str) -> list[str | None]:
    return [e.code for e in audit_events(store, event) if e.proposal_id == proposal_id]


def _decisions(store: Store, proposal_id: str) -> int:
    with store.transaction(write=False) as tx:
        row = tx.one("SELECT COUNT(*) AS n FROM approvals WHERE proposal_id = ?", (proposal_id,))
    assert row is not None
    return int(row["n"])


TAMPERS: dict[str, dict[str, Any]] = {
    "arguments": {"arguments": {**REFUND, "amount_cents": 3000}},
    "requester": {"requester_id": "cust-gina"},
    "tenant": {"tenant_id": "globex"},
    "expiry": {"expires_at": "2999-01-01T00:00:00.000000Z"},
    "null_mac": {"mac": None},  # a pending proposal from before the upgrade
}


@pytest.mark.parametrize("tamper", sorted(TAMPERS))
def test_a_tampered_proposal_reads_inauthentic_and_is_refused_at_decide_and_at_delivery(
    harness: Harness, tamper: str
) -> None:
    facts = _pending(harness, f"t-{tamper}")
    assert facts["authentic"] is True  # the interrupt payload flags it; a real one verifies
    pid, key = facts["proposal_id"], facts["operation_key"]
    real = harness.store.proposals.get(pid)
    assert real is not None and real.authentic
    _rewrite(harness.store, real, **TAMPERS[tamper])

    stored = harness.store.proposals.get(pid)
    assert stored is not None and not stored.authentic
    assert [p.authentic for p, _ in harness.store.proposals.list() if p.proposal_id == pid] == [False]
    gw = harness.gateway()
    for decision, reason in (("approve", ""), ("reject", "no")):
        with pytest.raises(ApprovalError) as refused:
            decide(gw, pid, principal("fiona"), decision, reason=reason)  # type: ignore[arg-type]
        assert refused.value.code == "forged_proposal"
    assert _codes(harness.store, "approval.refused", pid) == ["forged_proposal", "forged_proposal"]
    assert _decisions(harness.store, pid) == 0  # nothing recorded but the refusals
    assert harness.store.operations.get(key).status == "pending_approval"  # type: ignore[union-attr]

    _approve_row(harness.store, key)  # review bypassed by hand too: delivery still refuses
    delivery = gw.executor.deliver(key, worker_id="w")
    assert (delivery.status, delivery.claim) == ("approved", "NOT_ATTEMPTED")
    assert delivery.reason.startswith("forged_proposal")
    assert harness.handler_calls["issue_refund"] == 0 and harness.refunds() == 0
    assert _codes(harness.store, "approval.refused_at_execution", pid) == ["forged_proposal"]
    assert harness.store.operations.get(key).attempts == 0  # type: ignore[union-attr]
    assert verify_records(harness.store).forged_proposals == [pid]


def test_a_mac_copied_from_another_proposal_does_not_verify(harness: Harness) -> None:
    donor = _pending(harness, "t-donor", amount=500)
    target = _pending(harness, "t-target", amount=3000)
    with harness.store.transaction(write=False) as tx:
        row = tx.one("SELECT mac FROM proposals WHERE proposal_id = ?", (donor["proposal_id"],))
    assert row is not None and row["mac"]
    real = harness.store.proposals.get(target["proposal_id"])
    assert real is not None
    _rewrite(harness.store, real, mac=row["mac"])

    assert harness.store.proposals.get(donor["proposal_id"]).authentic  # type: ignore[union-attr]
    assert not harness.store.proposals.get(target["proposal_id"]).authentic  # type: ignore[union-attr]
    gw = harness.gateway()
    with pytest.raises(ApprovalError) as refused:
        decide(gw, target["proposal_id"], principal("fiona"), "approve")
    assert refused.value.code == "forged_proposal"
    _approve_row(harness.store, target["operation_key"])
    assert gw.executor.deliver(target["operation_key"], worker_id="w").claim == "NOT_ATTEMPTED"
    assert harness.handler_calls["issue_refund"] == 0
    assert verify_records(harness.store).forged_proposals == [target["proposal_id"]]

    decide(gw, donor["proposal_id"], principal("fiona"), "approve")  # the donor itself is untouched
    assert gw.executor.deliver(donor["operation_key"], worker_id="w").status == "succeeded"
    assert harness.handler_calls["issue_refund"] == 1


def test_an_inauthentic_proposal_is_never_edited(harness: Harness) -> None:
    facts = _pending(harness, "t-edit")
    real = harness.store.proposals.get(facts["proposal_id"])
    assert real is not None
    _rewrite(harness.store, real, mac=None)
    before = len(harness.store.proposals.list())
    with pytest.raises(ApprovalError) as refused:
        edit_proposal(
            harness.gateway(),
            real.proposal_id,
            principal("fiona"),
            tool="issue_refund",
            arguments={**REFUND, "amount_cents": 500},
        )
    assert refused.value.code == "forged_proposal"
    assert (
        len(harness.store.proposals.list()) == before and harness.store.proposals.superseding(real.proposal_id) is None
    )
    assert _codes(harness.store, "approval.refused", real.proposal_id) == ["forged_proposal"]
    assert _decisions(harness.store, real.proposal_id) == 0


def test_audit_verify_names_a_forged_proposal_and_fails(tmp_path: Path, database_url: str | None) -> None:
    store = open_test_store(tmp_path, database_url)
    try:
        harness = Harness(store)
        good = _pending(harness, "t-good", amount=500)
        bad = _pending(harness, "t-bad")
        env = cli_env(tmp_path, database_url)
        clean = toolgate(["audit", "verify", "--as", "otto"], env)
        assert "forged_proposals=none" in clean.stdout and "proposals=2 " in clean.stdout
        real = store.proposals.get(bad["proposal_id"])
        assert real is not None
        _rewrite(store, real, requester_id="cust-gina")
        verified = toolgate(["audit", "verify", "--as", "otto"], env, check=False)
        assert verified.returncode == 1, verified.stdout + verified.stderr
        line = kv_lines(verified.stdout)[-1]
        assert line["forged_proposals"] == bad["proposal_id"] and line["tamper_check"] == "FAIL" and line["chain"] == "PASS"
        assert good["proposal_id"] not in verified.stdout
        shown = toolgate(["proposals", "show", bad["proposal_id"]], env).stdout
        assert "authentic=false" in shown
    finally:
        store.close()


def test_the_api_lists_and_shows_an_inauthentic_proposal_flagged(harness: Harness) -> None:
    from toolgate.graph.server.reads import _detail, _summary

    facts = _pending(harness, "t-api")
    real = harness.store.proposals.get(facts["proposal_id"])
    assert real is not None
    gw = harness.gateway()
    operation = harness.store.operations.get(real.operation_key)
    assert operation is not None
    assert _detail(gw, real, operation)["authentic"] is True
    _rewrite(harness.store, real, mac=None)
    forged = harness.store.proposals.get(real.proposal_id)
    assert forged is not None
    assert _summary(forged, operation, harness.store.now())["authentic"] is False
    assert json.loads(json.dumps(_detail(gw, forged, operation)))["authentic"] is False


def test_a_proposal_pending_from_before_the_upgrade_is_refused_and_must_be_proposed_again(
    tmp_path: Path,
) -> None:
    # a real store written by the gateway before proposals carried a MAC (tests/fixtures/state_v1)
    import shutil

    fixture = Path(__file__).parent / "fixtures" / "state_v1"
    shutil.copytree(fixture, tmp_path / "old")
    facts = json.loads((tmp_path / "old" / "facts.json").read_text())
    store = SQLiteStore(tmp_path / "old" / "toolgate.sqlite", key=b"k" * 32)
    try:
        harness = Harness(store)  # opened by today's code: the migration adds the (empty) column
        old = store.proposals.get(facts["proposal_id"])
        assert old is not None and not old.authentic
        with store.transaction(write=False) as tx:
            row = tx.one("SELECT mac FROM proposals WHERE proposal_id = ?", (facts["proposal_id"],))
        assert row is not None and row["mac"] is None
        with pytest.raises(ApprovalError) as refused:
            decide(harness.gateway(), old.proposal_id, principal("fiona"), "approve")
        assert refused.value.code == "forged_proposal"
        assert _codes(store, "approval.refused", old.proposal_id) == ["forged_proposal"]
        assert _decisions(store, old.proposal_id) == 0 and harness.handler_calls["issue_refund"] == 0
        assert verify_records(store).forged_proposals == [old.proposal_id]
    finally:
        store.close()
