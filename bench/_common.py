"""Shared benchmark machinery: alternated rounds, medians and spread, counters, results and plots.

Every figure a benchmark reports is a ratio against a baseline measured in the same run: rounds
alternate (baseline, toolgate, baseline, ...), so load on the machine hits both sides alike, and
medians with their spread (min, max, quartiles) are reported, never a single absolute time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import platform
import secrets
import sqlite3
import statistics
import subprocess
import time
import uuid
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
PG_ENV = ("TOOLGATE_BENCH_PG_URL", "TOOLGATE_TEST_PG_URL")

warnings.filterwarnings("ignore", category=DeprecationWarning)
warnings.filterwarnings("ignore", message=".*create_react_agent.*")


def arguments(description: str, quick: int, full: int) -> argparse.Namespace:
    """``--quick`` (default) or ``--full`` rounds; ``--rounds N`` overrides both."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--full", action="store_true", help=f"{full} rounds instead of {quick}")
    parser.add_argument("--quick", action="store_true", help=f"{quick} rounds (the default)")
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args()
    args.rounds = args.rounds or (full if args.full else quick)
    return args


# ---- statistics -------------------------------------------------------------------------------


def spread(samples: Sequence[float]) -> dict[str, float]:
    """Median, min, max and quartiles of ``samples``."""
    ordered = sorted(samples)
    q = statistics.quantiles(ordered, n=4) if len(ordered) >= 2 else [ordered[0]] * 3
    return {
        "median": statistics.median(ordered),
        "min": ordered[0],
        "max": ordered[-1],
        "q1": q[0],
        "q3": q[2],
        "n": len(ordered),
    }


def ratio(subject: Sequence[float], baseline: Sequence[float]) -> dict[str, float]:
    """Ratio of medians, plus the spread of the paired per-round ratios."""
    paired = [s / b for s, b in zip(subject, baseline, strict=False) if b > 0]
    per_round = spread(paired)
    return {
        "ratio": statistics.median(subject) / statistics.median(baseline),
        "round_min": per_round["min"],
        "round_max": per_round["max"],
        "round_q1": per_round["q1"],
        "round_q3": per_round["q3"],
    }


def alternate(
    rounds: int, contenders: Mapping[str, Callable[[int], float]], *, warmup: int = 1
) -> dict[str, list[float]]:
    """Run each contender once per round, in the given order (baseline first), ``rounds`` times.

    Each callable gets the round number (negative for warm-up rounds) and returns seconds."""
    for n in range(warmup):
        for run in contenders.values():
            run(-1 - n)
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for n in range(rounds):
        for name, run in contenders.items():
            samples[name].append(run(n))
    return samples


def timed(fn: Callable[[], Any]) -> float:
    """Seconds ``fn`` took."""
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


class CpuClock:
    """Process CPU seconds per round, beside the wall-clock samples (every thread of the process:
    LangGraph's checkpoint thread and the handler workers included). Other processes' load
    stretches wall time (waiting for a core, for the disk's fsync) far more than CPU time, so
    the CPU ratio is the steadier figure of the work each side does; wall time is still what a
    caller waits for and what the targets are judged by."""

    def __init__(self) -> None:
        self.samples: dict[str, list[float]] = {}
        self._started = 0.0

    def start(self) -> None:
        self._started = time.process_time()

    def stop(self, name: str, round_no: int) -> None:
        if round_no >= 0:  # warm-up rounds are not kept, as in `alternate`
            self.samples.setdefault(name, []).append(time.process_time() - self._started)

    def ratio(self, subject: str, baseline: str) -> dict[str, float]:
        """`ratio` of the CPU samples, plus both medians in ms."""
        return {
            **ratio(self.samples[subject], self.samples[baseline]),
            "median_ms": statistics.median(self.samples[subject]) * 1000,
            "baseline_median_ms": statistics.median(self.samples[baseline]) * 1000,
        }


# ---- counting ---------------------------------------------------------------------------------


class StoreCounter:
    """Counts a store's units of work at the Python level (cheap: one wrapper per call).

    ``write_tx`` are committed write transactions (commits), ``read_tx`` read-only ones,
    ``audit`` the write transactions that appended audit events (alone, or with the change they
    record), ``audit_events`` the events appended, ``connections`` new SQLite
    connections (PostgreSQL uses a pool: ``connections`` there is pool checkouts = transactions),
    ``statements`` statements sent through the store's transaction objects, ``round_trips`` what
    they cost on PostgreSQL's wire, as the transaction itself counts them (``round_trips`` of
    `toolgate.store.postgres._PgTx`): one per answered statement or multi-statement script (a
    clock read included), none for a statement sent to travel with a later one (`Tx.send`) nor
    for BEGIN, which travels in front of the first script, plus COMMIT of a write transaction
    that sent anything (reads run in autocommit sessions); on SQLite one per statement. ``log`` lists every
    transaction as ``(kind, label, statements, round_trips)``: a write is labelled by the audit
    events it linked, else by its first statement's verb and table (the per-step table)."""

    def __init__(self, store: Any) -> None:
        self.counts: Counter[str] = Counter()
        self.log: list[tuple[str, str, int, int]] = []
        self.store = store
        original_tx = store.transaction
        original_append = store.audit._chain
        original_behind = store._link_behind
        original_ahead = store._link_ahead
        counts, log = self.counts, self.log
        postgres = getattr(store, "dialect", "") == "postgres"
        open_tx: dict[int, dict[str, Any]] = {}

        @contextlib.contextmanager
        def transaction(*, write: bool = True) -> Iterator[Any]:
            with original_tx(write=write) as tx:
                inner = tx.execute
                mine = {"statements": 0, "trips": 0, "events": [], "first": ""}
                open_tx[id(tx)] = mine

                def execute(sql: str, params: Sequence[Any] = ()) -> Any:
                    counts["statements"] += 1
                    mine["statements"] += 1
                    mine["trips"] += 1
                    if not mine["first"]:
                        mine["first"] = _first_words(sql)
                    return inner(sql, params)

                tx.execute = execute
                inner_send = tx.send

                def send(sql: str, params: Sequence[Any] = ()) -> Any:
                    counts["statements"] += 1
                    mine["statements"] += 1
                    if not postgres:  # SQLite runs it now; PostgreSQL sends it with a later one
                        mine["trips"] += 1
                    if not mine["first"]:
                        mine["first"] = _first_words(sql)
                    return inner_send(sql, params)

                tx.send = send
                if hasattr(tx, "last_of"):  # PostgreSQL: several statements in one round trip
                    inner_script = tx.last_of

                    def last_of(script: str) -> Any:
                        counts["statements"] += script.count(";") + 1
                        mine["statements"] += script.count(";") + 1
                        mine["trips"] += 1
                        return inner_script(script)

                    tx.last_of = last_of
                if hasattr(tx, "many"):
                    inner_many = tx.many

                    def many(statements: Sequence[Any]) -> Any:
                        if not postgres:  # SQLite runs each through `execute`, counted there
                            return inner_many(statements)
                        counts["statements"] += len(statements)
                        mine["statements"] += len(statements)
                        mine["trips"] += 1
                        if not mine["first"] and statements:
                            mine["first"] = _first_words(statements[0][0])
                        return inner_many(statements)

                    tx.many = many
                if postgres:  # the transaction's reading of the store's clock (`_PgTx.now`)
                    inner_now = tx.now

                    def now() -> Any:
                        before = tx.round_trips
                        value = inner_now()
                        if tx.round_trips > before:
                            counts["statements"] += 1
                            mine["statements"] += 1
                            if not write:  # a write is labelled by what it changes
                                mine["first"] = mine["first"] or "SELECT clock"
                        return value

                    tx.now = now
                try:
                    yield tx
                finally:
                    open_tx.pop(id(tx), None)
            trips = tx.round_trips if postgres else mine["trips"]  # COMMIT counted: the block ended
            counts["write_tx" if write else "read_tx"] += 1
            counts["round_trips"] += trips
            label = "+".join(mine["events"]) if mine["events"] else mine["first"]
            log.append(("write" if write else "read", label, mine["statements"], trips))

        def append_events(tx: Any, events: Any, *linked: Any) -> Any:
            if events:
                counts["audit"] += 1
                counts["audit_events"] += len(events)
                if id(tx) in open_tx:
                    open_tx[id(tx)]["events"] += [str(getattr(e, "event", e)) for e in events]
            return original_append(tx, events, *linked)

        def link_behind(tx: Any, statements: Sequence[Any], *rest: Any) -> Any:
            # PostgreSQL sends the statements with the chain head's read as one script of its own
            # (`PostgresStore._link_behind`), and, when it linked, a savepoint, the lock with the
            # head's check and the events' INSERT with the COMMIT (`_link_tail`, not through
            # `send`); SQLite runs them through `many`, counted there
            answers, head = original_behind(tx, statements, *rest)
            if postgres and id(tx) in open_tx:
                mine = open_tx[id(tx)]
                sent = len(statements) + 1  # the tail, when it links, is counted by `_link_tail`
                counts["statements"] += sent
                mine["statements"] += sent
                if not mine["first"] and statements:
                    mine["first"] = _first_words(statements[0][0])
            return answers, head

        def link_ahead(tx: Any, statements: Sequence[Any], *rest: Any) -> Any:
            # PostgreSQL sends a step's statements, the tail (lock, savepoint, head check, the
            # events' INSERT: counted by `_link_tail`) and the COMMIT as one script
            # (`PostgresStore._link_ahead`)
            if id(tx) in open_tx:
                mine = open_tx[id(tx)]
                counts["statements"] += len(statements)
                mine["statements"] += len(statements)
                if not mine["first"] and statements:
                    mine["first"] = _first_words(statements[0][0])
            return original_ahead(tx, statements, *rest)

        if postgres:
            original_tail = store._link_tail

            def link_tail(tx: Any, *args: Any, **kwargs: Any) -> Any:
                # events linked after an unlocked (or guessed) head: the lock, a savepoint, the
                # head's check and the events' INSERT go with the COMMIT
                if id(tx) in open_tx:
                    counts["statements"] += 4
                    open_tx[id(tx)]["statements"] += 4
                return original_tail(tx, *args, **kwargs)

            store._link_tail = link_tail
        store.transaction = transaction
        store.audit._chain = append_events  # each linking of a transaction's events: `link`, `link_behind`
        store._link_behind = link_behind
        store._link_ahead = link_ahead
        if hasattr(store, "_connect"):
            original_connect = store._connect

            def connect() -> Any:
                counts["connections"] += 1
                return original_connect()

            store._connect = connect

    def snapshot(self) -> Counter[str]:
        return Counter(self.counts)


def _first_words(sql: str) -> str:
    """``INSERT rate_counters``, ``SELECT proposals``: a statement's verb and first table
    (``SELECT clock`` for a read of the store's time alone)."""
    if "clock_timestamp" in sql and " FROM " not in sql.upper():
        return "SELECT clock"  # the store's time (`Store._tx_now`)
    words = sql.replace("(", " ").replace(",", " ").split()
    verb = words[0].upper() if words else "?"
    for marker in ("INTO", "FROM", "UPDATE"):
        for i, word in enumerate(words[:-1]):
            if word.upper() == marker:
                return f"{verb} {words[i + 1]}"
    return verb


class SaverCounter:
    """Counts checkpoint commits: every ``put`` and ``put_writes`` of a saver commits once."""

    def __init__(self, saver: Any) -> None:
        self.counts: Counter[str] = Counter()
        counts = self.counts
        put, put_writes = saver.put, saver.put_writes

        def counted_put(*a: Any, **k: Any) -> Any:
            counts["checkpoint_put"] += 1
            return put(*a, **k)

        def counted_writes(*a: Any, **k: Any) -> Any:
            counts["checkpoint_writes"] += 1
            return put_writes(*a, **k)

        saver.put = counted_put
        saver.put_writes = counted_writes

    def snapshot(self) -> Counter[str]:
        return Counter(self.counts)


def delta(after: Counter[str], before: Counter[str]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in sorted(set(after) | set(before))}


# ---- stores, savers, the demo -----------------------------------------------------------------


def pg_url() -> str | None:
    """The PostgreSQL server to benchmark on, when one is configured."""
    for name in PG_ENV:
        if os.environ.get(name):
            return os.environ[name]
    return None


@contextlib.contextmanager
def fresh_pg_database(url: str) -> Iterator[str]:
    """A new empty database on ``url``'s server for one benchmark (dropped afterwards)."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    name = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    info = conninfo_to_dict(url)
    info["dbname"] = name
    try:
        yield make_conninfo(**info)
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def open_store(kind: str, where: str, *, key: bytes, max_size: int = 10) -> Any:
    """A toolgate store: ``where`` is a file path (sqlite) or a URL (postgres)."""
    from toolgate.store import PostgresStore, SQLiteStore

    if kind == "sqlite":
        return SQLiteStore(Path(where), key=key)
    return PostgresStore(where, key=key, max_size=max_size)


@contextlib.contextmanager
def open_saver(kind: str, where: str) -> Iterator[Any]:
    """A LangGraph checkpointer of ``kind``: SqliteSaver on a file, or PostgresSaver on a URL."""
    if kind == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(where, check_same_thread=False)
        saver = SqliteSaver(conn)
        saver.setup()
        try:
            yield saver
        finally:
            conn.close()
    else:
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(where) as saver:
            saver.setup()
            yield saver


def bench_policy(release: str) -> Any:
    """The release's policy with rate limits raised out of reach: the limiter still runs (and
    costs what it costs) but never refuses the benchmark's repeated calls."""
    from toolgate.policy.rules import RateLimit, RateLimits
    from toolgate.tools.demo.release import DEMO_RELEASES

    policy = DEMO_RELEASES[release].policy
    huge = RateLimit(limit=10**9, window_s=60)
    return replace(policy, rate_limits=RateLimits(per_principal_tool=huge, per_tenant=huge))


class Demo:
    """toolgate's demo on one store, wired like the test harness (``tests/support.py``)."""

    def __init__(self, store: Any) -> None:
        from toolgate.graph.bootstrap import initialize_store
        from toolgate.policy.identities import IdentityDirectory
        from toolgate.tools import Registry
        from toolgate.tools.demo import REFUND_RELEASE, DemoSystem, demo_specs
        from toolgate.tools.demo.identities import demo_principals, seed_demo_identities
        from toolgate.tools.demo.release import DEMO_RELEASES

        initialize_store(store, DEMO_RELEASES["ops-tools/1.1.0"])
        seed_demo_identities(IdentityDirectory(store))
        self.store = store
        self.system = DemoSystem(store)
        self.registry = Registry.of(REFUND_RELEASE, demo_specs(self.system), self.system)
        self.policy = bench_policy(REFUND_RELEASE)
        self.principals = demo_principals()

    def app(self, model: Any) -> Any:
        """The demo around ``model`` with this demo's registry and policy as they are now (a
        benchmark may replace either), built by the composition root."""
        from toolgate.testing import open_test_app
        from toolgate.tools.demo import REFUND_RELEASE
        from toolgate.tools.demo.release import DEMO_RELEASES

        return open_test_app(
            release=DEMO_RELEASES[REFUND_RELEASE],
            tools=self.registry,
            policy=self.policy,
            model=model,
            store=self.store,
            start=False,
        )

    def gateway(self, model: Any) -> Any:
        return self.app(model).gateway

    def graph(self, model: Any, saver: Any) -> Any:
        return self.app(model).compiled(checkpointer=saver)

    def context(self, user: str = "cust-ada", **knobs: Any) -> Any:
        from toolgate.graph import Context

        return Context(principal=self.principals[user], **knobs)

    def approved_restarts(self, gw: Any, count: int, tag: str) -> list[str]:
        """The operation keys of ``count`` ``restart_service`` proposals of sam's, each with a
        reason of its own, stored and approved by omar through the review path (what
        `throughput.py` races workers over and `profile_paths.py` delivers)."""
        from toolgate.graph.review.decisions import decide
        from toolgate.graph.review.proposals import draft_proposal, store_proposal

        spec = self.registry.tools["restart_service"]
        keys = []
        for n in range(count):
            draft = draft_proposal(
                gw,
                spec,
                tenant_id="acme",
                requester_id="sam",
                thread_id=f"t-{tag}",
                call_id=f"c{n}",
                arguments={"service_alias": "web", "reason": f"bench {tag} {n}"},
            )
            proposal, _, _ = store_proposal(gw, spec, draft, actor="sam")
            decide(gw, proposal.proposal_id, self.principals["omar"], "approve")
            keys.append(proposal.operation_key)
        return keys


def new_key() -> bytes:
    return secrets.token_bytes(32)


# ---- output -----------------------------------------------------------------------------------


def verdict(measured: float, target: float) -> str:
    return "met" if measured <= target else "NOT met"


def print_table(title: str, rows: Sequence[Mapping[str, Any]]) -> None:
    """A plain-text table of ``rows`` (all rows share the first row's keys)."""
    if not rows:
        print(f"{title}: no rows")
        return
    columns = list(rows[0])
    cells = [[_fmt(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    print(f"\n== {title}")
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return "" if value is None else str(value)


def measured_commit() -> str:
    """The commit the benchmark runs on (short), ``+changes`` when tracked files differ from it
    (the results and BENCHMARKS.md, which a bench run itself rewrites, aside): BENCHMARKS.md names
    it, not whatever is checked out when the page is regenerated later."""
    root = str(Path(__file__).resolve().parent.parent)
    head = subprocess.run(
        ["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    if not head:
        return "unknown"
    changed = subprocess.run(
        ["git", "-C", root, "diff", "--quiet", "HEAD", "--", ".", ":!bench/results", ":!BENCHMARKS.md"],
        capture_output=True,
        check=False,
    ).returncode
    return head + ("+changes" if changed else "")


def machine() -> dict[str, Any]:
    return {
        "cores": os.cpu_count(),
        "load_avg_1_5_15": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "platform": platform.platform(),
        "commit": measured_commit(),
    }


def write_results(name: str, result: Mapping[str, Any]) -> Path:
    """``bench/results/<name>.json`` with the machine facts alongside."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    body = {"benchmark": name, "machine": machine(), **result}
    path.write_text(json.dumps(body, indent=2, default=_json) + "\n", encoding="utf-8")
    print(f"wrote {path.relative_to(RESULTS.parent.parent)}")
    return path


def _json(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 6)
    return str(value)


def plot(name: str, draw: Callable[[Any], None], *, title: str) -> Path:
    """``bench/results/<name>.png`` drawn by ``draw(axes)`` (matplotlib, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 4.5), dpi=100)
    draw(axes)
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    figure.tight_layout()
    path = RESULTS / f"{name}.png"
    RESULTS.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    print(f"wrote {path.relative_to(RESULTS.parent.parent)}")
    return path


def rate_errorbars(
    axes: Any,
    counts: Sequence[int],
    rates: Mapping[int, Mapping[str, Sequence[float]]],
    kinds: Sequence[str],
    *,
    xlabel: str,
    ylabel: str,
) -> None:
    """Median rate per process count, one line per kind, min-max as error bars (log2 x axis)."""
    for kind in kinds:
        med = [statistics.median(rates[c][kind]) for c in counts]
        lo = [med[i] - min(rates[c][kind]) for i, c in enumerate(counts)]
        hi = [max(rates[c][kind]) - med[i] for i, c in enumerate(counts)]
        axes.errorbar(counts, med, yerr=[lo, hi], marker="o", capsize=4, label=kind)
    axes.set_xscale("log", base=2)
    axes.set_xticks(counts, [str(c) for c in counts])
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.legend()


AUDIT_LOCK_KEY = 0x7467_0001
"""The audit chain's advisory lock (`toolgate.store.postgres`'s ``_AUDIT_LOCK``)."""


class LockWaits:
    """How long backends of one database waited for one advisory lock, read from PostgreSQL's
    own lock table (`pg_locks`: the backends whose request for the lock is not granted yet) by a
    thread of the benchmark's parent process, with a connection of its own, every ``interval_s``:
    no code of the store is wrapped or timed. ``waited_s`` is the number of waiting backends
    integrated over time (each sample counts for the time since the one before), so
    ``waited_s / (worker time)`` is the share of the workers' time spent waiting for the lock.
    A sample costs one query: every contender of a round is sampled alike."""

    def __init__(self, url: str, key: int = AUDIT_LOCK_KEY, interval_s: float = 0.005) -> None:
        import threading

        self.url, self.interval_s = url, interval_s
        self.sql = (
            "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            f" AND classid = {key >> 32} AND objid = {key & 0xFFFF_FFFF} AND objsubid = 1"
        )
        self.waited_s = 0.0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._ready = threading.Event()

    def _run(self) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            self._ready.set()
            last = time.perf_counter()
            while not self._stop.wait(self.interval_s):
                waiting = int(conn.execute(self.sql).fetchone()[0])  # type: ignore[index]
                moment = time.perf_counter()
                self.waited_s += waiting * (moment - last)
                self.samples, last = self.samples + 1, moment

    def __enter__(self) -> LockWaits:
        self._thread.start()
        self._ready.wait(30)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


def process_round(
    target: Callable[..., None],
    processes: int,
    args: Callable[[int, Any, Any, Any], tuple[Any, ...]],
    *,
    feed: Callable[[Any], None] | None = None,
    watch: contextlib.AbstractContextManager[Any] | None = None,
) -> list[tuple[Any, ...]]:
    """Run ``processes`` spawned workers from one start signal; their reports, one each.

    ``args(i, ready, go, out)`` gives worker ``i``'s arguments: it sets ``ready`` once set up,
    waits for ``go``, and puts one report tuple on ``out`` (the first two items its start and end
    times). ``feed(queue)``, when given, fills a shared work queue passed as the last argument.
    ``watch`` (a `LockWaits`), when given, runs from just before the start signal until every
    report is in."""
    ctx = mp.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    queue = ctx.Queue() if feed is not None else None
    readies = [ctx.Event() for _ in range(processes)]
    procs = []
    for i in range(processes):
        extra = (queue,) if queue is not None else ()
        procs.append(ctx.Process(target=target, args=(*args(i, readies[i], go, out), *extra)))
    for p in procs:
        p.start()
    if feed is not None:
        feed(queue)
    for r in readies:
        r.wait(120)
    with watch if watch is not None else contextlib.nullcontext():
        go.set()
        reports = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(60)
    return reports


def boxplot(axes: Any, samples: Mapping[str, Sequence[float]], *, ylabel: str, scale: float = 1000.0) -> None:
    """Box plot of per-round times (milliseconds by default)."""
    names = list(samples)
    axes.boxplot([[s * scale for s in samples[n]] for n in names], showfliers=True)
    axes.set_xticks(range(1, len(names) + 1), names, rotation=15, fontsize=8)
    axes.set_ylabel(ylabel)
