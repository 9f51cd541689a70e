"""One approved write costs a pinned number of PostgreSQL round trips (issue 31: the write path
toward its floor). Counted, not timed, while one refund is proposed, approved by fiona, resumed,
claimed, run and answered, on a warm process (its first write already delivered, as a server's
would be). A change that adds a round trip to the write path fails here and must say why in its
commit; one that removes some lowers the pinned figure.

What counts as a round trip: the client waiting for the server's answer, counted by
`support.wire_round_trips` (one ``psycopg`` ``Connection.wait`` that had to wait for the server's
answer: a statement, a multi-statement script however many statements it carries, a BEGIN or
COMMIT of ``Connection.transaction()`` as the system of record uses, a pipeline behind its sync). Statements the store queues
(`toolgate.store.tx.Tx.send`) travel with the next answered statement or the COMMIT and count with
it. Counting ``Cursor.execute`` calls instead (as this test did up to 78) missed the system of
record's BEGIN/COMMIT and could not see statements queued to travel with a later one."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from support import (
    REFUND_REQUEST,
    TEST_KEY,
    Harness,
    answer_waits,
    audit_events,
    principal,
    start,
    wire_round_trips,
)

from toolgate.graph.context import Context
from toolgate.graph.review.decisions import decide
from toolgate.store import PostgresStore
from toolgate.store import postgres as store_postgres
from toolgate.store.audit_records import AuditEventIn
from toolgate.store.chain import verify_chain
from toolgate.testing import ScriptedChatModel, ai, tool_call

pytestmark = pytest.mark.postgres

ROUND_TRIPS_PER_APPROVED_WRITE = 29
"""Counted on the wire (waits on the server's answer), the refund's own system-of-record statements
included. Before issue 31's second pass: 86 (the proposal read 7 times, the clock 9 times, 9 write
transactions: the resource leases released in a transaction of their own); 78 after it, counted as
``Cursor.execute`` calls, which is 90 counted as waits (the system of record's six transactions'
BEGIN and COMMIT). Third pass, store layer: 90 -> 79 (the outcome's lease release sent with its
transaction's chain head; each audited transaction's events' INSERT sent with its COMMIT and their
tenants read with the chain head). Third pass, write path: 79 -> 71 (deliver re-read the operation
and the clock the execute node had just read, the approval node the proposal the proposal node had
just stored; the proposal node and `decide` read the clock only to stamp what their write
transaction wrote; the resource lease was a transaction of its own before the claim; the reviewer's
and the requester's identities were two reads before the claim). Third pass, rate limits: 71 -> 67
when the rate limiter leased shares of its windows: its own write transaction per call is gone on a
warm process (BEGIN with the clock, the counters, COMMIT; and the shared breaker's row is not read
again until a change notice names it). The process's change-notice listener is connected before the
warm-up write: when it connects, every cached reading is read once more, which is part of warming
up, not of a write (counted here while the listener still connected, this figure was 67 or 69 by
chance). Guard snapshots: 67 -> 62 when `decide` read what it judges in one statement
(`toolgate.store.snapshots`: the proposal, its operation, the reviewer's identity, the superseding
proposal and the decisions were five reads) and the delivery the decisions with the reviewers' and
the requester's identities (two reads); 62 -> 61 when the approval node read the listing of
identical writes only when it pauses, never again on the resume that throws its payload away. Lazy
BEGIN: 61 -> 59 (a write transaction sends BEGIN in front of its first answered statement, its
chain-head script or its COMMIT instead of in a round trip of its own with a clock read: the
model's two turns, whose only answered script is the chain head's; the four others ask for their
time before their first statement, so BEGIN travels with that reading, as before). Calibrated
clock: 59 -> 56 (the model node's two turns and dispatch judge the task's deadline and deprecation
windows by `Store.calibrated_now`, the store's last reading of its clock plus monotonic time since,
instead of a standalone clock read each; the execute node still reads the clock, its expiry
judgment writes). Their reading is the previous transaction's, milliseconds old here; it is read
anew only when older than `CLOCK_REUSE_S` (5 s; an hour while this write is counted). The
console's warnings in the approval interrupt: 56 -> 59, on purpose (a reviewer answering in a chat
UI was not warned that a refund exceeds what remains of the order): the pause runs the tool's
semantic check (4, the demo order read in a transaction of the system of record) and reads the
other proposals of the same resource (3), while the resume no longer runs the review lookup for
a payload it throws away (-4). Folded scripts: 59 -> 56 (the proposal's two INSERTs, the
decision's INSERT with its settlement and the claim's UPDATE with its resource lease each travel
as one `Tx.many` script: proposal, decision and claim 5 -> 4 round trips each). Chain head behind
the statements: 56 -> 52 (proposal, decision, claim and outcome each send their statements, the
chain's lock and its head read as one script, `AuditLog.link_behind`: 4 -> 3 round trips each,
BEGIN with the clock, that script, the events with the COMMIT; the lock is still held across two
round trips, and taken only when the step wrote what its events record). Model turn folded:
52 -> 50 (the turn that proposes the refund no longer appends its ``model.response`` in a
transaction of its own, BEGIN with its chain head and the COMMIT: the event is linked first in
the proposal's transaction, its already-linked check read with that transaction's chain head,
`toolgate.graph.nodes.response_audit`). Execute reads: 50 -> 49 when the execute node read each
write's operation and the store's time in one statement (`Operations.get_at`; the clock was a
round trip of its own after the operation read). 49 -> 48 when the final answer stopped reading
again the operation whose outcome's transaction had returned it ``succeeded``, a status the
database lets no operation leave (`FINAL_STATUSES`). 48 -> 47 when the proposal's transaction
read the chain head first, with BEGIN and the time its rows carry (its rows are new: nothing of
them is read before its events are linked), and sent its INSERTs, its rows as stored, the
events behind the chain's lock and the COMMIT as one script (`AuditLog.link_ahead`): 3 -> 2
round trips. Unchanged by the chain's lock moving into the COMMIT's script of each step (the
same three round trips for the decision, the claim and the outcome); a step whose head moved
before its COMMIT takes one more (two with a keyed event), which this single write never meets.
The approval pause's listings, seventh pass: 47 -> 45 when a listing of proposals read each with
its operation in one statement (`Proposals.for_tool` had read the ids, then the rows, then their
operations; `Proposals.same_effect` the rows, then their operations when there were any);
45 -> 44 when the pause read both of its listings, the live proposals on the same resource and
the identical writes of the task, in one statement (`Proposals.beside`).
44 -> 43 when the outcome's transaction read the chain head and its events' tenant with BEGIN and
its time (`AuditLog.head_first`: the events need nothing the change returns) and sent the change,
the leases given up behind it, the events behind the chain's lock and the COMMIT as one script
(`AuditLog.link_ahead`): 3 -> 2 round trips.
43 -> 42 when the decision's transaction did the same (its events and its settlement's name rows
that exist; the settlement runs only behind a decision this transaction stored, so the one script
commits nothing to roll back): 3 -> 2.
42 -> 41 when the claim did the same: its leases are taken only behind a claim this transaction
made, and a check in the script fails it whole when one was busy (`ResourcesBusy`, as the client's
judgment of their answers did before it committed): 3 -> 2.
41 -> 40 when the final answer's ``model.response``, appended alone, was linked after the chain's
head this process saw right after its last linking COMMIT (read in that COMMIT's own script) at the
store's calibrated time, both checked under the chain's lock in its one script
(`AuditLog.append_ahead`): 2 -> 1.
40 -> 39 when the outcome did the same (`Operations.transition` given the tenants the claim and the
stored proposal hold): its time is the server's clock in its UPDATE's own SQL, its events linked
after the head seen after the claim's COMMIT at the calibrated time: 2 -> 1; with a test's clock in
front of the server's (`_clock_sql` None) it still reads the time first.
39 -> 38 when the claim did the same (`Operations.claim` given the tenants the operation and its
stored proposal hold): the expiry, its lease and its resource leases judged and stamped by the
server's clock in the script's own SQL (`statement_timestamp`, one instant for every statement of
it), its events linked after the head last seen at the calibrated time: 2 -> 1; with a test's clock
in front of the server's it still reads the time first.
38 -> 33 when the system of record's read units of work opened with ``BEGIN READ ONLY`` (one round
trip) instead of ``BEGIN`` and ``SET TRANSACTION READ ONLY`` (two): five such reads per write.
38 -> 32 when the two ownership lookups of the refund's order (dispatch's and the claim's) each
read it with `ServiceRecords.read`, BEGIN READ ONLY, the SELECT and COMMIT sent as one pipeline
and answered behind its one sync: 4 -> 1 each (counted as the client waiting for an answer, a
pipeline's queued statements waiting for none, `support.answer_waits`).
29 with both (the three read units of work left open with BEGIN READ ONLY, the two lookups in
their pipelines)."""
WRITE_TRANSACTIONS_PER_APPROVED_WRITE = 5
"""Every ``BEGIN`` the write sends (the model's final turn, proposal, decision, claim with the
resource lease taken in its transaction, outcome with the lease given up). 8 before issue 31's
third pass (the lease taken in a transaction of its own, the rate limiter's counters in another
per call). Still 6 with lazy BEGIN: each of them still sends one, in front of its first script.
5 since the model turn that proposes the write links its ``model.response`` in the proposal's
transaction instead of its own."""

STORE_ROUND_TRIPS_PER_READ_CALL = 2
"""The store's own round trips of one read call (its system of record's are not counted here:
the demo's lookups and handler are loaded code's, on connections of the service's role): the
read's ``call.accepted`` and ``call.completed`` with the turn's ``model.response``, then the
final answer's ``model.response``, each one write transaction. 3 -> 2 when the read's events,
like the final answer's, were linked after the chain's head this process last saw, checked under
the lock in the COMMIT's script (`AuditLog.append_ahead`), where its chain head was read under
the lock in a round trip of its own first."""
READ_QUESTION = "Where is my order O-5512?"


RATE_WINDOW_S = 60
"""The demo policy's rate-limit windows: a share taken in one is spent until it ends."""
WINDOW_LEFT_S = 20


def _rate_window_with_time_left(store: PostgresStore) -> None:
    """Wait until at least `WINDOW_LEFT_S` of the current rate-limit window is left on the store's
    clock (at most the window's last 20 s): the shares the warm-up write takes then last through
    the counted write (two writes take a few seconds even at load 8), which never refills them in
    a transaction of its own at a window's end by chance."""
    while (into := store.now().timestamp() % RATE_WINDOW_S) > RATE_WINDOW_S - WINDOW_LEFT_S:
        time.sleep(min(1.0, RATE_WINDOW_S - into))


@pytest.fixture
def store(pg_migrated_url: str) -> Iterator[PostgresStore]:
    """A store on a migrated database, closed after the test."""
    store = PostgresStore(pg_migrated_url, key=TEST_KEY)
    try:
        yield store
    finally:
        store.close()


def _listening(store: PostgresStore) -> None:
    """The change-notice listener is up before anything is warmed, as on a server."""
    store.changes.start()
    connected_by = time.monotonic() + 60
    while not store.changes.live:  # a condition with a deadline, not a timing window
        assert time.monotonic() < connected_by, "the change-notice listener never connected"
        time.sleep(0.01)


def _refund(n: int) -> dict[str, Any]:
    return {"order_id": "O-5512", "amount_cents": 100 + n, "reason": "damaged"}


def test_one_approved_write_makes_the_pinned_number_of_round_trips(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = Harness(store)
    responses = []
    for n in range(2):
        responses += [ai("", tool_call("issue_refund", _refund(n), f"c{n}")), ai("Refunded.")]
    app = harness.app(ScriptedChatModel(responses=responses))
    graph = app.compiled(checkpointer=InMemorySaver())  # the saver's own work is not counted

    def approved_write(thread: str) -> dict[str, Any]:
        paused = start(graph, REFUND_REQUEST, "cust-ada", thread)
        proposal = paused["__interrupt__"][0].value["toolgate"]["proposals"][0]
        decide(app.gateway, proposal["proposal_id"], principal("fiona"), "approve")
        return graph.invoke(  # type: ignore[no-any-return]
            Command(resume={"wake": True}),
            {"configurable": {"thread_id": thread}},
            context=Context(principal=principal("fiona")),
        )

    _listening(store)
    _rate_window_with_time_left(store)
    approved_write("t-warm")  # the process's first write warms what a server keeps warm
    sent: Counter[str] = Counter()
    execute = psycopg.Cursor.execute

    def counted(self: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        # the store's write transactions (a system of record's single read sends its BEGIN
        # READ ONLY as a statement too, on its service role's connection: not the store's)
        store_side = not str(self.connection.info.user).startswith("tg_sor_")
        sent["begins"] += store_side and str(query).startswith("BEGIN")
        return execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", counted)
    # a loaded machine may pause a step for seconds: the calibrated clock's reading is then
    # read anew, by chance; how long a reading serves is not what this counts
    monkeypatch.setattr(store_postgres, "CLOCK_REUSE_S", 3600.0)
    with wire_round_trips() as wire:
        final = approved_write("t-counted")
    monkeypatch.undo()
    sent["round_trips"] = wire["round_trips"]

    assert harness.handler_calls["issue_refund"] == 2  # both writes ran, once each
    assert final["outcomes"]["c1"]["status"] == "completed"
    assert sent["begins"] == WRITE_TRANSACTIONS_PER_APPROVED_WRITE
    assert sent["round_trips"] == ROUND_TRIPS_PER_APPROVED_WRITE, sent


def _read_calls(harness: Harness, count: int) -> Any:
    responses = []
    for n in range(count):
        responses += [ai("", tool_call("lookup_order", {"order_id": "O-5512"}, f"r{n}")), ai("Here it is.")]
    return harness.app(ScriptedChatModel(responses=responses)).compiled(checkpointer=InMemorySaver())


def _store_round_trips(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """The store's round trips (``store``), the system of record's (``records``, on the service
    role's connections) and the test harness's (``harness``: its hidden-write digests, on the
    handler's thread, where no gateway code uses the store), counted as
    `support.wire_round_trips` counts them."""
    counts: Counter[str] = Counter()
    wait = psycopg.Connection.wait

    def counted_wait(self: psycopg.Connection[Any], gen: Any, *args: Any, **kwargs: Any) -> Any:
        if str(self.info.user).startswith("tg_sor_"):
            side = "records"
        else:
            side = "harness" if threading.current_thread().name == "toolgate-handler" else "store"
        return wait(self, answer_waits(gen, lambda: counts.update([side])), *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "wait", counted_wait)
    monkeypatch.setattr(store_postgres, "CLOCK_REUSE_S", 3600.0)  # as the approved write's count
    return counts


def test_one_read_call_makes_the_pinned_number_of_store_round_trips(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = Harness(store)
    graph = _read_calls(harness, 2)
    _listening(store)
    _rate_window_with_time_left(store)
    start(graph, READ_QUESTION, "cust-ada", "t-warm")  # warms what a server keeps warm
    counts = _store_round_trips(monkeypatch)
    final = start(graph, READ_QUESTION, "cust-ada", "t-counted")
    monkeypatch.undo()

    assert harness.handler_calls["lookup_order"] == 2
    assert final["outcomes"]["r1"]["status"] == "completed"
    assert counts["records"] > 0  # the system of record was read, on its own connections
    assert counts["store"] == STORE_ROUND_TRIPS_PER_READ_CALL, counts
    assert [e.event for e in store.audit.events()].count("call.completed") == 2
    assert len(audit_events(store, "model.response")) == 4
    assert verify_chain(store).ok and store.relinked == 0


def test_a_read_calls_events_follow_a_chain_head_another_process_moved_and_are_linked_once(
    pg_migrated_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the head this process saw last is stale when the read's events go (another process linked
    # since): the COMMIT's check refuses it, and they are linked again after the head it found,
    # each once, in the same transaction as the turn's model.response
    store = PostgresStore(pg_migrated_url, key=TEST_KEY)
    other = PostgresStore(pg_migrated_url, key=TEST_KEY, min_size=1, max_size=1)
    try:
        harness = Harness(store)
        graph = _read_calls(harness, 2)
        _listening(store)
        _rate_window_with_time_left(store)
        start(graph, READ_QUESTION, "cust-ada", "t-warm")
        other.audit.append(AuditEventIn(event="elsewhere", result="recorded"))
        monkeypatch.setattr(store_postgres, "CLOCK_REUSE_S", 3600.0)  # the guess is made, and misses
        final = start(graph, READ_QUESTION, "cust-ada", "t-counted")
        monkeypatch.undo()

        assert final["outcomes"]["r1"]["status"] == "completed"
        assert store.relinked == 1  # the read's events, once: later steps read the head behind them
        names = [e.event for e in store.audit.events()]
        at = names.index("elsewhere")
        assert names[at + 1 :] == ["model.response", "call.accepted", "call.completed", "model.response"]
        assert len({e.event_id for e in store.audit.events()}) == len(names)
        assert verify_chain(store).ok
    finally:
        other.close()
        store.close()
