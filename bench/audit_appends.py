"""Audit appends per second with N processes, against plain one-row commits under the same lock.

PostgreSQL only. N spawned processes each open their own store and, from a start signal, do a
fixed number of units of work; contenders alternate per round:

- ``plain``: one transaction per unit: ``pg_advisory_xact_lock`` (a different key than the audit
  chain's) then a one-row INSERT, commit (the baseline);
- ``audit``: `Store.audit.append` (lock the chain, read the last hash, insert event and payload).

Also reported: the share of worker time spent waiting for the audit chain's lock, read from
PostgreSQL's lock table while the round runs (`_common.LockWaits`; no store code is wrapped).

Run: ``scripts/with-postgres.sh .venv/bin/python bench/audit_appends.py [--full]``
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

from _common import (  # bench/ is on sys.path when run as a script
    LockWaits,
    arguments,
    fresh_pg_database,
    new_key,
    open_store,
    pg_url,
    plot,
    print_table,
    process_round,
    rate_errorbars,
    write_results,
)

PROCESSES = (1, 2, 4, 8)
PLAIN_LOCK = 0x7467_0B0B
TARGET_LOCK_SHARE = 0.10


def worker(kind: str, url: str, key: bytes, count: int, ready: Any, go: Any, out: Any) -> None:
    from toolgate.store.audit_records import AuditEventIn

    store = open_store("postgres", url, key=key, max_size=2)
    store.operations.get("warm-up")
    ready.set()
    go.wait()
    started = time.time()
    for n in range(count):
        if kind == "audit":
            store.audit.append(AuditEventIn(event="bench.append", result="ok"))
        else:
            with store.transaction() as tx:
                tx.execute(f"SELECT pg_advisory_xact_lock({PLAIN_LOCK})")
                tx.execute("INSERT INTO bench_plain (note) VALUES (?)", (f"n{n}",))
    ended = time.time()
    out.put((started, ended))
    store.close()


def run_round(kind: str, url: str, key: bytes, processes: int, count: int) -> tuple[float, float]:
    waits = LockWaits(url)
    reports = process_round(
        worker, processes, lambda i, ready, go, out: (kind, url, key, count, ready, go, out), watch=waits
    )
    wall = max(r[1] for r in reports) - min(r[0] for r in reports)
    busy = sum(r[1] - r[0] for r in reports)
    return processes * count / wall, waits.waited_s / busy


def main() -> None:
    args = arguments(__doc__.splitlines()[0], quick=3, full=7)
    count = 100 if not args.full else 300
    url = pg_url()
    if not url:
        print(
            "audit_appends: SKIPPED: needs PostgreSQL (set TOOLGATE_BENCH_PG_URL or run via scripts/with-postgres.sh)"
        )
        return
    key = new_key()
    rates: dict[int, dict[str, list[float]]] = {p: {"plain": [], "audit": []} for p in PROCESSES}
    lock_share: dict[int, list[float]] = {p: [] for p in PROCESSES}
    with fresh_pg_database(url) as db:
        store = open_store("postgres", db, key=key)
        store.setup()
        with store.transaction() as tx:
            tx.execute("CREATE TABLE bench_plain (id BIGSERIAL PRIMARY KEY, note TEXT NOT NULL)")
        for r in range(args.rounds):
            for p in PROCESSES:
                for kind in ("plain", "audit"):
                    rate, share = run_round(kind, db, key, p, count)
                    rates[p][kind].append(rate)
                    if kind == "audit":
                        lock_share[p].append(share)
                    print(f"  round {r} processes={p} {kind}: {rate:.0f}/s", file=sys.stderr)
        total = len(store.audit.events())
        store.close()
    expected = args.rounds * count * sum(PROCESSES)
    rows = []
    for p in PROCESSES:
        a, b = statistics.median(rates[p]["audit"]), statistics.median(rates[p]["plain"])
        rows.append(
            {
                "processes": p,
                "audit_per_s": a,
                "audit_min-max": f"{min(rates[p]['audit']):.0f}-{max(rates[p]['audit']):.0f}",
                "plain_per_s": b,
                "plain_min-max": f"{min(rates[p]['plain']):.0f}-{max(rates[p]['plain']):.0f}",
                "ratio": a / b,
                "audit_lock_wait_share": statistics.median(lock_share[p]),
            }
        )
    share8 = rows[-1]["audit_lock_wait_share"]
    print_table(f"audit appends, PostgreSQL, {count} per process per round", rows)
    print(
        f"audit-lock wait at 8 processes: {share8:.0%} of worker time (target < {TARGET_LOCK_SHARE:.0%}) "
        f"{'met' if share8 < TARGET_LOCK_SHARE else 'NOT met'}; events stored {total} (expected >= {expected})"
    )
    write_results(
        "audit_appends",
        {
            "appends_per_process_per_round": count,
            "rounds": args.rounds,
            "target_lock_wait_share_at_8": TARGET_LOCK_SHARE,
            "lock_wait_share_at_8": share8,
            "rates_per_s": rates,
            "lock_wait_share": lock_share,
            "audit_events_stored": total,
            "table": rows,
        },
    )

    def draw(axes: Any) -> None:
        rate_errorbars(
            axes,
            PROCESSES,
            rates,
            ("plain", "audit"),
            xlabel="processes",
            ylabel="commits per second (median, min-max)",
        )

    plot("audit_appends", draw, title="Audit appends vs plain locked one-row commits, PostgreSQL")


if __name__ == "__main__":
    main()
