"""Evidence: the hash chain detects tampering done with raw SQL on both backends, traces are
complete, and planted secrets never reach the audit log, the checkpoints or the model."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.types import Command
from support import REFUND_REQUEST, Harness, principal, start

from toolgate.errors import StoreError
from toolgate.forensics import trace
from toolgate.graph.review.decisions import decide
from toolgate.store import AuditEventIn, PostgresStore, Store, open_checkpointer
from toolgate.store.chain import verify_chain
from toolgate.testing import ScriptedChatModel, ai, tool_call

TAMPERING = ["modify", "delete", "reorder", "forge"]


def bypass_guards(store: Store) -> None:
    """What an attacker with database access does first: switch off the append-only triggers."""
    with store.transaction() as tx:
        if isinstance(store, PostgresStore):
            tx.execute("ALTER TABLE audit_events DISABLE TRIGGER USER")
        else:
            tx.execute("DROP TRIGGER audit_no_update")
            tx.execute("DROP TRIGGER audit_no_delete")


@pytest.mark.parametrize("attack", TAMPERING)
def test_raw_sql_tampering_is_detected_and_the_first_bad_event_named(store: Store, attack: str) -> None:
    for n in range(6):
        store.audit.append(
            AuditEventIn(event="call.accepted", result="allowed", call_id=f"c{n}", detail={"n": n})
        )
    assert verify_chain(store).ok
    with pytest.raises(StoreError, match=r"append-only|immutable"), store.transaction() as tx:
        tx.execute(
            "UPDATE audit_events SET result = 'rejected' WHERE seq = 3"
        )  # the application role is refused
    bypass_guards(store)
    events = store.audit.events()
    with store.transaction() as tx:
        if attack == "modify":
            tx.execute("UPDATE audit_events SET result = 'rejected' WHERE seq = ?", (events[2].seq,))
            expected = events[2].seq
        elif attack == "delete":
            tx.execute("DELETE FROM audit_events WHERE seq = ?", (events[2].seq,))
            expected = events[3].seq
        elif attack == "reorder":
            a, b = events[2], events[3]
            for target, source in ((a, b), (b, a)):
                tx.execute(
                    "UPDATE audit_events SET event_id = ?, call_id = ?, occurred_at = ?, prev_hash = ?, hash = ?,"
                    " detail_sha256 = ? WHERE seq = ?",
                    (
                        source.event_id + "-x",
                        source.call_id,
                        source.occurred_at,
                        source.prev_hash,
                        source.hash,
                        source.detail_sha256,
                        target.seq,
                    ),
                )
            expected = a.seq
        else:
            last = events[-1]
            tx.execute(
                "INSERT INTO audit_events (event_id, occurred_at, event, result, detail, detail_sha256, prev_hash,"
                " hash) VALUES (?, ?, 'approval.recorded', 'approve', '{}', ?, ?, ?)",
                ("evt_forged", last.occurred_at, last.detail_sha256, last.hash, "f" * 64),
            )
            expected = None
    report = verify_chain(store)
    assert not report.ok
    if expected is not None:
        assert report.first_bad_seq == expected
    else:
        assert report.first_bad_event_id == "evt_forged"


def test_the_refund_trace_is_complete_and_a_refused_attempt_shows_its_code(harness: Harness) -> None:
    model = ScriptedChatModel(
        responses=[
            ai(
                "",
                tool_call(
                    "issue_refund", {"order_id": "O-5512", "amount_cents": 4999, "reason": "damaged"}, "c1"
                ),
            ),
            ai("done"),
            ai("", tool_call("lookup_order", {"order_id": "O-7001"}, "c2")),
            ai("not yours"),
        ]
    )
    graph = harness.graph(model)
    first = start(graph, REFUND_REQUEST, "cust-ada", "t-ev")
    facts = first["__interrupt__"][0].value["toolgate"]["proposals"][0]
    decide(harness.gateway(), facts["proposal_id"], principal("fiona"), "approve")
    graph.invoke(Command(resume={"wake": True}), {"configurable": {"thread_id": "t-ev"}})
    start(graph, "refund O-7001", "cust-ada", "t-ev-2")
    auditor = harness.gateway().auditor
    report = trace(harness.store, auditor, operation_key=facts["operation_key"])
    assert report.missing == [] and report.approver == "verified" and report.tamper_check == "PASS"
    assert report.summary().startswith("events_for_operation=")
    assert "missing_transitions=0 release_ids=present approver=verified raw_secrets=0 tamper_check=PASS" in (
        report.summary()
    )
    refused = trace(harness.store, auditor, call_id="c2")
    assert [(e.event, e.code) for e in refused.events][-1] == ("call.rejected", "cross_tenant")
    assert refused.final == "refused" and refused.missing == []


def checkpoint_bytes(pg_url: str | None, data_dir: Path) -> bytes:
    """Everything the checkpointer stored: the SQLite files, or every checkpoint table in PostgreSQL."""
    if pg_url is None:
        files = [data_dir / "checkpoints.sqlite", data_dir / "checkpoints.sqlite-wal"]
        return b"".join(f.read_bytes() for f in files if f.exists())
    import psycopg

    chunks: list[bytes] = []
    with psycopg.connect(pg_url) as conn:
        for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
            for row in conn.execute(f"SELECT * FROM {table}"):
                for value in row:
                    chunks.append(
                        bytes(value) if isinstance(value, bytes | memoryview) else str(value).encode()
                    )
    return b"".join(chunks)


def test_planted_secrets_reach_no_audit_row_checkpoint_or_model_message(
    harness: Harness, tmp_path: Path
) -> None:
    api_key = "sk-live-PLANTEDabcdefghijklmnopqrstuv"
    password = "hunter2-PLANTED"
    card = "4111111111111111"  # O-5512's card number in the system of record
    with harness.store.transaction() as tx:
        tx.execute(
            "INSERT INTO sor_orders (order_id, tenant_id, customer_id, item, amount_cents, currency, status,"
            " card_number) VALUES ('O-5515', 'acme', 'cust-ada', ?, 500, 'USD', 'delivered', ?)",
            (f"Mixer (support note: use api key {api_key})", card),
        )
    model = ScriptedChatModel(
        responses=[
            ai(
                "",
                tool_call("lookup_order", {"order_id": "O-5515"}, "c1"),
                tool_call("lookup_order", {"order_id": "O-5512"}, "c2"),
            ),
            ai(
                f"Restarting; my password: {password}",
                tool_call(
                    "restart_service", {"service_alias": "web", "reason": f"password={password} pls"}, "c3"
                ),
            ),
            ai("done"),
        ]
    )
    pg_url = harness.store._conninfo if isinstance(harness.store, PostgresStore) else None
    with open_checkpointer(pg_url, tmp_path) as saver:  # the backend's own checkpointer
        state = start(harness.graph(model, saver), "order status and restart", "sam", "t-secrets")
    # the restart carried a password: refused at dispatch (never rewritten, never proposed)
    assert "__interrupt__" not in state and state["calls"]["c3"]["code"] == "secret_in_arguments"

    planted = [api_key, password, card]
    model_bound = []
    for request in model.requests:
        for message in request.messages:
            model_bound.append(str(message.content))
            if isinstance(message, AIMessage):
                model_bound.append(repr(message.tool_calls))
    assert not [s for s in planted if any(s in text for text in model_bound)]
    assert any(isinstance(m, ToolMessage) for r in model.requests for m in r.messages)
    with harness.store.transaction(write=False) as tx:
        audit_rows = repr(tx.execute("SELECT * FROM audit_events")) + repr(
            tx.execute("SELECT * FROM audit_payloads")
        )
        proposals = repr(tx.execute("SELECT arguments FROM proposals"))
    assert not [s for s in planted if s in audit_rows]
    assert password not in proposals
    raw = checkpoint_bytes(pg_url, tmp_path)
    assert b"Mixer" in raw and b"REDACTED" in raw  # the scan sees the stored messages
    assert not [s for s in planted if s.encode() in raw]


PAYLOAD_REWRITES = {
    # each parses to the payload the chain's digest covers, or to nothing at all
    "key order": '{"n":2,"a":"x"}',
    "number form": '{"a":"x","n":2.0}',
    "duplicate key": '{"a":"x","n":99,"n":2}',
    "whitespace": '{"a": "x", "n": 2}',
    "not JSON": "{'a': 'x', 'n': 2}",
    "NaN": '{"a":"x","n":NaN}',
    "not an object": '["x", 2]',
}


@pytest.mark.parametrize("rewrite", PAYLOAD_REWRITES)
def test_a_payload_rewritten_in_any_way_fails_verify_and_leaves_the_log_readable(
    store: Store, rewrite: str
) -> None:
    """The payload table is the text the chain's digest covers, byte for byte: a rewrite that
    reads back as the same detail (another key order, number form, a duplicate key a first-wins
    reader sees instead) is tampering all the same, and one that does not parse is named too,
    without breaking verify or any reader of the log."""
    stored = [
        store.audit.append(AuditEventIn(event="call.accepted", result="allowed", detail={"a": "x", "n": n}))
        for n in range(4)
    ]
    assert verify_chain(store).ok
    with store.transaction() as tx:
        tx.execute(
            "UPDATE audit_payloads SET detail = ? WHERE event_id = ?",
            (PAYLOAD_REWRITES[rewrite], stored[2].event_id),
        )
    report = verify_chain(store)
    assert (report.ok, report.first_bad_seq, report.events) == (False, stored[2].seq, 4)
    assert report.reason == "payload does not match the digest in the chain (modified)"
    assert [e.seq for e in store.audit.events()] == [e.seq for e in stored]


def test_a_tail_cut_off_fails_verify_against_the_head_recorded_earlier(store: Store) -> None:
    """Removing the newest events leaves a chain whose every link holds: no walk of the database
    alone can tell. The head a verify reported (sequence and hash, kept by the operator outside
    the database) is what shows it: verify given that head fails when its event is gone or
    differs, and passes while the chain still holds it, however much was appended since."""
    stored = [
        store.audit.append(AuditEventIn(event="call.accepted", result="allowed", call_id=f"c{n}"))
        for n in range(6)
    ]
    report = verify_chain(store)
    assert report.ok and (report.head_seq, report.head_hash) == (stored[-1].seq, stored[-1].hash)
    head = (report.head_seq, report.head_hash)
    store.audit.append(AuditEventIn(event="call.accepted", result="allowed", call_id="later"))
    assert verify_chain(store, expect_head=head).ok
    assert verify_chain(store, expect_head=(0, "0" * 64)).ok  # the empty chain's head: nothing to miss
    bypass_guards(store)
    with store.transaction() as tx:  # the newest events (the recorded head among them) cut off
        tx.execute("DELETE FROM audit_events WHERE seq >= ?", (stored[4].seq,))
    assert verify_chain(store).ok  # the rest still links
    cut = verify_chain(store, expect_head=head)
    assert (cut.ok, cut.first_bad_seq, cut.first_bad_event_id) == (False, stored[-1].seq, None)
    assert cut.reason == "the head recorded earlier is gone (events at the chain's end were removed)"
    store.audit.append(AuditEventIn(event="call.accepted", result="allowed", call_id="after the cut"))
    again = verify_chain(store, expect_head=head)  # appending after the cut hides nothing
    assert (again.ok, again.first_bad_seq) == (False, stored[-1].seq)
    forged = verify_chain(store, expect_head=(stored[2].seq, "f" * 64))
    assert (forged.ok, forged.first_bad_seq, forged.first_bad_event_id) == (
        False,
        stored[2].seq,
        stored[2].event_id,
    )
    assert forged.reason == "differs from the head recorded earlier (the chain was rewritten)"
