"""Red team (redteam8): decisions on one proposal that read it pending at the same moment.

Each decision reads its proposal (pending) before its own transaction; two reviewers who read it
at once both got their decision recorded, though only the first could settle it. Two edits at
once each rejected the original "as superseded by" their own replacement, so neither was
voided: two pending replacements of one call, each approvable and delivered by a worker (two
refunds for one request). A decision is now recorded only while its operation is pending
(`Approvals.record_and_settle` ``while_pending``, judged by the INSERT behind the operation
row's lock): the one that loses is refused ``not_pending``, audited, and records nothing.
Interleavings are forced with a barrier after each decision's read, on both backends.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from support import REFUND_REQUEST, Harness, principal, start

from toolgate.errors import ApprovalError
from toolgate.graph.review import edits
from toolgate.graph.review.decisions import decide
from toolgate.testing import ScriptedChatModel, ai, tool_call

REFUND = {"order_id": "O-5512", "amount_cents": 1000, "reason": "damaged"}


def _pending(harness: Harness, thread: str) -> dict[str, Any]:
    model = ScriptedChatModel(responses=[ai("", tool_call("issue_refund", REFUND, "c1")), ai("done")])
    result = start(harness.graph(model), REFUND_REQUEST, "cust-ada", thread)
    return result["__interrupt__"][0].value["toolgate"]["proposals"][0]  # type: ignore[no-any-return]


def _at_once(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, proposal_id: str, steps: dict[str, Callable[[], Any]]
) -> dict[str, Any]:
    """Run ``steps`` in threads, each decision on ``proposal_id`` held after its read until both
    have read it; what each returned or raised."""
    snapshots = type(harness.store.snapshots)
    read = snapshots.for_decision
    both_read = threading.Barrier(2, timeout=60)

    def read_together(self: Any, pid: str, people: Any = ()) -> Any:
        seen = read(self, pid, people)
        if pid == proposal_id:
            both_read.wait()
        return seen

    monkeypatch.setattr(snapshots, "for_decision", read_together)
    done: dict[str, Any] = {}

    def run(name: str) -> None:
        try:
            done[name] = steps[name]()
        except ApprovalError as exc:
            done[name] = exc

    threads = [threading.Thread(target=run, args=(name,)) for name in steps]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    monkeypatch.setattr(snapshots, "for_decision", read)
    assert not any(t.is_alive() for t in threads) and len(done) == 2
    return done


def test_two_edits_at_once_leave_one_replacement_and_one_refund(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = _pending(harness, "t-two-edits-at-once")
    gw = harness.gateway()

    def edit(who: str, cents: int) -> Callable[[], Any]:
        return lambda: edits.edit_proposal(
            gw, original["proposal_id"], principal(who), tool="issue_refund",
            arguments={**REFUND, "amount_cents": cents},
        )  # fmt: skip

    done = _at_once(
        harness, monkeypatch, original["proposal_id"], {"rita": edit("rita", 700), "sam": edit("sam", 600)}
    )
    lost = [who for who, got in done.items() if isinstance(got, ApprovalError)]
    assert len(lost) == 1 and done[lost[0]].code == "not_pending"  # on the base: both edits stood
    (won,) = [got for got in done.values() if not isinstance(got, ApprovalError)]
    replacements = [p for p, _ in harness.store.proposals.list(None) if p.supersedes == original["proposal_id"]]
    statuses = {p.proposal_id: harness.store.operations.get(p.operation_key).status for p in replacements}  # type: ignore[union-attr]
    assert len(statuses) == 2 and statuses.pop(won.proposal_id) == "pending_approval"
    assert list(statuses.values()) == ["rejected"]  # the loser's, voided (edit_lost_race)
    rejections = harness.store.approvals.for_proposal(original["proposal_id"])
    assert [(d.reviewer_id, d.reason) for d in rejections] == [
        (won.editors[0], edits.SUPERSEDED_BY + won.proposal_id)
    ]
    refused = [e.code for e in harness.store.audit.events() if e.event == "approval.refused"]
    assert refused == ["not_pending"]
    assert edits.current_proposal(gw, original["proposal_id"]).proposal_id == won.proposal_id  # type: ignore[union-attr]
    for p in replacements:  # fiona approves whatever is approvable, a worker delivers whatever is approved
        if p.proposal_id != won.proposal_id:
            with pytest.raises(ApprovalError, match="not pending_approval"):
                decide(gw, p.proposal_id, principal("fiona"), "approve")
        else:
            decide(gw, p.proposal_id, principal("fiona"), "approve")
        gw.executor.deliver(p.operation_key, worker_id="w")
    assert harness.refunds() == 1 and harness.handler_calls["issue_refund"] == 1


def test_an_approval_and_a_rejection_at_once_record_only_the_one_that_settles(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = _pending(harness, "t-approve-reject-at-once")
    gw = harness.gateway()
    pid = original["proposal_id"]
    done = _at_once(
        harness,
        monkeypatch,
        pid,
        {
            "fiona": lambda: decide(gw, pid, principal("fiona"), "approve"),
            "rita": lambda: decide(gw, pid, principal("rita"), "reject", reason="wrong order"),
        },
    )
    lost = [who for who, got in done.items() if isinstance(got, ApprovalError)]
    assert len(lost) == 1 and done[lost[0]].code == "not_pending"  # on the base: both recorded
    (winner,) = {"fiona", "rita"} - set(lost)
    decisions = harness.store.approvals.for_proposal(pid)
    assert [d.reviewer_id for d in decisions] == [winner]
    op = harness.store.operations.get(original["operation_key"])
    assert op is not None and op.status == ("approved" if winner == "fiona" else "rejected")
    refused = [(e.code, e.proposal_id) for e in harness.store.audit.events() if e.event == "approval.refused"]
    assert refused == [("not_pending", pid)]
    gw.executor.deliver(original["operation_key"], worker_id="w")
    assert harness.refunds() == (1 if winner == "fiona" else 0)
