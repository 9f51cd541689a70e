"""Throughput: distinct approved operations per second for 1, 2, 4 and 8 worker processes.

PostgreSQL only. Each round prepares approved ``restart_service`` operations (proposal stored,
omar approves; outside the timing), then starts N worker processes that each build their own
store and gateway and, from a start signal, take operation keys from a shared queue. Every key is
queued twice, so workers race for the same operations as a redundant fleet would. Contenders,
alternated per round with fresh operations each:

- ``claim``: the claim step alone, `Store.operations.claim(key, owner, lease_s)` (the baseline);
- ``deliver``: `Executor.deliver(key, worker_id=...)`: claim, handler, outcome, audit; every
  operation restarts the same service (``web``), so every delivery needs the one resource lease
  of that service: the operations run one at a time whatever the worker count (the contention
  case: extra workers can only wait, and what their waiting costs is what this measures);
- ``spread``: the same deliveries, but each operation names a resource of its own (the bench's
  ``restart_service`` takes its conflicting resource lease on its ``reason`` argument, which
  differs per operation, instead of the service alias; one lease per delivery as before), as a
  fleet delivering unrelated writes would: the case where workers can help.
  This is the figure the target applies to: claim-only takes no resource lease, so against
  ``deliver`` the ratio at N workers measures the lease's serialization, not the gateway.

Also reported: the share of deliver workers' time spent waiting for the audit chain's lock, read
from PostgreSQL's lock table while the round runs (`_common.LockWaits`: the backends waiting for
the chain's advisory lock, sampled every 5 ms by the parent; no store code is wrapped). Every
contender's rounds are sampled alike, so the sampler's cost hits all of them.

Also reported: ``relinked_per_op``, audited steps per spread operation whose chain head (read
without the lock, behind the step's statements) had moved by their COMMIT and were linked again
under the lock, two round trips more (`PostgresStore.relinked`).

Duplicate check after every deliver round: each operation succeeded, exactly one downstream
restart request per operation (none executed twice), none lost. Each claim round: exactly one
winning claim per operation.

Run: ``scripts/with-postgres.sh .venv/bin/python bench/throughput.py [--full]``
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

from _common import (  # bench/ is on sys.path when run as a script
    Demo,
    LockWaits,
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

WORKERS = (1, 2, 4, 8)
TARGET = 0.3
LOCK_TARGET = 0.10
"""Audit-lock wait under 10% of spread workers' time at 8 workers."""
KINDS = ("claim", "deliver", "spread")


def spread_registry(demo: Demo) -> Any:
    """The demo's registry with ``restart_service``'s resource keyed by its ``reason`` (one
    resource per operation in this benchmark) instead of its ``service_alias``."""
    from dataclasses import replace

    from toolgate.tools import Registry
    from toolgate.tools.demo import REFUND_RELEASE, demo_specs
    from toolgate.tools.resources import ResourceRef

    def owned(_reason: str, _ctx: Any) -> str:
        return "owned"  # a request of the caller's own: the service alias is still checked

    specs = [
        replace(
            s,
            resource=replace(s.resource, conflict=False),
            resources=(ResourceRef(kind="restart_request", argument="reason", owner=owned),),
        )
        if s.name == "restart_service" and s.resource is not None
        else s
        for s in demo_specs(demo.system)
    ]
    return Registry.of(REFUND_RELEASE, specs, demo.system)


def worker(kind: str, url: str, key: bytes, ready: Any, go: Any, out: Any, name: str, queue: Any) -> None:
    from toolgate.testing import ScriptedChatModel

    store = open_store("postgres", url, key=key, max_size=2)
    demo = Demo.__new__(Demo)  # no setup: the parent initialised the store
    from toolgate.tools import Registry
    from toolgate.tools.demo import REFUND_RELEASE, DemoSystem, demo_specs

    system = DemoSystem(store)
    demo.store, demo.system = store, system
    demo.registry = Registry.of(REFUND_RELEASE, demo_specs(system), system)
    if kind == "spread":
        demo.registry = spread_registry(demo)
    from _common import bench_policy

    demo.policy = bench_policy(REFUND_RELEASE)
    gw = demo.gateway(ScriptedChatModel(responses=[]))
    store.operations.get("warm-up")  # opens the pool
    ready.set()
    go.wait()
    won = 0
    started = time.time()
    while True:
        op = queue.get()
        if op is None:
            break
        if kind == "claim":
            won += store.operations.claim(op, name, 60.0) is not None
        else:
            won += gw.executor.deliver(op, worker_id=name, wait_s=60).claim == "ACQUIRED"
    out.put((started, time.time(), won, getattr(store, "relinked", 0)))
    store.close()


def run_round(
    kind: str, url: str, key: bytes, keys: list[str], workers: int
) -> tuple[float, int, float, int]:
    """Operations per second, winning claims, the share of worker time spent waiting for the
    audit chain's lock, and the audited steps whose chain head had moved by their COMMIT (linked
    again under the lock: `PostgresStore.relinked`)."""

    def feed(queue: Any) -> None:
        for k in keys + keys:  # every operation is offered twice: workers race for it
            queue.put(k)
        for _ in range(workers):
            queue.put(None)

    waits = LockWaits(url)
    reports = process_round(
        worker,
        workers,
        lambda i, ready, go, out: (kind, url, key, ready, go, out, f"{kind}-w{i}"),
        feed=feed,
        watch=waits,
    )
    wall = max(r[1] for r in reports) - min(r[0] for r in reports)
    busy = sum(r[1] - r[0] for r in reports)
    return len(keys) / wall, sum(r[2] for r in reports), waits.waited_s / busy, sum(r[3] for r in reports)


def check_exactly_once(store: Any, keys: list[str]) -> dict[str, int]:
    from toolgate.canonical import idempotency_key_for

    statuses = [store.operations.get(k).status for k in keys]
    with store.transaction(write=False) as tx:
        requests = {
            r["idempotency_key"]: int(r["n"])
            for r in tx.execute(
                "SELECT idempotency_key, COUNT(*) AS n FROM sor_restart_requests GROUP BY idempotency_key"
            )
        }
    per_op = [requests.get(idempotency_key_for(k), 0) for k in keys]
    return {
        "succeeded": statuses.count("succeeded"),
        "lost": sum(1 for n in per_op if n == 0),
        "duplicates": sum(n - 1 for n in per_op if n > 1),
    }


def main() -> None:
    from _common import arguments

    args = arguments(__doc__.splitlines()[0], quick=2, full=5)
    ops = 40 if not args.full else 100
    url = pg_url()
    if not url:
        print(
            "throughput: SKIPPED: needs PostgreSQL (set TOOLGATE_BENCH_PG_URL or run via scripts/with-postgres.sh)"
        )
        return
    key = new_key()
    rates: dict[int, dict[str, list[float]]] = {w: {k: [] for k in KINDS} for w in WORKERS}
    lock_share: dict[int, list[float]] = {w: [] for w in WORKERS}
    spread_lock_share: dict[int, list[float]] = {w: [] for w in WORKERS}
    spread_relinked: dict[int, list[float]] = {w: [] for w in WORKERS}
    checks: list[dict[str, int]] = []
    with fresh_pg_database(url) as db:
        store = open_store("postgres", db, key=key)
        demo = Demo(store)
        from toolgate.testing import ScriptedChatModel

        gw = demo.gateway(ScriptedChatModel(responses=[]))
        for r in range(args.rounds):
            for w in WORKERS:
                for kind in KINDS:
                    keys = demo.approved_restarts(gw, ops, f"{kind}-{w}-{r}")
                    rate, won, waiting, relinked = run_round(kind, db, key, keys, w)
                    assert won == len(keys), f"{kind} x{w}: {won} winning claims for {len(keys)} operations"
                    if kind != "claim":
                        check = check_exactly_once(store, keys)
                        checks.append(check)
                        (lock_share if kind == "deliver" else spread_lock_share)[w].append(waiting)
                        if kind == "spread":
                            spread_relinked[w].append(relinked / len(keys))
                        assert check == {"succeeded": len(keys), "lost": 0, "duplicates": 0}, check
                    rates[w][kind].append(rate)
                    print(f"  round {r} workers={w} {kind}: {rate:.0f} ops/s", file=sys.stderr)
        store.close()
    rows = []
    for w in WORKERS:
        c, d = statistics.median(rates[w]["claim"]), statistics.median(rates[w]["deliver"])
        sp = statistics.median(rates[w]["spread"])
        rows.append(
            {
                "workers": w,
                "spread_ops_s": sp,
                "spread_min-max": f"{min(rates[w]['spread']):.0f}-{max(rates[w]['spread']):.0f}",
                "one_resource_ops_s": d,
                "one_resource_min-max": f"{min(rates[w]['deliver']):.0f}-{max(rates[w]['deliver']):.0f}",
                "claim_only_ops_s": c,
                "claim_min-max": f"{min(rates[w]['claim']):.0f}-{max(rates[w]['claim']):.0f}",
                "ratio": sp / c,
                "one_resource_ratio": d / c,
                "audit_lock_wait": f"{statistics.median(spread_lock_share[w]):.1%}",
                "relinked_per_op": round(statistics.median(spread_relinked[w]), 3),
            }
        )
    best = max(rows, key=lambda row: row["spread_ops_s"])
    best_ratio = best["spread_ops_s"] / statistics.median(rates[best["workers"]]["claim"])
    best_one = max(rows, key=lambda row: row["one_resource_ops_s"])
    best_one_ratio = best_one["one_resource_ops_s"] / statistics.median(rates[best_one["workers"]]["claim"])
    met = best_ratio >= TARGET and all(c["duplicates"] == 0 and c["lost"] == 0 for c in checks)
    lock_at_8 = statistics.median(spread_lock_share[WORKERS[-1]])
    print_table(
        f"throughput, PostgreSQL, {ops} operations per round (target: best spread >= {TARGET}x claim-only, 0 dup, 0 lost)",
        rows,
    )
    print(
        f"best worker count {best['workers']}: ratio {best_ratio:.2f} (target >= {TARGET}) "
        f"{'met' if met else 'NOT met'}; duplicates {sum(c['duplicates'] for c in checks)}, "
        f"lost {sum(c['lost'] for c in checks)} over {len(checks)} deliver rounds"
    )
    print(
        f"one resource (every operation restarts web): best at {best_one['workers']} workers, ratio "
        f"{best_one_ratio:.2f}; at {WORKERS[-1]} workers {rows[-1]['one_resource_ratio']:.2f}"
    )
    print(
        f"audit-lock wait at {WORKERS[-1]} workers: {lock_at_8:.1%} of worker time "
        f"(target < {LOCK_TARGET:.0%}) {'met' if lock_at_8 < LOCK_TARGET else 'NOT met'}"
    )
    write_results(
        "throughput",
        {
            "operations_per_round": ops,
            "rounds": args.rounds,
            "target_ratio_at_best": TARGET,
            "best_workers": best["workers"],
            "best_ratio": best_ratio,
            "met": met,
            "best_one_resource_workers": best_one["workers"],
            "best_one_resource_ratio": best_one_ratio,
            "audit_lock_wait_share": spread_lock_share,
            "relinked_per_spread_op": spread_relinked,
            "one_resource_audit_lock_wait_share": lock_share,
            "audit_lock_wait_at_8": lock_at_8,
            "audit_lock_target": LOCK_TARGET,
            "audit_lock_met": lock_at_8 < LOCK_TARGET,
            "rates_ops_s": rates,
            "exactly_once_checks": checks,
            "table": rows,
        },
    )

    def draw(axes: Any) -> None:
        rate_errorbars(
            axes,
            WORKERS,
            rates,
            KINDS,
            xlabel="worker processes",
            ylabel="distinct operations per second (median, min-max)",
        )

    plot("throughput", draw, title="Approved operations per second, PostgreSQL")


if __name__ == "__main__":
    main()
