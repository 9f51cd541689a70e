"""Red team: store rows changed with database access alone (no store secret) authorize nothing.

Operation rows carry no MAC: their authority is the proposal they name and that proposal's
MAC'd approvals. So an operation row that names someone else's approved proposal (inserted, or
re-pointed) must not borrow its approvals: it would run the approved arguments a second time under
a new operation key, which the payment system takes as a new request.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from support import REFUND_REQUEST, TEST_KEY, Harness, audit_events, principal, start

from toolgate.errors import ApprovalError
from toolgate.graph.review.decisions import decide
from toolgate.store import SQLiteStore
from toolgate.testing import ScriptedChatModel, ai, tool_call

REFUND = {"order_id": "O-5512", "amount_cents": 1000, "reason": "damaged"}


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    return Harness(SQLiteStore(tmp_path / "rows.sqlite", key=TEST_KEY))


def _approved_and_run(harness: Harness, thread: str) -> dict[str, Any]:
    model = ScriptedChatModel(responses=[ai("", tool_call("issue_refund", REFUND, "c1")), ai("done")])
    facts = start(harness.graph(model), REFUND_REQUEST, "cust-ada", thread)["__interrupt__"][0].value
    proposal = facts["toolgate"]["proposals"][0]
    gw = harness.gateway()
    decide(gw, proposal["proposal_id"], principal("fiona"), "approve")
    assert gw.executor.deliver(proposal["operation_key"], worker_id="w").status == "succeeded"
    assert harness.refunds() == 1
    return proposal  # type: ignore[no-any-return]


def _sql(path: Path, statement: str, *args: Any) -> None:
    con = sqlite3.connect(path)
    try:
        con.execute(statement, args)
        con.commit()
    finally:
        con.close()


def test_an_inserted_operation_row_cannot_borrow_another_operations_approval(
    harness: Harness, tmp_path: Path
) -> None:
    proposal = _approved_and_run(harness, "t-borrow")
    _sql(
        tmp_path / "rows.sqlite",
        "INSERT INTO operations (operation_key, proposal_id, tool, tenant_id, status, attempts, created_at,"
        " updated_at) SELECT 'op_forged', proposal_id, tool, tenant_id, 'approved', 0, created_at, updated_at"
        " FROM operations WHERE operation_key = ?",
        proposal["operation_key"],
    )
    gw = harness.gateway()
    assert gw.executor.deliver("op_forged", worker_id="w").status == "approved"  # refused, not claimed
    assert harness.refunds() == 1 and harness.handler_calls["issue_refund"] == 1
    refusals = [
        e
        for e in audit_events(harness.store, "approval.refused_at_execution")
        if e.operation_key == "op_forged"
    ]
    assert [e.code for e in refusals] == ["operation_mismatch"]


def test_a_pending_operation_repointed_at_an_approved_proposal_runs_nothing(
    harness: Harness, tmp_path: Path
) -> None:
    done = _approved_and_run(harness, "t-done")
    model = ScriptedChatModel(
        responses=[ai("", tool_call("issue_refund", {**REFUND, "amount_cents": 900}, "c2")), ai("done")]
    )
    pending = start(harness.graph(model), REFUND_REQUEST, "cust-ada", "t-pending")["__interrupt__"][0].value
    key = pending["toolgate"]["proposals"][0]["operation_key"]
    db = tmp_path / "rows.sqlite"
    _sql(db, "UPDATE operations SET proposal_id = ? WHERE operation_key = ?", done["proposal_id"], key)
    _sql(db, "UPDATE operations SET status = 'approved' WHERE operation_key = ?", key)
    assert harness.gateway().executor.deliver(key, worker_id="w").status == "approved"
    assert harness.refunds() == 1 and harness.handler_calls["issue_refund"] == 1


def test_a_proposal_row_inserted_with_database_access_alone_is_never_executed(
    harness: Harness, tmp_path: Path
) -> None:
    from dataclasses import replace

    from toolgate.canonical import digest

    model = ScriptedChatModel(responses=[ai("", tool_call("issue_refund", REFUND, "c1")), ai("done")])
    facts = start(harness.graph(model), REFUND_REQUEST, "cust-ada", "t-forge")["__interrupt__"][0].value
    real = harness.store.proposals.get(facts["toolgate"]["proposals"][0]["proposal_id"])
    assert real is not None
    forged = replace(
        real,
        proposal_id="prop_forged00000000000000",
        operation_key="op_forged_proposal",
        call_id="c-forged",
        arguments={**real.arguments, "amount_cents": 3000},
    )
    forged = replace(forged, digest=digest(forged.content()))
    db = tmp_path / "rows.sqlite"
    con = sqlite3.connect(db)
    try:
        con.row_factory = sqlite3.Row
        row = dict(
            con.execute("SELECT * FROM proposals WHERE proposal_id = ?", (real.proposal_id,)).fetchone()
        )
        row.update(
            proposal_id=forged.proposal_id,
            operation_key=forged.operation_key,
            call_id=forged.call_id,
            arguments=json.dumps(forged.arguments),
            arguments_sha256=digest(forged.arguments),
            digest=forged.digest,
        )
        con.execute(
            f"INSERT INTO proposals ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)})",
            tuple(row.values()),
        )
        op = dict(
            con.execute("SELECT * FROM operations WHERE operation_key = ?", (real.operation_key,)).fetchone()
        )
        op.update(operation_key=forged.operation_key, proposal_id=forged.proposal_id)
        con.execute(
            f"INSERT INTO operations ({', '.join(op)}) VALUES ({', '.join('?' for _ in op)})",
            tuple(op.values()),
        )
        con.commit()
    finally:
        con.close()
    gw = harness.gateway()
    with contextlib.suppress(ApprovalError):  # refused at decision time would be a pass
        decide(gw, forged.proposal_id, principal("fiona"), "approve")  # it looks like ada's request
    gw.executor.deliver(forged.operation_key, worker_id="w")
    assert harness.refunds() == 0 and harness.handler_calls["issue_refund"] == 0
    refused = [
        e.code for e in audit_events(harness.store, "approval.refused") if e.proposal_id == forged.proposal_id
    ]
    assert refused == ["forged_proposal"]  # its row's MAC (copied from the real one) does not verify
