"""A handler call's records unit of work stays open no longer than the call's timeout.

A handler that hangs inside a unit of work holds its transaction open: on PostgreSQL the row
locks of what it wrote (every later write of those rows waits, with no timeout of its own), on
SQLite the write lock of the whole file, which the gateway's own store shares (every proposal,
claim, outcome and audit append of every call waits, then fails). Its Python thread cannot be
killed (`toolgate.tools.loaded_code`); its transaction can. Each unit of work a handler call
opens is ended, rolled back, once it has been open for the call's timeout
(`toolgate.store.handler_access.HandlerAccess.timeout_s`, at least `MIN_UNIT_S`), whatever the
handler does meanwhile:

- between two statements (the handler idle, or hung in its own code): the connection is closed
  from the process's reaper thread, which rolls the transaction back and frees its locks;
- during a statement: the statement is stopped (SQLite's interrupt, PostgreSQL's cancel request)
  and the handler's thread closes the connection as the statement returns; a connection is
  never used by two threads at once.

From then on every statement of that unit of work is refused (`CapabilityDenied` ``records``,
remembered by the call, so it fails even if the handler swallows it): nothing the handler does
in it later is committed. It may open another unit of work, bounded the same way: a write that
outlived its timeout before touching its records may still have its effect, as
`toolgate.graph.delivery.overruns` expects, but no handler holds a lock for longer than its own
timeout. The bound is enforced by the gateway's process, not by settings of the session, which
the handler's own statements could change.

Trusted code outside a handler call (no `HandlerAccess`) opens units of work without any of this.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from toolgate.errors import CapabilityDenied
from toolgate.store.handler_access import HANDLER_ACCESS
from toolgate.store.records_scope import RecordsScope, records_denied

UNIT_TIMEOUT_S = 30.0
"""How long a unit of work of a handler call that did not say its timeout may stay open."""
MIN_UNIT_S = 5.0
"""The least any unit of work may stay open, whatever its call's timeout: one that only waited
for the file's write lock (SQLite) under load is not a hung one (read at each unit of work)."""
EXPIRED = "a unit of work open longer than its call's timeout"
"""What the refusal of an ended unit of work says the capability does not allow."""
TICK_S = 0.05
"""The reaper ends units of work at most this late: it wakes no more often than this."""


def _nothing() -> None:
    """What a finished unit of work's stop and close become (its connection is no longer its own)."""


class OpenUnit:
    """One records unit of work of a handler call, ended once open longer than its bound.

    ``stop`` stops the statement running on the connection (callable from any thread); ``close``
    closes the connection, rolling back what it holds. Each statement the unit of work sends,
    its BEGIN and COMMIT included, runs inside `statement`; `finish` ends its watch before its
    connection goes back to its pool."""

    def __init__(
        self,
        scope: RecordsScope,
        bound_s: float,
        *,
        stop: Callable[[], object],
        close: Callable[[], object],
    ) -> None:
        self._scope = scope
        self._stop = stop
        self._close = close
        self._lock = threading.Lock()
        self._busy = False
        """A statement is running in the handler's thread (the connection is in use there)."""
        self._ended = False
        self._finished = False
        self._refusal: CapabilityDenied | None = None
        _REAPER.watch(self, time.monotonic() + bound_s)

    @classmethod
    def of_call(
        cls, scope: RecordsScope, *, stop: Callable[[], object], close: Callable[[], object]
    ) -> OpenUnit | None:
        """The running handler call's unit of work, bounded by its timeout (None outside a
        handler call: trusted code)."""
        access = HANDLER_ACCESS.get()
        if access is None:
            return None
        bound = access.timeout_s if access.timeout_s is not None else UNIT_TIMEOUT_S
        return cls(scope, max(bound, MIN_UNIT_S), stop=stop, close=close)

    @property
    def ended(self) -> bool:
        """The unit of work was ended (open longer than its bound)."""
        return self._ended

    def refusal(self) -> CapabilityDenied:
        """The refusal every use of an ended unit of work raises (made, and remembered by the
        call, once: in the handler's thread)."""
        if self._refusal is None:
            self._refusal = records_denied(self._scope, "statement", EXPIRED)
        return self._refusal

    @contextmanager
    def statement(self) -> Iterator[None]:
        """Run one statement on the connection (the handler's thread): refused once the unit of
        work has ended; a statement stopped by its end raises the refusal, not the driver's
        error, and its connection is closed here."""
        with self._lock:
            if self._ended:
                raise self.refusal() from None
            self._busy = True
        try:
            yield
        except BaseException:
            if not self._ended:  # the statement's own failure
                raise
        finally:
            with self._lock:
                self._busy = False
                ended = self._ended
            if ended:  # ended during the statement, which left the connection to this thread
                self._close_quietly()
        if ended:
            raise self.refusal() from None

    def finish(self) -> bool:
        """The unit of work is over (the handler's thread, after its COMMIT or ROLLBACK, before its
        connection goes back to the pool): its end no longer touches it. False when it was ended:
        its connection is closed, never reused."""
        with self._lock:
            self._finished = True
            if self._ended:
                return False
            self._stop = self._close = _nothing  # the connection is the pool's again
            return True

    def end(self) -> None:
        """Open longer than its bound (the reaper's thread): roll back now, or stop the running
        statement and leave the closing to the handler's thread. Never raises."""
        with self._lock:
            if self._ended or self._finished:
                return
            self._ended = True
            busy = self._busy
            self._busy = True  # idle: the connection is this thread's from now on
        if busy:
            with contextlib.suppress(Exception):  # else the statement ends on its own, then closes
                self._stop()
        else:
            self._close_quietly()

    def _close_quietly(self) -> None:
        with contextlib.suppress(Exception):  # a connection that fails to close is gone either way
            self._close()


class _Reaper:
    """The process's one daemon thread that ends units of work open past their bound (started on
    first use; a forked child starts its own). A finished unit stays queued until its bound and
    is then dropped; the thread wakes at most every `TICK_S`."""

    def __init__(self) -> None:
        self._forget()

    def _forget(self) -> None:
        self._cond = threading.Condition()
        self._due: list[tuple[float, int, OpenUnit]] = []
        self._order = itertools.count()
        self._running = False

    def watch(self, unit: OpenUnit, at: float) -> None:
        with self._cond:
            heapq.heappush(self._due, (at, next(self._order), unit))
            if not self._running:
                self._running = True
                threading.Thread(target=self._run, name="toolgate-records-reaper", daemon=True).start()
            elif self._due[0][2] is unit:  # sooner than what the thread sleeps for
                self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._due:
                    self._cond.wait()
                now = time.monotonic()
                due = []
                while self._due and self._due[0][0] <= now:
                    due.append(heapq.heappop(self._due)[2])
                if not due:
                    self._cond.wait(max(self._due[0][0] - now, TICK_S))
                    continue
            for unit in due:
                unit.end()


_REAPER = _Reaper()
os.register_at_fork(after_in_child=_REAPER._forget)


__all__ = ["EXPIRED", "MIN_UNIT_S", "UNIT_TIMEOUT_S", "OpenUnit"]
