"""The production backend: PostgreSQL through a psycopg connection pool.

The pool opens lazily on first use, so building a graph (for example in the LangGraph server
entry module) never connects at import time. Audit appends and migrations serialize on
transaction-scoped advisory locks, so many processes and hosts can share one database.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from functools import cached_property, lru_cache
from typing import Any

import psycopg
from psycopg import abc as pg_abc
from psycopg.adapt import Transformer
from psycopg.pq import ExecStatus, TransactionStatus
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from toolgate.clock import iso, parse_iso
from toolgate.errors import StoreError
from toolgate.store.audit_records import GENESIS_HASH
from toolgate.store.base import CLOCK_REUSE_S, Store, Tx
from toolgate.store.changes import Changes, PostgresChanges
from toolgate.store.handler_access import refuse_store
from toolgate.store.keys import Keyring
from toolgate.store.leases import ResourcesBusy
from toolgate.store.migrations import Migration
from toolgate.store.tx import LinkHead, Relink, WhenWritten, Written

NOW_SQL = "to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
"""The server's clock as `toolgate.clock.iso` text: every time decision uses it, never a worker's."""
CONTENTION_PAUSE = 8
"""Linking steps after a relink (a chain head that had moved by the COMMIT) that read the head
behind their statements (`_link_behind`): no guessed head (`_head_guess`) and no head read with
BEGIN (`_head_first`). Where processes link into one chain together, a head read that late goes
stale less often, and a stale one is a relink, the chain's lock held across a client turn
(`bench/throughput.py --quick` at 8 workers, alternated twice: lock wait 12.8% and 13.1% without
the pause, 6.5% and 8.1% with it; relinks per operation 1.88 and 1.76 against 1.64 and 1.59). A
process that links alone never relinks, so it keeps the early heads (one round trip fewer per
step), and they come back once the steps stop relinking."""
POOL_WAIT_S = 10.0
"""How long a unit of work waits for a free connection before it fails with a message that says
so (psycopg's own 30 s wait, met twice by a worker, read as a hang)."""

_AUDIT_LOCK = 0x7467_0001
_MIGRATION_LOCK = 0x7467_0002
_HEAD_MOVED = "TG409"
"""The SQLSTATE of the check in a COMMIT's script that the chain's head is still the one its
events were linked after (`PostgresStore._link_tail`)."""
_TIME_AND_HEAD = (
    f"SELECT {NOW_SQL} AS now,"
    f" COALESCE((SELECT hash FROM audit_events ORDER BY seq DESC LIMIT 1), '{GENESIS_HASH}') AS hash"
)
"""The server's clock and the chain's head (the last event's hash), as every head read selects
them; a reading may add columns behind them."""
_HEAD_AFTER = _TIME_AND_HEAD
"""Read in autocommit right after the COMMIT of a transaction that linked audit events, in the
COMMIT's own script: the chain's head then (`PostgresStore._head_guess`) and the server's clock."""
_NOT_ALL_WRITTEN = "TG423"
"""The SQLSTATE of a script's check that it wrote every row it needed behind another
(`PostgresStore._all_written`): raised as `ResourcesBusy`."""
_LINK_SAVEPOINT = "toolgate_link"
_HASH = re.compile(r"[0-9a-f]{64}")
_ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")
_PLAIN_ID = re.compile(r"[A-Za-z0-9_.:-]{1,200}")


def redact_url(url: str) -> str:
    """The URL without its password, safe to print and log."""
    return re.sub(r"(//[^:/@]+):[^@]*@", r"\1:***@", url)


@lru_cache(maxsize=1024)
def _template(sql: str, encoding: str) -> tuple[bytes, int] | None:
    """``sql`` as a template for `_PgTx.bound` to put literals in (``%s`` at its ``?``, encoded),
    and how many it takes: the store's statements are few texts sent many times, and psycopg
    splits a statement anew on each binding (it caches none over 4,096 bytes or 50 values, the
    audit INSERT's case). None for a text with a ``%``, which psycopg's own binding reads
    (``%%``) and `_PgTx.bound` leaves to it."""
    return None if "%" in sql else (sql.replace("?", "%s").encode(encoding), sql.count("?"))


class _PgTx:
    """One unit of work on an autocommit session. In a write transaction nothing reaches the
    server before the first statement whose answer is needed (or the chain-head script, or the
    COMMIT): ``BEGIN`` travels in front of it, so opening a transaction costs no round trip of
    its own, and a write transaction that never sent anything costs none at all. Statements sent
    with `send` wait in a queue and go to the server, bound on the client (`psycopg.ClientCursor`,
    the driver's own quoting), in front of the next statement whose answer is needed, as one
    multi-statement script: one round trip for all of them. A script stops at its first failing
    statement, and that failure is the answered statement's, so it fails the transaction as any
    statement would. A read (``write=False``) runs each statement on its own, in autocommit."""

    def __init__(
        self,
        cursor: psycopg.Cursor[dict[str, Any]],
        *,
        write: bool = False,
        clock_read: Callable[[str], None] = lambda now: None,
        relinked: Callable[[], None] = lambda: None,
        seen: Callable[[str], None] = lambda head: None,
    ) -> None:
        self._cursor = cursor
        self.write = write
        """A write transaction (opened lazily by its first script) rather than an autocommit read."""
        self._begun = not write  # an autocommit read session has no block to open
        self._now: str | None = None
        """The write transaction's one time, once someone asked for it or the chain head read it."""
        self._clock_read = clock_read
        """Told each time of the store's clock this unit of work reads (`PostgresStore.calibrated_now`)."""
        self._relinked = relinked
        """Told each time a tail's head had moved and its events were linked again (`commit`)."""
        self._seen = seen
        """Told the chain's head read right after a COMMIT that linked events (`_HEAD_AFTER`)."""
        self.linked = False
        """Linked audit events under the lock or in a tail: the COMMIT's script reads the head after it."""
        self._tail: tuple[Callable[[str], list[str]], Relink] | None = None
        """Audit events linked after an unlocked chain head, waiting for the COMMIT: the script
        that goes in front of it (lock, savepoint, head check, INSERT) under an SQL condition
        ("" for none), and how to link them again (`PostgresStore._link_tail`)."""
        self._done = False
        """Committed before its block ended (`PostgresStore._link_ahead`): nothing more to send."""
        self._queued: list[str] = []
        self.round_trips = 0
        """Statements and scripts this unit of work sent and waited for: its round trips (BEGIN and
        sent statements travel inside them; benchmarks read it)."""
        self._literals: pg_abc.Transformer | None = None

    def bound(self, sql: str, params: Sequence[Any]) -> str:
        """``sql`` with ``params`` bound on the client, ready to travel in a script: each value
        as the driver's own literal (`psycopg.adapt.Transformer.as_literal`, what
        `psycopg.ClientCursor.mogrify` puts in), in the statement's cached `_template`."""
        if not params:
            return sql
        if self._literals is None:
            self._literals = Transformer.from_context(self._cursor.connection)
        literals = self._literals
        template = _template(sql, literals.encoding)
        if template is None:  # psycopg's own binding, which reads the text's ``%``
            return psycopg.ClientCursor(self._cursor.connection).mogrify(sql.replace("?", "%s"), tuple(params))
        text, count = template
        if count != len(params):
            raise psycopg.ProgrammingError(
                f"the query has {count} placeholders but {len(params)} parameters were passed"
            )
        literal = literals.as_literal
        values = tuple([b"NULL" if value is None else literal(value) for value in params])
        return (text % values).decode(literals.encoding)

    def send(self, sql: str, params: Sequence[Any] = ()) -> None:
        if not self.write:  # an autocommit read session: each statement stands alone
            self.execute(sql, params)
            return
        self._queued.append(self.bound(sql, params))

    def _front(self) -> list[str]:
        """What must reach the server before the next statement: BEGIN, when the transaction is
        not open yet, then the queued statements (emptying the queue)."""
        front = ([] if self._begun else ["BEGIN"]) + self._queued
        self._begun, self._queued = True, []
        return front

    def _run(self, statements: Sequence[str]) -> list[list[dict[str, Any]]]:
        """One round trip: `_front` and ``statements`` as one script; the rows of each of its
        results, in order (none for a statement that returns no rows)."""
        if self._done:
            raise StoreError("this unit of work was committed already (`PostgresStore._link_ahead`)")
        self.round_trips += 1
        self._cursor.execute(";\n".join([*self._front(), *statements]))
        results = [self._rows()]
        while self._cursor.nextset():
            results.append(self._rows())
        return results

    def _rows(self) -> list[dict[str, Any]]:
        """The current result's rows (none for a statement that returns none). Judged by the
        result's status, not by ``description``, which builds a column object per column."""
        result = self._cursor.pgresult
        return list(self._cursor.fetchall()) if result is not None and result.status == ExecStatus.TUPLES_OK else []

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        if self._begun and not self._queued and not self._done:  # alone: bound by the server
            self.round_trips += 1
            self._cursor.execute(sql.replace("?", "%s") if params else sql, tuple(params) or None)
            return self._rows()
        return self._run([self.bound(sql, params)])[-1]

    def one(self, sql: str, params: Sequence[Any] = ()) -> dict[str, Any] | None:
        rows = self.execute(sql, params)
        return rows[0] if rows else None

    def many(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> list[list[dict[str, Any]]]:
        """Each statement's rows, in order, for one round trip: the statements (one each) travel
        as one script after whatever must go first (`_front`). In an autocommit read session the
        server runs such a script as one implicit transaction, so a failing statement leaves
        nothing of the others either; each statement still reads its own snapshot (READ
        COMMITTED)."""
        if not statements:
            return []
        return self._run([self.bound(sql, params) for sql, params in statements])[-len(statements) :]

    def last_of(self, script: str) -> dict[str, Any] | None:
        """Run a parameterless script of several statements (after what must go first) in one
        round trip (each statement takes its own snapshot); the first row of the last statement's
        result."""
        rows = self._run([script])[-1]
        return rows[0] if rows else None

    def now(self) -> str:
        """The store's time for this unit of work, read by the server. A write transaction reads
        it once: in the script that opens it when asked before any statement, with the chain head
        when that reads it first, else with whatever is queued; every later ask gets the same
        time. A read in autocommit reads it on each ask."""
        if self._now is not None:
            return self._now
        now = str(self._run([f"SELECT {NOW_SQL} AS now"])[-1][0]["now"])
        self.heard(now)
        return now

    def heard(self, now: str) -> None:
        """``now`` was read of the store's clock in this unit of work: a write transaction keeps
        the first such time as its own."""
        if self.write and self._now is None:
            self._now = now
        self._clock_read(now)

    def finish_with(self, tail: Callable[[str], list[str]], relink: Relink) -> None:
        """Send ``tail("")`` (the chain's lock, a savepoint, a check of the chain's head and the
        audit events' INSERT) in front of the COMMIT, after everything else the transaction
        sends; ``relink`` links the same events again should the check fail (`commit`) or
        another linking come first (`settle`)."""
        self.settle()
        self._tail = (tail, relink)
        self.linked = True

    def settle(self) -> None:
        """Link a waiting tail's events under the lock now (`finish_with`): before any other
        linking in this transaction, whose chain head must follow them. A round trip."""
        if self._tail is not None:
            _, relink = self._tail
            self._tail = None
            relink(None)

    def commit(self) -> None:
        """COMMIT, with what must go first in front of it: one round trip; none when the
        transaction never sent anything (there is nothing to commit), or committed already
        (`commit_with`). A tail (`finish_with`) goes right in front of the COMMIT."""
        if not self._done:
            self.commit_with([], [])

    def commit_with(
        self, statements: Sequence[str], rereads: Sequence[str], when: str = ""
    ) -> list[list[dict[str, Any]]]:
        """``statements``, the waiting tail (under the SQL condition ``when``, if any) and the
        COMMIT as one script; each statement's rows. When the tail's check finds the chain's
        head moved, the check's error names the head it found, under the lock the transaction
        still holds (it was taken before the savepoint): the next script rolls back to the
        savepoint, reads the statements' rows again (``rereads``: the script stopped before
        they came back) and commits the events linked after that head: one round trip more
        (two when the tail's ``relink`` must read the head again itself)."""
        tail, self._tail = self._tail, None
        if tail is None and not (self._begun or self._queued or statements):
            self._done = True
            return []  # nothing was sent: nothing to commit
        build, relink = tail if tail is not None else (lambda when: [], None)
        watch = [_HEAD_AFTER] if self.linked else []
        after = [*build(when), "COMMIT", *watch]
        try:
            results = self._run([*statements, *after])
            self._done = True
            self._saw(results[-1] if watch else [])
            return results[len(results) - len(after) - len(statements) : len(results) - len(after)]
        except psycopg.Error as exc:
            if relink is None or exc.sqlstate != _HEAD_MOVED or not exc.diag.message_detail:
                raise
            now, last_hash = exc.diag.message_detail.split(" ")
        self._queued = [f"ROLLBACK TO SAVEPOINT {_LINK_SAVEPOINT}"]  # what ran before it stays
        insert = relink((now, last_hash))
        if insert is not None:
            self._queued.append(self.bound(*insert))
        results = self._run([*rereads, "COMMIT", *watch])
        self._done = True
        self._saw(results[-1] if watch else [])
        self._relinked()  # after its own COMMIT: the pause counts the steps after it
        end = len(results) - 1 - len(watch)
        return results[end - len(rereads) : end]

    def _saw(self, rows: list[dict[str, Any]]) -> None:
        """The chain's head and the server's clock read right after the COMMIT (`_HEAD_AFTER`)."""
        if rows:
            self._clock_read(str(rows[0]["now"]))
            self._seen(str(rows[0]["hash"]))


def _write_block(
    cur: psycopg.Cursor[dict[str, Any]],
    clock_read: Callable[[str], None],
    relinked: Callable[[], None],
    seen: Callable[[str], None],
) -> Iterator[_PgTx]:
    """One write transaction on an autocommit session: BEGIN travels with its first answered
    statement (`_PgTx`), COMMIT with whatever the caller sent last (`_PgTx.send`: the audit
    events' INSERT among them) in one round trip. A failure anywhere, the COMMIT's own included
    (a deferred constraint, a serialization failure), raises; ROLLBACK follows whatever was
    raised, unless no transaction is open (nothing was sent yet, or a failed COMMIT ended it); a
    failed rollback leaves the connection to the pool, which discards or resets it."""
    tx = _PgTx(cur, write=True, clock_read=clock_read, relinked=relinked, seen=seen)
    try:
        yield tx
        tx.commit()
    except BaseException:
        if cur.connection.info.transaction_status != TransactionStatus.IDLE:  # open, or failed
            with contextlib.suppress(psycopg.Error):
                cur.execute("ROLLBACK")
        raise


def _written_sql(tx: _PgTx, row: Written) -> str:
    """SQL that holds when ``row`` was written by this transaction (its ``xmin``: exact, whatever
    the statements returned)."""
    return tx.bound(
        f"EXISTS (SELECT 1 FROM {row.table} WHERE {row.column} = ? AND xmin = pg_current_xact_id()::xid)",
        (row.key,),
    )


def _locked_head(tx: _PgTx, events: int, reads: Sequence[str]) -> LinkHead:
    """The chain's lock, then the store's time, the chain's last hash, ``events`` new sequence
    numbers and the one-value ``reads`` (bound SQL), in one round trip (the statements the
    transaction queued go first, so they run before the lock is taken; BEGIN before them when
    nothing opened the transaction yet). The time is the transaction's own when nothing asked for
    it before (`_PgTx.heard`). The read is a statement of its own after the lock statement: under
    READ COMMITTED it then sees the event the previous lock holder committed (a single
    statement's snapshot could predate the lock). The sequence numbers are reserved under the
    lock, so chain order and sequence order agree. A tail still waiting is linked first
    (`_PgTx.settle`)."""
    tx.settle()
    tx.linked = True
    extra = "".join(f", ({sql}) AS v{n}" for n, sql in enumerate(reads))
    if events:
        extra += (
            ", ARRAY(SELECT nextval(pg_get_serial_sequence('audit_events', 'seq'))"
            f" FROM generate_series(1, {int(events)})) AS seqs"
        )
    row = tx.last_of(
        f"SELECT pg_advisory_xact_lock({_AUDIT_LOCK}); {_TIME_AND_HEAD}" + extra
    )
    assert row is not None
    tx.heard(str(row["now"]))
    return LinkHead(
        str(row["now"]),
        str(row["hash"]),
        sorted(int(n) for n in row["seqs"]) if events else [],
        [row[f"v{n}"] for n in range(len(reads))],
    )


class PostgresStore(Store):
    """`Store` on PostgreSQL."""

    dialect = "postgres"

    def __init__(
        self,
        url: str,
        *,
        key: bytes,
        read_only: bool = False,
        min_size: int = 1,
        max_size: int = 10,
        wait_s: float = POOL_WAIT_S,
    ) -> None:
        self._conninfo = url
        self.url = redact_url(url)
        self.keys = Keyring(key)
        self.read_only = read_only
        self._min_size = min_size
        self._max_size = max_size
        self._wait_s = wait_s
        self._pool: ConnectionPool | None = None
        self._lock = threading.Lock()
        self._records_schema: str | None = None
        """The schema its tables live in, once asked (`store._records_postgres.store_schema`)."""
        self._clock_mark: tuple[float, datetime] | None = None
        """The last reading of the server's clock: ``(time.monotonic() when it arrived, the time)``."""
        self._contended = 0
        """Linking steps left that read the chain's head behind their statements
        (`CONTENTION_PAUSE`): set by a relink, counted down by each linking COMMIT after it."""
        self._head_seen: str | None = None
        """The chain's head as this process last saw it, right after a COMMIT that linked
        (`_HEAD_AFTER`): what the next lone append links after without reading it (`_head_guess`)."""
        self.relinked = 0
        """Audited steps of this store whose events were linked after an unlocked chain head that
        had moved by their COMMIT, and were linked again under the lock (`_link_tail`): how often
        a step paid the extra round trip of that (two with a keyed event; benchmarks read it)."""

    def _get_pool(self) -> ConnectionPool:
        with self._lock:
            if self._pool is None:
                # autocommit sessions: a read is one statement, no BEGIN/COMMIT round trips (under
                # READ COMMITTED each statement takes its own snapshot anyway); a write opens its
                # transaction block explicitly (`transaction`)
                kwargs: dict[str, Any] = {"row_factory": dict_row, "autocommit": True}
                if self.read_only:  # the server refuses every write in these sessions
                    kwargs["options"] = "-c default_transaction_read_only=on"
                self._pool = ConnectionPool(
                    self._conninfo,
                    min_size=self._min_size,
                    max_size=self._max_size,
                    kwargs=kwargs,
                    open=True,
                    timeout=self._wait_s,
                )
            return self._pool

    @contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[Tx]:
        refuse_store("transaction")  # never inside a handler call (`toolgate.store.handler_access`)
        if write and self.read_only:
            raise StoreError(f"the store {self.url} was opened read-only")
        self._ensure_ready()
        try:
            with self._get_pool().connection() as conn, conn.cursor(row_factory=dict_row) as cur:
                if write:
                    yield from _write_block(cur, self._clock_read, self._relinked, self._saw_head)
                else:
                    yield _PgTx(cur, clock_read=self._clock_read)
        except PoolTimeout as exc:
            raise StoreError(
                f"no PostgreSQL connection free after {self._wait_s:g} s: all {self._max_size} of this"
                " process's connections are busy, or the server accepts no more (max_connections);"
                " try again, or give the pool more room (fewer workers per process, a larger"
                " max_connections)"
            ) from exc
        except psycopg.Error as exc:
            if exc.sqlstate == _NOT_ALL_WRITTEN:  # rolled back: the check named what is missing
                raise ResourcesBusy(exc.diag.message_detail or "") from None
            raise StoreError(f"PostgreSQL store error: {exc}") from exc

    def _tx_now(self, tx: Tx) -> str:
        """The write transaction's one time, read by the server in that transaction (`_PgTx.now`:
        with the script that opens it when asked first, no round trip of its own after the chain
        head read it); a read in autocommit asks for it."""
        if isinstance(tx, _PgTx):
            return tx.now()
        row = tx.one(f"SELECT {NOW_SQL} AS now")
        assert row is not None
        return str(row["now"])

    def _clock_read(self, now: str) -> None:
        """A unit of work read the server's clock: `calibrated_now` counts from this reading."""
        self._clock_mark = (time.monotonic(), parse_iso(now))

    def _clock_sql(self) -> str | None:
        """The server's clock (`NOW_SQL`). Whoever puts a clock in front of the server's (`now`,
        `_tx_now`: a test's) puts it in front of this one too (None: `now` is asked)."""
        return NOW_SQL

    def _script_clock(self, plus_s: float = 0.0) -> str | None:
        """`Database._script_clock`: ``statement_timestamp()`` (the same for every statement of
        one script), as `NOW_SQL` formats the clock; None while `_clock_sql` is None (a test's
        clock in front of the server's)."""
        if self._clock_sql() is None:
            return None
        shift = f" + make_interval(secs => {float(plus_s)!r})" if plus_s else ""
        return (
            f"to_char((statement_timestamp(){shift}) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
        )

    def _clock_heard(self, now: str) -> datetime:
        """A statement read the server's clock: `calibrated_now` counts from this reading too."""
        self._clock_read(now)
        return parse_iso(now)

    def calibrated_now(self) -> datetime:
        """The last reading of the server's clock (`_clock_read`, whichever unit of work made it)
        plus the monotonic time since: no round trip while that reading is younger than
        `CLOCK_REUSE_S`, else a reading of its own (`now`). It may lag the server's clock by the
        reading's own round trip (it arrived that much after the server read it). Whoever puts a
        clock in front of the server's (`now`, `_tx_now`: a test's) puts it in front of this one
        too: the readings it counts from are the server's own."""
        mark, moment = self._clock_mark, time.monotonic()
        if mark is None or moment - mark[0] > CLOCK_REUSE_S:
            return self.now()
        return mark[1] + timedelta(seconds=moment - mark[0])

    def _saw_head(self, head: str) -> None:
        """A linking COMMIT's script read the chain's head right after it (`_HEAD_AFTER`)."""
        self._head_seen = head
        if self._contended:
            self._contended -= 1

    def _head_guess(self, tx: Tx) -> LinkHead | None:
        """`Database._head_guess`: the head seen after this process's last COMMIT that linked,
        with `calibrated_now` while its reading is recent (never a clock read of its own: the
        guess exists to spare a round trip). Verified under the chain's lock (`_link_tail`)."""
        if self._contended:  # a recent step relinked: others link into this chain too
            return None
        mark, head = self._clock_mark, self._head_seen
        moment = time.monotonic()
        if head is None or mark is None or moment - mark[0] > CLOCK_REUSE_S:
            return None
        now = iso(mark[1] + timedelta(seconds=moment - mark[0]))
        return LinkHead(now, head, [], [], locked=False, guessed=True)

    def _chain_head(self, tx: Tx) -> tuple[str, str]:
        """Lock, then read time and last hash, in one round trip (`_locked_head`)."""
        assert isinstance(tx, _PgTx)
        head = _locked_head(tx, 0, [])
        return head.now, head.last_hash

    def _link_head(self, tx: Tx, events: int, values: Sequence[tuple[str, Sequence[Any]]] = ()) -> LinkHead:
        """`_chain_head` that also reserves ``events`` sequence numbers and makes the reads
        ``values``, in its one round trip (`_locked_head`)."""
        assert isinstance(tx, _PgTx)
        return _locked_head(tx, events, [tx.bound(sql, params) for sql, params in values])

    def _link_behind(
        self,
        tx: Tx,
        statements: Sequence[tuple[str, Sequence[Any]]],
        groups: Sequence[tuple[int, Written]],
        values: Sequence[tuple[str, Sequence[Any]]] = (),
    ) -> tuple[list[list[dict[str, Any]]], LinkHead | None]:
        """The statements and the chain head's read behind them, in one round trip, without the
        chain's lock: the lock is taken in the COMMIT's script, in front of a check that the head
        is still the one read here and the events' INSERT (`_link_tail`), so it is held while the
        server commits, never across the client's turn (hashing the events). The head is read
        only when the first group's row was written by this transaction (its ``xmin``: exact,
        whatever the statements returned), so a step that links nothing (a claim that lost, a
        decision on record already) reads no head and never takes the lock."""
        assert isinstance(tx, _PgTx)
        if not groups:
            return super()._link_behind(tx, statements, groups, values)
        tx.settle()
        linked = _written_sql(tx, groups[0][1])
        reads = "".join(f", ({tx.bound(sql, params)}) AS v{n}" for n, (sql, params) in enumerate(values))
        results = tx._run(
            [
                *(tx.bound(sql, params) for sql, params in statements),
                f"{_TIME_AND_HEAD}{reads} WHERE {linked}",
            ]
        )
        answers, head = results[-len(statements) - 1 : -1], results[-1]
        if not head:
            return answers, None
        found = head[0]
        tx.heard(str(found["now"]))
        return answers, LinkHead(
            str(found["now"]),
            str(found["hash"]),
            [],
            [found[f"v{n}"] for n in range(len(values))],
            locked=False,
        )

    def _head_first(self, tx: Tx, values: Sequence[tuple[str, Sequence[Any]]] = ()) -> LinkHead | None:
        """`Database._head_first`: BEGIN with the store's time, the chain's head and the reads
        ``values``, one round trip (the transaction's time is this one); None, the head read
        behind the statements instead, while a recent step relinked (`CONTENTION_PAUSE`)."""
        assert isinstance(tx, _PgTx)
        if self._contended:
            return None
        tx.settle()
        reads = "".join(f", ({tx.bound(sql, params)}) AS v{n}" for n, (sql, params) in enumerate(values))
        row = tx.last_of(_TIME_AND_HEAD + reads)
        assert row is not None
        tx.heard(str(row["now"]))
        read = [row[f"v{n}"] for n in range(len(values))]
        return LinkHead(str(row["now"]), str(row["hash"]), [], read, locked=False)

    def _all_written(self, tx: Tx, first: Written, rows: Sequence[Written]) -> str:
        """`Database._all_written`: a statement that raises `_NOT_ALL_WRITTEN` through
        ``toolgate_raise`` (a function of the schema, compiled once per session), the first
        missing row's key as its detail (`transaction` raises it as `ResourcesBusy`); it selects
        the function only when ``first`` is this transaction's and a row is not."""
        assert isinstance(tx, _PgTx)
        if not rows:
            return "SELECT 1 WHERE false"
        cases = " ".join(f"WHEN NOT {_written_sql(tx, row)} THEN {tx.bound('?', (row.key,))}" for row in rows)
        return (
            f"SELECT toolgate_raise('{_NOT_ALL_WRITTEN}', 'not every row was written', missing)"
            f" FROM (SELECT CASE {cases} END AS missing WHERE {_written_sql(tx, first)}) AS m"
            " WHERE missing IS NOT NULL"
        )

    def _wrote(self, tx: Tx, row: Written) -> str:
        """`Database._wrote`: the row's ``xmin`` is this transaction (`_written_sql`)."""
        assert isinstance(tx, _PgTx)
        return _written_sql(tx, row)

    def _link_ahead(
        self,
        tx: Tx,
        statements: Sequence[tuple[str, Sequence[Any]]],
        rereads: Sequence[tuple[str, Sequence[Any]]],
        written: Written,
    ) -> list[list[dict[str, Any]]]:
        """`Database._link_ahead`: the statements, the waiting tail (`_link_tail`) under the
        condition that ``written``'s row is this transaction's (its ``xmin``), and the COMMIT,
        as one script (`_PgTx.commit_with`)."""
        assert isinstance(tx, _PgTx)
        return tx.commit_with(
            [tx.bound(sql, params) for sql, params in statements],
            [tx.bound(sql, params) for sql, params in rereads],
            _written_sql(tx, written),
        )

    def _link_tail(
        self,
        tx: Tx,
        insert: WhenWritten,
        last_hash: str,
        keyed: Sequence[str],
        relink: Relink,
        *,
        at: str = "",
    ) -> None:
        """`Database._link_tail`: in front of the COMMIT, the chain's lock, a savepoint, a check
        that the head is still ``last_hash`` and holds none of the ``keyed`` ids, and the
        events' INSERT, numbered by the database under the lock (each under the tail's
        condition, when `_link_ahead` gives one). The check is a statement of its own after the
        lock, so it sees what the previous holder committed; when it fails it raises
        `_HEAD_MOVED` with the store's time and the head it found (``now hash``) as its detail,
        and the script stops there: `_PgTx.commit_with` rolls back to the savepoint (the lock,
        taken before it, stays) and commits what ``relink`` links after that head. A last
        hash that is not a hash (the chain's last row written by hand) or a keyed id that
        could not travel in SQL is not put into it: the events are linked under the lock at
        once instead."""
        assert isinstance(tx, _PgTx)
        if not _HASH.fullmatch(last_hash) or not all(_PLAIN_ID.fullmatch(k) for k in keyed):
            relink(None)
            return
        held = (  # validated: letters, digits and _.:- only
            " OR EXISTS (SELECT 1 FROM audit_events WHERE event_id IN ("
            + ", ".join(f"'{k}'" for k in keyed)
            + "))"
            if keyed
            else ""
        )
        if at:  # a time this transaction did not read: between the head's own and the server's clock
            if not _ISO.fullmatch(at):
                relink(None)
                return
            held += (
                f" OR '{at}' > {NOW_SQL} OR '{at}' < COALESCE((SELECT occurred_at FROM audit_events"
                " ORDER BY seq DESC LIMIT 1), '')"
            )

        def tail(when: str) -> list[str]:
            only = f" AND {when}" if when else ""
            return [
                f"SELECT pg_advisory_xact_lock({_AUDIT_LOCK})" + (f" WHERE {when}" if when else ""),
                f"SAVEPOINT {_LINK_SAVEPOINT}",
                f"SELECT toolgate_raise('{_HEAD_MOVED}', 'the audit chain''s head moved', {NOW_SQL} || ' ' || head)"
                " FROM (SELECT COALESCE((SELECT hash FROM audit_events ORDER BY seq DESC LIMIT 1),"
                f" '{GENESIS_HASH}') AS head) AS h WHERE (head <> '{last_hash}'{held}){only}",
                tx.bound(*insert(when)),
            ]

        tx.finish_with(tail, relink)

    def _relinked(self) -> None:
        """A step's events were linked again after the head its check found (`_PgTx.commit_with`,
        after that COMMIT): the next `CONTENTION_PAUSE` steps read the head behind their
        statements."""
        self.relinked += 1
        self._contended = CONTENTION_PAUSE

    def _lock_migrations(self, tx: Tx) -> None:
        tx.execute(f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK})")

    def _run_script(self, tx: Tx, migration: Migration) -> None:
        tx.execute(migration.postgres)

    @cached_property
    def changes(self) -> Changes:
        """Notices through one ``LISTEN`` connection, opened when first waited on."""
        return PostgresChanges(self._conninfo)

    def close(self) -> None:
        if "changes" in self.__dict__:
            self.changes.close()
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None


__all__ = ["PostgresStore", "redact_url"]
