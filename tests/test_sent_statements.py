"""Statements whose results nobody reads are sent, not waited for (`toolgate.store.tx.Tx.send`,
issue 31): on PostgreSQL they travel with the transaction's next answered statement or with its
COMMIT, and the audit events' INSERT goes with the COMMIT. None of that may loosen atomicity: a
sent statement that fails, or a COMMIT the server refuses, fails the whole unit of work with
`StoreError` and leaves neither the change nor its evidence. The same holds on SQLite, where
sending is executing."""

from __future__ import annotations

from typing import Any

import pytest
from support import TEST_KEY, wire_round_trips

from toolgate.errors import StoreError
from toolgate.store import AuditEventIn, PostgresStore, Store
from toolgate.store.chain import verify_chain

_LEASE = "INSERT INTO resource_leases (resource_key, holder, acquired_at, expires_at) VALUES (?, ?, ?, ?)"


def _lease(key: str, holder: str = "w1") -> tuple[str, str, str, str]:
    return (key, holder, "2026-12-07T00:00:00.000000Z", "2026-12-07T01:00:00.000000Z")


def _event(name: str, **fields: Any) -> AuditEventIn:
    return AuditEventIn(event=name, result="recorded", **fields)


def _leases(store: Store) -> list[str]:
    with store.transaction(write=False) as tx:
        return [
            str(r["resource_key"]) for r in tx.execute("SELECT resource_key FROM resource_leases ORDER BY 1")
        ]


def _named(store: Store, name: str) -> list[str]:
    return [e.event for e in store.audit.events() if e.event == name]


def test_sent_statements_run_in_order_and_commit_with_the_change_they_belong_to(store: Store) -> None:
    awkward = 'o\'brien \\ "quoted" ; DROP TABLE resource_leases; -- é 🙂'
    with store.transaction() as tx:
        tx.send(_LEASE, _lease("r-1"))
        tx.send(_LEASE, _lease(awkward, holder="w'2"))
        seen = tx.execute("SELECT resource_key, holder FROM resource_leases ORDER BY resource_key")
        tx.send("UPDATE resource_leases SET holder = ? WHERE resource_key = ?", ("w3", "r-1"))
        linked = store.audit.link(tx, [_event("sent.linked"), _event("sent.linked")])
        tx.send("DELETE FROM resource_leases WHERE resource_key = ?", ("r-1",))  # goes with the COMMIT
    assert seen == [{"resource_key": awkward, "holder": "w'2"}, {"resource_key": "r-1", "holder": "w1"}]
    assert _leases(store) == [awkward]  # bound on the client, the text arrived byte for byte
    stored = store.audit.events()[-2:]
    assert [(e.seq, e.hash, e.event_id) for e in linked] == [(e.seq, e.hash, e.event_id) for e in stored]
    assert stored[0].seq < stored[1].seq and stored[1].prev_hash == stored[0].hash
    assert verify_chain(store).ok


def test_a_sent_statement_that_fails_fails_its_transaction_and_leaves_no_row_and_no_event(
    store: Store,
) -> None:
    with store.transaction() as tx:
        tx.execute(_LEASE, _lease("r-held"))
    with pytest.raises(StoreError, match=r"(?i)unique|duplicate"), store.transaction() as tx:
        tx.send(_LEASE, _lease("r-new"))
        tx.send(_LEASE, _lease("r-held"))  # refused by the primary key, found out with what follows
        store.audit.link(tx, [_event("sent.refused")])
    with pytest.raises(StoreError, match=r"(?i)unique|duplicate"), store.transaction() as tx:
        tx.send(_LEASE, _lease("r-new"))
        store.audit.link(tx, [_event("sent.refused")])
        tx.send(_LEASE, _lease("r-held"))  # refused with the COMMIT it travels with
    assert _leases(store) == ["r-held"]
    assert _named(store, "sent.refused") == []
    appended = store.audit.append(_event("sent.after"))  # the chain and the connections go on
    assert appended.seq > 0 and verify_chain(store).ok


def test_a_commit_the_database_refuses_raises_store_error_and_leaves_nothing(store: Store) -> None:
    with store.transaction() as tx:
        tx.execute(
            "CREATE TABLE commit_probe (id INTEGER PRIMARY KEY,"
            " parent INTEGER REFERENCES commit_probe (id) DEFERRABLE INITIALLY DEFERRED)"
        )
    with pytest.raises(StoreError, match=r"(?i)foreign key"), store.transaction() as tx:
        tx.execute("INSERT INTO commit_probe (id, parent) VALUES (?, ?)", (1, 99))  # checked at COMMIT
        tx.send(_LEASE, _lease("r-with-it"))
        store.audit.link(tx, [_event("commit.refused")])
    with store.transaction(write=False) as tx:
        assert tx.execute("SELECT id FROM commit_probe") == []
    assert _leases(store) == [] and _named(store, "commit.refused") == []
    store.audit.append(_event("commit.after"))
    assert verify_chain(store).ok


@pytest.mark.postgres
def test_sent_statements_cost_no_round_trip_and_events_go_with_the_commit(pg_migrated_url: str) -> None:
    store = PostgresStore(pg_migrated_url, key=TEST_KEY, min_size=1, max_size=1)
    try:
        store.audit.append(_event("warm"))  # the pool's one connection is open
        with wire_round_trips() as wire:
            with store.transaction() as tx:
                for n in range(3):
                    tx.send(_LEASE, _lease(f"r-{n}"))
                rows = tx.execute("SELECT count(*) AS n FROM resource_leases")  # BEGIN, the three: 1
            # and COMMIT: 1 (3 before issue 31's lazy BEGIN: BEGIN with the clock was a round trip)
            assert rows == [{"n": 3}] and wire["round_trips"] == 2
            wire["round_trips"] = 0
            store.audit.append(_event("one", operation_key="op-missing", proposal_id="prop-missing"))
            assert wire["round_trips"] == 2  # BEGIN, lock, head, tenants and numbers; INSERT with COMMIT
            wire["round_trips"] = 0
            with store.transaction() as tx:
                tx.send(_LEASE, _lease("r-9"))
                store.audit.link(tx, [_event("two"), _event("three")])
            assert wire["round_trips"] == 2  # the lease went with the chain head (3 before)
        assert _leases(store) == ["r-0", "r-1", "r-2", "r-9"]
        assert verify_chain(store).ok
    finally:
        store.close()


@pytest.mark.postgres
def test_a_chain_head_wrapper_that_answers_itself_still_links_a_verifiable_chain(
    pg_migrated_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # linking on PostgreSQL reads its chain head in a script of its own (`_locked_head`), never
    # through the `_chain_head` attribute: a wrapper there (a test double, a case clock, a
    # benchmark's timer, as bench/throughput.py had before it sampled `pg_locks`) neither changes
    # how events are linked nor is needed for it
    store = PostgresStore(pg_migrated_url, key=TEST_KEY, min_size=1, max_size=1)
    try:
        first = store.audit.append(_event("before"))
        calls = 0

        def own_head(tx: Any) -> tuple[str, str]:  # as a test double or a case clock would
            nonlocal calls
            calls += 1
            tx.execute("SELECT pg_advisory_xact_lock(?)", (0x7467_0001,))
            row = tx.one("SELECT hash FROM audit_events ORDER BY seq DESC LIMIT 1")
            return store._tx_now(tx), str(row["hash"])

        monkeypatch.setattr(store, "_chain_head", own_head)
        wrapped = store.audit.append_many([_event("wrapped", tenant_id="t-1"), _event("wrapped")])
        monkeypatch.undo()
        last = store.audit.append(_event("after"))
        assert calls == 0  # linking took the chain's lock and head in its own script
        assert first.seq < wrapped[0].seq < wrapped[1].seq < last.seq  # reserved under the lock
        assert [e.tenant_id for e in wrapped] == ["t-1", None]
        assert [e.seq for e in store.audit.events()[-3:-1]] == [e.seq for e in wrapped]
        assert verify_chain(store).ok
    finally:
        store.close()
