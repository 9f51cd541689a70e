"""Change notices: a process learns that another one changed a shared row instead of polling for it.

Two kinds of shared state are waited on or cached by every worker process: resource leases (a
delivery waits for a busy resource to be given up) and circuit breakers (a healthy reading is
reused). Polling them costs a transaction per look and, for a waiter, a sleep between looks, so
waiters added to a busy resource made its deliveries slower, not faster (issue 31's throughput:
4.75 lease attempts per operation at 8 workers). On PostgreSQL the database tells: a trigger
sends ``NOTIFY`` when a lease is given up or a breaker row changes (delivered at commit, so a
notice never precedes the change it announces), and one listener connection per store counts the
notices per topic. A caller reads a topic's count, looks at the store, and if it must wait, waits
until the count moves: a notice that arrived between the look and the wait is never missed.

Notices are hints, never authority: whoever wakes asks the store again (the conditional upsert of
the lease, the breaker's admit), and a lease that lapses (its holder died) sends none, so waiters
still look again after a bounded time. SQLite (one host, usually one process) has no listener:
`Changes.live` is False there and callers keep their timed polling.
"""

from __future__ import annotations

import selectors
import threading
import time
from collections import defaultdict

CHANNEL = "toolgate_changes"
"""The PostgreSQL notification channel the store's triggers send on."""

LEASE = "lease:"
"""Topic prefix of a given-up resource lease: ``lease:<resource key>``."""
BREAKER = "breaker:"
"""Topic prefix of a changed circuit breaker: ``breaker:<name>``."""


class Changes:
    """Counts of change notices per topic, and waiting for the next one (``store.changes``).

    This base is the backend without notices (SQLite): never `live`, `wait` only sleeps."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._seq: defaultdict[str, int] = defaultdict(int)
        self._epoch = 0
        """Moves when notices may have been lost (the listener reconnected): every topic changed."""

    @property
    def live(self) -> bool:
        """True while notices from every process arrive (a listener is connected)."""
        return False

    def seen(self, topics: tuple[str, ...]) -> tuple[int, ...]:
        """The state of ``topics`` now, to pass to `wait` or `changed` after looking at the store."""
        self.start()
        with self._cond:
            return (self._epoch, *(self._seq[t] for t in topics))

    def changed(self, topics: tuple[str, ...], seen: tuple[int, ...]) -> bool:
        """True when a notice for any of ``topics`` arrived since ``seen`` (or notices may be lost)."""
        with self._cond:
            return (self._epoch, *(self._seq[t] for t in topics)) != seen or not self.live

    def wait(self, topics: tuple[str, ...], seen: tuple[int, ...], timeout_s: float) -> bool:
        """Block until a notice for one of ``topics`` arrives after ``seen``, or ``timeout_s``;
        True when one did. Without a listener: sleeps ``timeout_s`` and answers False."""
        if not self.live:
            time.sleep(max(0.0, timeout_s))
            return False
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while (self._epoch, *(self._seq[t] for t in topics)) == seen:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def note(self, topic: str) -> None:
        """Count one notice for ``topic`` and wake its waiters."""
        with self._cond:
            self._seq[topic] += 1
            self._cond.notify_all()

    def note_all(self) -> None:
        """Notices may have been lost: every topic counts as changed."""
        with self._cond:
            self._epoch += 1
            self._cond.notify_all()

    def start(self) -> None:
        """Begin listening, if this backend can (idempotent)."""

    def close(self) -> None:
        """Stop listening (idempotent)."""


class PostgresChanges(Changes):
    """Notices from PostgreSQL's ``LISTEN``: one connection and one daemon thread per store,
    opened on first use (nothing connects when a store is built)."""

    POLL_S = 0.5
    """How often the listener thread checks whether it was closed."""

    def __init__(self, conninfo: str) -> None:
        super().__init__()
        self._conninfo = conninfo
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()
        self._live = False
        self._start_lock = threading.Lock()

    @property
    def live(self) -> bool:
        return self._live

    def start(self) -> None:
        if self._thread is not None or self._closed.is_set():
            return
        with self._start_lock:
            if self._thread is None and not self._closed.is_set():
                self._thread = threading.Thread(target=self._listen, name="toolgate-changes", daemon=True)
                self._thread.start()

    def close(self) -> None:
        self._closed.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(self.POLL_S * 4)

    def _listen(self) -> None:
        import psycopg  # the PostgreSQL driver is only needed by this backend

        while not self._closed.is_set():
            try:
                with psycopg.connect(self._conninfo, autocommit=True) as conn, selectors.DefaultSelector() as sel:
                    conn.execute(f"LISTEN {CHANNEL}")
                    self._live = True
                    self.note_all()  # whatever changed before we listened: look again
                    sel.register(conn.fileno(), selectors.EVENT_READ)
                    pgconn = conn.pgconn
                    while not self._closed.is_set():
                        # read what the server pushes, asking nothing (no round trip of the
                        # process's own: psycopg's notifies() would wait as a request does)
                        if sel.select(timeout=self.POLL_S):
                            pgconn.consume_input()
                        while (notice := pgconn.notifies()) is not None:
                            self.note(notice.extra.decode())
            except (psycopg.Error, OSError):
                pass
            finally:
                self._live = False
                self.note_all()  # waiters fall back to polling; cached readings are read again
            self._closed.wait(1.0)  # reconnect after a pause (a restarting server)


__all__ = ["BREAKER", "CHANNEL", "LEASE", "Changes", "PostgresChanges"]
