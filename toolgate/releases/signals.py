"""What a candidate release did since its rollout began, read from the store's own records.

Signals come from audit events stamped with the candidate's release (``tool_release``) after the
rollout's starting sequence number, from the candidate's proposals and operations, and from the
approval records. Windows are audit sequence numbers, never times, so no clock (a worker's or the
store's) can widen or narrow what counts. The audit chain since the start is re-verified link by
link (`ChainCursor`), incrementally within one process.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from toolgate.clock import parse_iso
from toolgate.policy.approvals import evaluate_decisions
from toolgate.releases.rules import Signals
from toolgate.store.audit_records import GENESIS_HASH, audit_hash, audit_row_content
from toolgate.store.base import Store
from toolgate.tools.spec import ApprovalClass

ApprovalLookup = Callable[[str], ApprovalClass | None]
"""The candidate's approval class of a tool (None: the tool is not in the candidate)."""

_COUNTS = """
SELECT
  COALESCE(SUM(CASE WHEN event IN ('call.accepted', 'call.rejected') AND COALESCE(code, '') <> 'task_stopped'
      THEN 1 ELSE 0 END), 0) AS judged,
  COALESCE(SUM(CASE WHEN event = 'call.rejected' AND code = 'unknown_tool' THEN 1 ELSE 0 END), 0) AS unknown,
  COALESCE(SUM(CASE WHEN event IN ('call.rejected', 'operation.refused') AND code IN ('cross_tenant', 'not_owner')
      THEN 1 ELSE 0 END), 0) AS cross_tenant,
  COALESCE(SUM(CASE WHEN event = 'call.rejected' AND code IN ('loop_detected', 'budget_exhausted')
      THEN 1 ELSE 0 END), 0) AS loops
FROM audit_events WHERE tool_release = ? AND seq > ?"""


@dataclass
class ChainCursor:
    """How far the chain is verified: the last verified event's sequence number and hash."""

    seq: int = -1
    """-1: nothing verified yet (the anchor is the rollout's starting event)."""
    hash: str = ""
    problem: str = ""
    """The first break found (sticky: a broken chain stays broken)."""


def verify_chain_since(store: Store, started_seq: int, cursor: ChainCursor) -> str:
    """Verify every link after ``started_seq`` not yet verified by ``cursor``; the problem, or "".

    The anchor is the event at ``started_seq`` (trusted as far as this check goes; a full
    `toolgate audit verify` covers the whole log). A removed, reordered, forged or modified event
    after it breaks a link or its keyed hash."""
    if cursor.problem:
        return cursor.problem
    key = store.keys.key("audit-chain")
    with store.transaction(write=False) as tx:
        if cursor.seq < 0:
            if started_seq == 0:
                cursor.seq, cursor.hash = 0, GENESIS_HASH
            else:
                anchor = tx.one("SELECT seq, hash FROM audit_events WHERE seq = ?", (started_seq,))
                if anchor is None:
                    cursor.problem = f"event {started_seq} (the rollout's start) is missing"
                    return cursor.problem
                cursor.seq, cursor.hash = int(anchor["seq"]), str(anchor["hash"])
        rows = tx.execute("SELECT * FROM audit_events WHERE seq > ? ORDER BY seq", (cursor.seq,))
    for row in rows:
        if row["prev_hash"] != cursor.hash:
            cursor.problem = f"link broken before event {row['seq']}"
        elif audit_hash(audit_row_content(row), row["prev_hash"], key) != row["hash"]:
            cursor.problem = f"event {row['seq']} does not match its hash"
        if cursor.problem:
            return cursor.problem
        cursor.seq, cursor.hash = int(row["seq"]), str(row["hash"])
    return ""


def candidate_signals(
    store: Store, release: str, started_seq: int, approval_of: ApprovalLookup, cursor: ChainCursor
) -> Signals:
    """The candidate's `Signals` since ``started_seq``."""
    with store.transaction(write=False) as tx:
        counts = tx.one(_COUNTS, (release, started_seq))
        completed = tx.execute(
            "SELECT operation_key, COUNT(*) AS n FROM audit_events WHERE tool_release = ? AND seq > ?"
            " AND event = 'operation.completed' AND operation_key IS NOT NULL GROUP BY operation_key",
            (release, started_seq),
        )
        started = tx.execute(
            "SELECT DISTINCT operation_key, proposal_id, tool FROM audit_events WHERE tool_release = ?"
            " AND seq > ? AND event = 'handler.started'",
            (release, started_seq),
        )
        ambiguous = tx.one(
            "SELECT COUNT(*) AS n FROM operations o JOIN proposals p ON p.operation_key = o.operation_key"
            " WHERE p.release = ? AND o.status IN ('unknown', 'dead_lettered')",
            (release,),
        )
    assert counts is not None and ambiguous is not None
    bypasses = 0
    for row in started:
        proposal = store.proposals.get(row["proposal_id"]) if row["proposal_id"] else None
        approval = approval_of(str(row["tool"])) if proposal is not None else None
        if proposal is None or approval is None:
            bypasses += 1
            continue
        verdict = evaluate_decisions(proposal, approval, store.approvals.for_proposal(proposal.proposal_id))
        bypasses += verdict.status != "approved"
    return Signals(
        calls_judged=int(counts["judged"]),
        unknown_tools=int(counts["unknown"]),
        cross_tenant_denials=int(counts["cross_tenant"]),
        loop_budget_breaches=int(counts["loops"]),
        approval_bypasses=bypasses,
        duplicate_effects=sum(1 for r in completed if int(r["n"]) > 1),
        ambiguous_operations=int(ambiguous["n"]),
        audit_gap=verify_chain_since(store, started_seq, cursor),
    )


def handler_latencies_ms(store: Store, release: str, started_seq: int) -> list[float]:
    """Per executed write of ``release`` since ``started_seq``: milliseconds from its
    ``handler.started`` to its ``handler.finished`` audit event (both stamped by the store's clock)."""
    with store.transaction(write=False) as tx:
        rows = tx.execute(
            "SELECT operation_key, event, occurred_at FROM audit_events WHERE tool_release = ? AND seq > ?"
            " AND event IN ('handler.started', 'handler.finished') AND operation_key IS NOT NULL ORDER BY seq",
            (release, started_seq),
        )
    begun: dict[str, str] = {}
    out: list[float] = []
    for row in rows:
        key = str(row["operation_key"])
        if row["event"] == "handler.started":
            begun[key] = str(row["occurred_at"])
        elif key in begun:
            delta = parse_iso(str(row["occurred_at"])) - parse_iso(begun.pop(key))
            out.append(max(delta.total_seconds() * 1000, 0.0))
    return out


__all__ = ["ApprovalLookup", "ChainCursor", "candidate_signals", "handler_latencies_ms", "verify_chain_since"]
