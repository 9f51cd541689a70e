"""Growth over a 200-call thread: per-call time and checkpoint bytes per turn, on SQLite.

One thread per contender; at every call the user asks again, the scripted model calls
``lookup_order`` and answers. Calls alternate between the contenders (bare call 1, toolgate call 1,
bare call 2, ...). The bare graph is `create_react_agent` with a plain tool doing the same read;
toolgate runs with its thread budgets raised so that 200 calls are allowed (budgets and the rate
limiter still run). Checkpoint bytes per turn are the bytes the turn added to the saver's tables
for that thread (checkpoint and metadata blobs plus pending writes).

Run: ``.venv/bin/python bench/growth.py [--full]`` (``--rounds`` is the number of calls)
"""

from __future__ import annotations

import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import (  # bench/ is on sys.path when run as a script
    Demo,
    arguments,
    new_key,
    open_saver,
    open_store,
    plot,
    print_table,
    verdict,
    write_results,
)
from langchain_core.messages import HumanMessage
from langgraph.prebuilt import create_react_agent
from read_path import plain_tool, script

TARGET_BYTES = 1.1
WINDOW = 20
BIG = 10**6


def thread_bytes(db: str, thread: str) -> int:
    with sqlite3.connect(db) as conn:
        ck = conn.execute(
            "SELECT COALESCE(SUM(LENGTH(checkpoint)) + SUM(LENGTH(metadata)), 0) FROM checkpoints WHERE thread_id = ?",
            (thread,),
        ).fetchone()[0]
        wr = conn.execute(
            "SELECT COALESCE(SUM(LENGTH(value)), 0) FROM writes WHERE thread_id = ?", (thread,)
        ).fetchone()[0]
    return int(ck) + int(wr)


def main() -> None:
    args = arguments(__doc__.splitlines()[0], quick=200, full=200)
    calls = args.rounds
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = str(Path(tmp) / "ckpt.sqlite")
        store = open_store("sqlite", str(Path(tmp) / "store.sqlite"), key=new_key())
        demo = Demo(store)
        context = demo.context(
            max_tool_calls=BIG, max_model_turns=BIG, max_identical_calls=BIG, max_validation_retries=BIG
        )
        series: dict[str, dict[str, list[float]]] = {
            n: {"seconds": [], "bytes": []} for n in ("bare", "toolgate")
        }
        with open_saver("sqlite", ckpt) as saver:
            bare = create_react_agent(script(calls, "b"), [plain_tool(demo)], checkpointer=saver)
            toolgate = demo.graph(script(calls, "g"), saver)
            runs = {
                "bare": lambda cfg: bare.invoke({"messages": [HumanMessage("Order O-5512?")]}, cfg),
                "toolgate": lambda cfg: toolgate.invoke(
                    {"messages": [HumanMessage("Order O-5512?")]}, cfg, context=context
                ),
            }
            for _ in range(calls):
                for name, run in runs.items():
                    thread = f"growth-{name}"
                    before = thread_bytes(ckpt, thread)
                    started = time.perf_counter()
                    run({"configurable": {"thread_id": thread}})
                    series[name]["seconds"].append(time.perf_counter() - started)
                    series[name]["bytes"].append(thread_bytes(ckpt, thread) - before)
        store.close()

    def window(values: list[float], first: bool) -> float:
        return statistics.median(values[:WINDOW] if first else values[-WINDOW:])

    facts: dict[str, dict[str, float]] = {}
    for name, s in series.items():
        facts[name] = {
            "first_ms": window(s["seconds"], True) * 1000,
            "last_ms": window(s["seconds"], False) * 1000,
            "growth": window(s["seconds"], False) / window(s["seconds"], True),
            "bytes_last_turn": s["bytes"][-1],
            "bytes_first_turn": s["bytes"][0],
            "bytes_median_last": window(s["bytes"], False),
        }
    bytes_ratio = facts["toolgate"]["bytes_last_turn"] / facts["bare"]["bytes_last_turn"]
    first_ratio = facts["toolgate"]["bytes_first_turn"] / facts["bare"]["bytes_first_turn"]
    growth_ratio = facts["toolgate"]["growth"] / facts["bare"]["growth"]
    rows = [
        {
            "measure": "checkpoint bytes per turn at call 1",
            "toolgate": facts["toolgate"]["bytes_first_turn"],
            "bare": facts["bare"]["bytes_first_turn"],
            "ratio": first_ratio,
            "target": f"<= {TARGET_BYTES}",
            "verdict": verdict(first_ratio, TARGET_BYTES),
        },
        {
            "measure": f"checkpoint bytes per turn at call {calls}",
            "toolgate": facts["toolgate"]["bytes_last_turn"],
            "bare": facts["bare"]["bytes_last_turn"],
            "ratio": bytes_ratio,
            "target": f"<= {TARGET_BYTES}",
            "verdict": verdict(bytes_ratio, TARGET_BYTES),
        },
        {
            "measure": f"per-call time growth (median last {WINDOW} / first {WINDOW})",
            "toolgate": facts["toolgate"]["growth"],
            "bare": facts["bare"]["growth"],
            "ratio": growth_ratio,
            "target": "<= 1.0 (no worse than bare)",
            "verdict": verdict(growth_ratio, 1.0),
        },
        {
            "measure": f"per-call ms, median of calls {calls - WINDOW + 1}-{calls}",
            "toolgate": facts["toolgate"]["last_ms"],
            "bare": facts["bare"]["last_ms"],
            "ratio": facts["toolgate"]["last_ms"] / facts["bare"]["last_ms"],
            "target": "",
            "verdict": "",
        },
    ]
    print_table(f"growth over a {calls}-call thread (SQLite)", rows)
    write_results(
        "growth",
        {
            "calls": calls,
            "window": WINDOW,
            "target_bytes_ratio": TARGET_BYTES,
            "bytes_ratio": bytes_ratio,
            "first_bytes_ratio": first_ratio,
            "growth_ratio": growth_ratio,
            "facts": facts,
            "table": rows,
            "series": series,
        },
    )

    def draw(axes: Any) -> None:
        x = range(1, calls + 1)
        for name, s in series.items():
            axes.plot(x, [v * 1000 for v in s["seconds"]], label=f"{name}: ms per call", linewidth=1)
        axes.set_xlabel("call number in the thread")
        axes.set_ylabel("ms per call")
        twin = axes.twinx()
        for name, s in series.items():
            twin.plot(
                x, [b / 1e6 for b in s["bytes"]], "--", label=f"{name}: checkpoint MB per turn", linewidth=1
            )
        twin.set_ylabel("checkpoint MB written per turn (dashed)")
        lines = axes.get_legend_handles_labels()
        more = twin.get_legend_handles_labels()
        axes.legend(lines[0] + more[0], lines[1] + more[1], fontsize=8, loc="upper left")

    plot("growth", draw, title=f"Growth over a {calls}-call thread, SQLite, alternated calls")


if __name__ == "__main__":
    main()
