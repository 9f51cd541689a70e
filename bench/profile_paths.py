"""cProfile on every thread of toolgate's read call, approved write and one delivery (evidence for BENCHMARKS.md).

Runs the flows of ``read_path.py`` and ``write_path.py`` (SQLite saver and store, and PostgreSQL's
when TOOLGATE_BENCH_PG_URL or TOOLGATE_TEST_PG_URL is set) for toolgate and
for their bare baselines (``create_react_agent``; the plain LangGraph approval flow), and
``Executor.deliver`` of an approved operation (``throughput.py``'s unit), ``--rounds`` times each
after one warm-up. Every thread is profiled, not only the caller's: LangGraph writes checkpoints
on a thread of its own (our serde and seals run there), handlers run on toolgate's worker
threads. A `cProfile.Profile` is started in each thread when it starts (`threading.setprofile`)
and in the main thread, each timed by its own thread's CPU clock (`time.thread_time_ns`), so a
thread waiting for a lock, the disk or the GIL costs nothing; a flow's figures are the difference
of every thread's stats after and before its profiled rounds, merged.

Writes ``bench/results/profile_{read,write,deliver}.txt`` (``..._postgres.txt`` for PostgreSQL):
CPU per call by thread (main, LangGraph's executor threads, toolgate's handler workers) for
toolgate and its baseline, then
toolgate's functions by own time and by cumulative time, and the baseline's by cumulative time.
The profiler's own overhead roughly doubles CPU; compare entries with each other and with the
baseline's, never with the benches' figures.

Run: ``.venv/bin/python bench/profile_paths.py [--rounds N]``
"""

from __future__ import annotations

import cProfile
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import (  # bench/ is on sys.path
    RESULTS,
    Demo,
    arguments,
    fresh_pg_database,
    new_key,
    open_saver,
    open_store,
    pg_url,
)
from langchain_core.messages import HumanMessage
from langgraph.prebuilt import create_react_agent
from langgraph.types import Command
from read_path import QUESTION, plain_tool
from read_path import script as read_script
from write_path import ORDER, REQUEST, plain_graph
from write_path import script as write_script

from toolgate.graph.review.decisions import decide

Stats = dict[tuple[str, int, str], tuple[int, int, float, float, dict[Any, Any]]]
"""pstats' raw form: function -> (primitive calls, calls, own time, cumulative time, callers)."""


class ThreadProfiles:
    """One `cProfile.Profile` per thread, on that thread's CPU clock, for the process's life.

    Threads started after `install` get theirs from `threading.setprofile`'s hook on their first
    event; the main thread's starts in `install`. Profiles are never stopped or cleared from
    another thread (lsprof is not made for that): a window is the difference of two snapshots."""

    def __init__(self) -> None:
        self._profiles: list[tuple[threading.Thread, cProfile.Profile]] = []
        self._final: dict[int, Stats] = {}  # stats of threads that have ended, by index
        self._lock = threading.Lock()

    def install(self) -> None:
        threading.setprofile(self._start_here)
        self._add()

    def _start_here(self, _frame: Any, _event: str, _arg: Any) -> None:
        sys.setprofile(None)
        self._add()

    def _add(self) -> None:
        profile = cProfile.Profile(time.thread_time_ns, 1e-9)
        with self._lock:
            self._profiles.append((threading.current_thread(), profile))
        profile.enable()

    def snapshot(self) -> list[tuple[str, Stats]]:
        """Every thread's stats so far (calls still running are not in them yet)."""
        with self._lock:
            profiles = list(self._profiles)
        out = []
        for i, (thread, profile) in enumerate(profiles):
            stats = self._final.get(i)
            if stats is None:
                ended = not thread.is_alive()
                profile.snapshot_stats()  # reads the counters; the profile keeps running
                stats = dict(profile.stats)  # type: ignore[attr-defined]
                if ended:
                    self._final[i] = stats
            out.append((thread.name, stats))
        return out

    def window(self, run: Callable[[], None]) -> list[tuple[str, Stats]]:
        """Each thread's stats of what ``run`` did (threads that did nothing are left out). The
        caller's own profile is paused while the snapshots are taken, so they are not in it."""
        mine = next(p for t, p in self._profiles if t is threading.current_thread())
        mine.disable()
        before = dict(enumerate(s for _, s in self.snapshot()))  # threads only ever join the end
        mine.enable()
        run()
        mine.disable()
        after = self.snapshot()
        mine.enable()
        out = []
        for i, (name, stats) in enumerate(after):
            diff = _subtract(stats, before.get(i, {}))
            if diff:
                out.append((name, diff))
        return out


def _subtract(after: Stats, before: Stats) -> Stats:
    out: Stats = {}
    for func, (cc, nc, tt, ct, callers) in after.items():
        b = before.get(func)
        if b is not None:
            cc, nc, tt, ct = cc - b[0], nc - b[1], tt - b[2], ct - b[3]
            callers = {
                c: tuple(x - y for x, y in zip(v, b[4].get(c, (0,) * len(v)), strict=True))
                for c, v in callers.items()
            }
            callers = {c: v for c, v in callers.items() if v[1] > 0}
        if nc > 0:
            out[func] = (cc, nc, tt, ct, callers)
    return out


def _role(thread: str) -> str:
    """A thread's role: its name without the pool's numbering."""
    if thread == "MainThread":
        return "main (the caller)"
    if thread.startswith("ThreadPoolExecutor"):
        return "LangGraph executor (checkpoint writes, parallel tasks)"
    return re.sub(r"[-_]?\d+(_\d+)?$", "", thread)


def _merged(threads: list[tuple[str, Stats]]) -> dict[tuple[str, int, str], tuple[int, float, float]]:
    """Function -> (calls, own seconds, cumulative seconds), summed over the threads (a
    function's cumulative time counts each thread's outermost call once, as pstats does)."""
    out: dict[tuple[str, int, str], tuple[int, float, float]] = {}
    for _, stats in threads:
        for func, (_cc, nc, tt, ct, _callers) in stats.items():
            n, t, c = out.get(func, (0, 0.0, 0.0))
            out[func] = (n + nc, t + tt, c + ct)
    return out


_ROOTS = tuple(str(p) for p in (Path(__file__).resolve().parent.parent, Path(sys.prefix)))


def _label(func: tuple[str, int, str]) -> str:
    path, line, name = func
    if path == "~":
        return name
    for root in _ROOTS:
        path = path.removeprefix(root + "/")
    path = re.sub(r"^.*/site-packages/", "", re.sub(r"^.*/lib/python3\.\d+/", "", path))
    return f"{path}:{line}({name})"


def by_role(threads: list[tuple[str, Stats]], calls: int) -> dict[str, float]:
    """CPU ms per call by thread role (the sum of own times, the profiler's overhead included)."""
    out: dict[str, float] = {}
    for name, stats in threads:
        role = _role(name)
        out[role] = out.get(role, 0.0) + sum(v[2] for v in stats.values()) * 1000 / calls
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def listing(threads: list[tuple[str, Stats]], calls: int, key: int, limit: int) -> str:
    """The ``limit`` functions with the most own (``key`` 1) or cumulative (``key`` 2) time, in
    microseconds of CPU per profiled call of the flow."""
    rows = sorted(_merged(threads).items(), key=lambda kv: -kv[1][key])[:limit]
    lines = [f"{'calls/flow':>10} {'own us':>9} {'cum us':>9}  function"]
    for func, (n, tt, ct) in rows:
        lines.append(f"{n / calls:>10.1f} {tt * 1e6 / calls:>9.1f} {ct * 1e6 / calls:>9.1f}  {_label(func)}")
    return "\n".join(lines) + "\n"


def report(name: str, what: str, calls: int, subject: list[tuple[str, Stats]], base: Any) -> None:
    """``base``: the baseline's threads and its label, or None."""
    lines = [f"# {what}: {calls} profiled calls, every thread, thread-CPU clock", ""]
    sides = [("toolgate", subject)] + ([(base[1], base[0])] if base else [])
    lines.append("CPU ms per call by thread (cProfile's overhead included):")
    lines.append("")
    lines.append("| thread | " + " | ".join(s for s, _ in sides) + " |")
    lines.append("| --- |" + " --- |" * len(sides))
    roles = {side: by_role(threads, calls) for side, threads in sides}
    names = list(dict.fromkeys(r for side, _ in sides for r in roles[side]))
    for r in names:
        lines.append(f"| {r} | " + " | ".join(f"{roles[s].get(r, 0.0):.2f}" for s, _ in sides) + " |")
    lines.append("| all threads | " + " | ".join(f"{sum(roles[s].values()):.2f}" for s, _ in sides) + " |")
    lines += ["", f"## toolgate, every thread, by own time ({calls} calls)", ""]
    lines.append(listing(subject, calls, 1, 60))
    lines += [f"## toolgate, every thread, by cumulative time ({calls} calls)", ""]
    lines.append(listing(subject, calls, 2, 80))
    if base:
        lines += [f"## {base[1]}, every thread, by cumulative time ({calls} calls)", ""]
        lines.append(listing(base[0], calls, 2, 50))
    path = RESULTS / f"profile_{name}.txt"
    RESULTS.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
    print(f"wrote {path.relative_to(RESULTS.parent.parent)}")
    for side, _ in sides:
        print(f"  {name} {side}: " + ", ".join(f"{r} {ms:.2f}" for r, ms in roles[side].items()))


def main() -> None:
    args = arguments(__doc__.splitlines()[0], quick=20, full=60)
    profiles = ThreadProfiles()
    profiles.install()  # before any thread is started: every pool thread gets its profile
    with tempfile.TemporaryDirectory() as tmp:
        profile_kind(
            "sqlite", str(Path(tmp) / "store.sqlite"), str(Path(tmp) / "ckpt.sqlite"), args.rounds, profiles
        )
    url = pg_url()
    if url:
        with fresh_pg_database(url) as db:
            profile_kind("postgres", db, db, args.rounds, profiles)
    else:
        print(
            "profile_paths: PostgreSQL skipped (set TOOLGATE_BENCH_PG_URL or run via scripts/with-postgres.sh)"
        )


def profile_kind(
    kind: str, where_store: str, where_saver: str, rounds: int, profiles: ThreadProfiles
) -> None:
    """Profile the three flows on one backend (store and saver of ``kind``)."""
    suffix = "" if kind == "sqlite" else f"_{kind}"
    store = open_store(kind, where_store, key=new_key())
    demo = Demo(store)
    with open_saver(kind, where_saver) as saver:
        context = demo.context()

        def question() -> dict[str, Any]:  # a new message each time: a run gives it its id
            return {"messages": [HumanMessage(QUESTION)]}

        graph = demo.graph(read_script(rounds + 1, "r"), saver)
        react = create_react_agent(read_script(rounds + 1, "b"), [plain_tool(demo)], checkpointer=saver)

        def reads(g: Any, tag: str, **extra: Any) -> Callable[[], None]:
            def run() -> None:
                for n in range(rounds):
                    g.invoke(question(), {"configurable": {"thread_id": f"{tag}{n}"}}, **extra)

            return run

        graph.invoke(question(), {"configurable": {"thread_id": "r-warm"}}, context=context)
        react.invoke(question(), {"configurable": {"thread_id": "b-warm"}})
        subject = profiles.window(reads(graph, "r", context=context))
        base = profiles.window(reads(react, "b"))
        report(
            f"read{suffix}",
            f"read call (lookup_order, then an answer), {kind}",
            rounds,
            subject,
            (base, "create_react_agent"),
        )

        write_app = demo.app(write_script(rounds, "w"))
        gateway, wgraph = write_app.gateway, write_app.compiled(checkpointer=saver)
        plain = plain_graph(demo, write_script(rounds, "p"), saver)
        fiona = demo.principals["fiona"]

        def reset() -> None:
            with store.transaction() as tx:
                tx.execute("UPDATE sor_orders SET refunded_cents = 0 WHERE order_id = ?", (ORDER,))

        def write(n: Any) -> None:
            reset()
            config = {"configurable": {"thread_id": f"w{n}"}}
            paused = wgraph.invoke({"messages": [HumanMessage(REQUEST)]}, config, context=context)
            proposal = paused["__interrupt__"][0].value["toolgate"]["proposals"][0]
            decide(gateway, proposal["proposal_id"], fiona, "approve")
            wgraph.invoke(Command(resume={"wake": True}), config, context=type(context)())

        def plain_write(n: Any) -> None:
            reset()
            config = {"configurable": {"thread_id": f"p{n}"}}
            plain.invoke({"messages": [HumanMessage(REQUEST)]}, config)
            plain.invoke(Command(resume={"type": "approve"}), config)

        write("warm")
        plain_write("warm")
        subject = profiles.window(lambda: [write(n) for n in range(rounds)] and None)
        base = profiles.window(lambda: [plain_write(n) for n in range(rounds)] and None)
        report(
            f"write{suffix}",
            f"approved write (proposal, pause, decide, resume, refund, answer), {kind}",
            rounds,
            subject,
            (base, "plain LangGraph approval flow"),
        )

        keys = demo.approved_restarts(gateway, rounds + 1, "prof")
        gateway.executor.deliver(keys[0], worker_id="w-warm", wait_s=60)
        subject = profiles.window(
            lambda: [gateway.executor.deliver(k, worker_id="w", wait_s=60) for k in keys[1:]] and None
        )
        report(
            f"deliver{suffix}",
            f"Executor.deliver of an approved restart_service, {kind}",
            rounds,
            subject,
            None,
        )
    store.close()


if __name__ == "__main__":
    main()
