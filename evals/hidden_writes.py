"""Hidden-write detection: a read tool that changes its system of record is caught.

The harness (tests/support.py `Harness`, `toolgate.evals.runner.CaseRunner`) wraps every read
spec's handler with `HiddenWriteCheck.wrap`: before and after each read handler call it takes a
digest of every ``sor_*`` table (row count and a content checksum, `toolgate.evals.sor_digest`)
through the *store*, in trusted harness code, never through the handler's own records capability.
Every table, not only the read's declared scope: a read can write outside its scope (through a
service it calls, code that reaches a store, a table it creates), and that is what must be caught;
the digest is made cheap instead (on PostgreSQL one statement, reused while nothing commits). A
difference is recorded as a `HiddenWrite` naming the tool and the table, and the call fails with
`HiddenWriteError`; the test guard (tests/hidden_writes.py) fails the test, the eval runner fails the case with the stable
reason ``hidden_write tool=<name> table=<table>``.

Concurrency: reads are *not* serialized (reads of different threads still run at once, as the
gateway runs them). Every table is compared, so a concurrent *write* would look like a read's
change: the wrapper therefore also tracks the harness's write handlers, and a read whose window
overlapped a write handler (running at its start, or started or ended during it) is not compared
(counted in ``skipped``), never blamed. Likewise a table a ``DECLARED`` read writes by design is
not blamed on another read whose window it overlapped (the other tables still are). Two
overlapping reads are both compared otherwise: a read that hides a write can then be named
together with an innocent neighbour, never missed.

``DECLARED`` lists the demo reads whose system of record records them by design, with the reason;
those tables are left out for that tool only (every other table, and every other tool, is checked).

The wrapper is trusted harness code and reads the store (inside the handler's call, where the
gateway refuses the store to the handler: `toolgate.store.handler_access.outside_handler_call`
marks the digest as the harness's own), but keeps it only inside its digest function, never as
an attribute: tests/test_handler_capabilities.py walks what handlers close over
(attributes, two levels deep) to prove release code holds no store, and must still see none.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from toolgate.evals.sor_digest import Digest, digest, snapshotter, sor_tables
from toolgate.store.base import Store
from toolgate.store.handler_access import outside_handler_call
from toolgate.tools.handler import HandlerContext
from toolgate.tools.spec import ToolSpec

DECLARED: Mapping[str, Mapping[str, str]] = {
    "crm_lookup_contact": {
        "sor_crm_requests": "the fake CRM logs every request it receives (evidence tests count, no effect)",
        "sor_hubcrm_requests": "globex's own CRM (its override of the tool) logs every request it receives",
    },
    "preview_purchase_order": {
        "sor_po_previews": "a preview is stored so its signed single-use token can be consumed by the write"
    },
}
"""Per read tool, the tables it writes by design and why."""


class HiddenWriteError(AssertionError):
    """A read tool changed its system of record."""


@dataclass(frozen=True)
class HiddenWrite:
    """One table a read changed."""

    tool: str
    table: str
    before: tuple[int, str]
    after: tuple[int, str]

    @property
    def reason(self) -> str:
        """The stable reason (eval scoring, test failures)."""
        return f"hidden_write tool={self.tool} table={self.table}"

    def __str__(self) -> str:
        return (
            f"read tool {self.tool!r} wrote {self.table}: rows {self.before[0]} -> {self.after[0]}, "
            f"content {self.before[1][:12]} -> {self.after[1][:12]}"
        )


def differences(tool: str, before: Digest, after: Digest) -> list[HiddenWrite]:
    """The tables that differ between two digests (minus the tool's declared ones); a table on
    one side only differs when it has rows (an empty table created is no write of data)."""
    allowed = DECLARED.get(tool, {})
    empty = (0, "")
    found = []
    for table in sorted(set(before) | set(after)):
        old, new = before.get(table), after.get(table)
        if table in allowed or old == new or ((old or new or empty)[0] == 0 and None in (old, new)):
            continue
        found.append(HiddenWrite(tool, table, old or empty, new or empty))
    return found


Handler = Callable[[Any, HandlerContext], Any]


class HiddenWriteCheck:
    """Wraps a registry's handlers so every read is compared before and after (module docstring)."""

    def __init__(self, store: Store) -> None:
        snapshot = snapshotter(store)

        def outside() -> Digest:  # the harness's own read, not the handler's (refused to it)
            with outside_handler_call():
                return snapshot()

        self._snapshot: Callable[[], Digest] = outside
        self.violations: list[HiddenWrite] = []
        self.checked = 0
        """Read calls compared."""
        self.skipped = 0
        """Read calls not compared because a write handler overlapped them."""
        self._lock = threading.Lock()
        self._writes_running = 0
        self._write_events = 0
        self._declared_running: Counter[str] = Counter()
        """Per table, the reads that write it by design (`DECLARED`) running now."""
        self._declared_events: Counter[str] = Counter()
        """Per table, how often such a read started or ended."""

    def wrap(self, specs: Sequence[ToolSpec]) -> list[ToolSpec]:
        """The same specs: reads compared, writes tracked (see the module docstring)."""
        return [
            replace(s, handler=self._write(s.handler) if s.is_write else self._read(s.name, s.handler))
            for s in specs
        ]

    def take(self) -> list[HiddenWrite]:
        """The violations found so far (and forget them)."""
        with self._lock:
            found, self.violations = self.violations, []
        return found

    def _write(self, handler: Handler) -> Handler:
        check = self

        def tracked(args: Any, ctx: HandlerContext) -> Any:
            with check._lock:
                check._writes_running += 1
                check._write_events += 1
            try:
                return handler(args, ctx)
            finally:
                with check._lock:
                    check._writes_running -= 1
                    check._write_events += 1

        return tracked

    def _declared(self, name: str, step: int) -> None:
        """Count a read that writes its declared tables by design starting (+1) or ending (-1)."""
        with self._lock:
            for table in DECLARED.get(name, {}):
                self._declared_running[table] += step
                self._declared_events[table] += 1

    def _excused(self, events: Counter[str], running: set[str]) -> set[str]:
        """Tables a declared read may have written during this read's window (not blamed on it)."""
        return running | {t for t, n in self._declared_events.items() if events.get(t, 0) != n}

    def _compare(
        self, name: str, before: Digest, events: int, busy: int, declared: tuple[Counter[str], set[str]]
    ) -> list[HiddenWrite]:
        after = self._snapshot()
        with self._lock:
            if busy or self._write_events != events:
                self.skipped += 1
                return []
            self.checked += 1
            excused = self._excused(*declared)
            found = [d for d in differences(name, before, after) if d.table not in excused]
            self.violations.extend(found)
        return found

    def _read(self, name: str, handler: Handler) -> Handler:
        check = self

        def checked(args: Any, ctx: HandlerContext) -> Any:
            with check._lock:
                events, busy = check._write_events, check._writes_running
                declared = (
                    Counter(check._declared_events),
                    {t for t, n in check._declared_running.items() if n > 0},
                )
            before = check._snapshot()
            check._declared(name, +1)
            try:
                result = handler(args, ctx)
            except BaseException:  # a failing read is still compared; its own error passes through
                check._declared(name, -1)
                check._compare(name, before, events, busy, declared)
                raise
            check._declared(name, -1)
            found = check._compare(name, before, events, busy, declared)
            if found:
                raise HiddenWriteError("; ".join(str(f) for f in found))
            return result

        return checked


__all__ = [
    "DECLARED",
    "HiddenWrite",
    "HiddenWriteCheck",
    "HiddenWriteError",
    "differences",
    "digest",
    "sor_tables",
]
