"""Ownership lookups of a read call: what each part costs end to end, by experiment (issue 31).

A read call looks its resource's owner up twice: at dispatch (`toolgate.policy.authorization.
check_resource`, a hop of its own to a loaded-code worker) and at execute (in front of the
handler, in the handler's hop: `toolgate.tools.loaded_code.start_checked`). This bench runs
``read_path.py``'s read call in variants that each take one part away, alternated every round
with ``create_react_agent`` on the same saver and store, so the differences bound what removing
that part could ever save:

- ``toolgate``: as it is;
- ``inline_dispatch``: dispatch's lookup run on the caller's thread (no hop; no deadline either);
- ``no_dispatch_lookup``: no lookup at dispatch (execute's still runs);
- ``no_lookups``: no lookup at all.

The variants are experiments only: each one drops containment or a check, and none may ever be
the gateway's behaviour. Wall and process CPU per call, medians; SQLite always, PostgreSQL when
TOOLGATE_BENCH_PG_URL or TOOLGATE_TEST_PG_URL is set. Prints a table; writes nothing.

Run: ``.venv/bin/python bench/ownership_lookups.py [--full]``
"""

from __future__ import annotations

import contextlib
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _common import (  # bench/ is on sys.path when run as a script
    CpuClock,
    Demo,
    alternate,
    arguments,
    fresh_pg_database,
    new_key,
    open_saver,
    open_store,
    pg_url,
    print_table,
)
from langchain_core.messages import HumanMessage
from langgraph.prebuilt import create_react_agent
from read_path import QUESTION, plain_tool, script

import toolgate.policy.authority as authority
import toolgate.policy.authorization as authorization
from toolgate.tools import loaded_code

VARIANTS = ("toolgate", "inline_dispatch", "no_dispatch_lookup", "no_lookups")


class _InlineLookups:
    """`toolgate.tools.loaded_code` with `lookup` run on the caller's thread."""

    @staticmethod
    def lookup(fn: Any, *args: Any) -> Any:
        return fn(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(loaded_code, name)


@contextlib.contextmanager
def variant(name: str) -> Iterator[None]:
    """The gateway with the part ``name`` takes away gone, for one call."""
    ownership, at_execute = authority.Authority.ownership, authority.Authority.at_execute

    def deferred_nothing(self: Any, *args: Any, **kwargs: Any) -> Any:
        verdict = at_execute(self, *args, **kwargs)
        return authority.Verdict(verdict.spec, verdict.arguments, verdict.rejection, verdict.fingerprint)

    try:
        if name == "inline_dispatch":
            authorization.loaded_code = _InlineLookups()  # type: ignore[assignment]
        if name in ("no_dispatch_lookup", "no_lookups"):
            authority.Authority.ownership = lambda self, spec, principal, arguments: None  # type: ignore[method-assign]
        if name == "no_lookups":
            authority.Authority.at_execute = deferred_nothing  # type: ignore[method-assign]
        yield
    finally:
        authorization.loaded_code = loaded_code
        authority.Authority.ownership = ownership  # type: ignore[method-assign]
        authority.Authority.at_execute = at_execute  # type: ignore[method-assign]


def run_kind(kind: str, where_store: str, where_saver: str, rounds: int) -> list[dict[str, Any]]:
    store = open_store(kind, where_store, key=new_key())
    demo = Demo(store)
    cpu = CpuClock()
    with open_saver(kind, where_saver) as saver:
        graphs: dict[str, Any] = {
            "react": create_react_agent(script(rounds + 1, "r"), [plain_tool(demo)], checkpointer=saver)
        }
        graphs.update({name: demo.graph(script(rounds + 1, name), saver) for name in VARIANTS})
        context = demo.context()

        def runner(name: str) -> Any:
            def one(n: int) -> float:
                extra = {} if name == "react" else {"context": context}
                config = {"configurable": {"thread_id": f"{name}-{kind}-{n}"}}
                with variant(name):
                    cpu.start()
                    started = time.perf_counter()
                    graphs[name].invoke({"messages": [HumanMessage(QUESTION)]}, config, **extra)
                    seconds = time.perf_counter() - started
                    cpu.stop(name, n)
                return seconds

            return one

        samples = alternate(rounds, {name: runner(name) for name in ("react", *VARIANTS)})
    store.close()
    react_wall, react_cpu = statistics.median(samples["react"]), statistics.median(cpu.samples["react"])
    toolgate_wall = statistics.median(samples["toolgate"])
    toolgate_cpu = statistics.median(cpu.samples["toolgate"])
    rows = []
    for name in VARIANTS:
        wall, used = statistics.median(samples[name]), statistics.median(cpu.samples[name])
        rows.append(
            {
                "saver": kind,
                "variant": name,
                "wall_ms": wall * 1000,
                "vs_react": wall / react_wall,
                "saves_wall_ms": (toolgate_wall - wall) * 1000,
                "cpu_ms": used * 1000,
                "cpu_vs_react": used / react_cpu,
                "saves_cpu_ms": (toolgate_cpu - used) * 1000,
            }
        )
    return rows


def main() -> None:
    args = arguments(__doc__.splitlines()[0], quick=40, full=120)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        rows += run_kind("sqlite", str(Path(tmp) / "store.sqlite"), str(Path(tmp) / "ckpt.sqlite"), args.rounds)
    url = pg_url()
    if url:
        with fresh_pg_database(url) as db:
            rows += run_kind("postgres", db, db, args.rounds)
    print_table("a read call's ownership lookups: each part taken away (experiments, not changes)", rows)


if __name__ == "__main__":
    main()
