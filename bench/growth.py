"""Growth over a 200-call thread: per-call time and checkpoint bytes per turn, on SQLite.

One thread per contender; at every call the user asks again, the scripted model calls
``lookup_order`` and answers. Calls alternate between the contenders (bare call 1, toolgate call 1,
bare call 2, ...). The bare graph is `create_react_agent` with a plain tool doing the same read;
toolgate runs with its thread budgets raised so that 200 calls are allowed (budgets and the rate
limiter still run). Checkpoint bytes per turn are the bytes the turn added to the saver's tables
for that thread (checkpoint and metadata blobs plus pending writes).

For the first and the last call, the bytes are broken down by part (`turn_parts`): per channel,
its value in the checkpoint blobs and its pending writes (the seal's share of each ``bookkeeping``
write apart, as ``bookkeeping: seal``); LangGraph's ``channel_versions`` and
``versions_seen``; the metadata; the rest of each blob (its framing, id, timestamp and
``updated_channels``); with the number of checkpoints (steps) and of messages the turn added.

Run: ``.venv/bin/python bench/growth.py [--full]`` (``--rounds`` is the number of calls)
"""

from __future__ import annotations

import sqlite3
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import ormsgpack
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


def turn_rows(db: str, thread: str) -> tuple[set[str], set[tuple[str, str, int]]]:
    """The ids of the thread's checkpoints and of its pending writes (to tell a turn's new rows)."""
    with sqlite3.connect(db) as conn:
        checkpoints = {
            r[0] for r in conn.execute("SELECT checkpoint_id FROM checkpoints WHERE thread_id = ?", (thread,))
        }
        writes = {
            (r[0], r[1], r[2])
            for r in conn.execute(
                "SELECT checkpoint_id, task_id, idx FROM writes WHERE thread_id = ?", (thread,)
            )
        }
    return checkpoints, writes


def channel_part(channel: str) -> str:
    """The part of the breakdown a channel belongs to: LangGraph's own channels grouped."""
    if channel.startswith("branch:"):
        return "branch:*"
    return channel


def turn_parts(
    saver: Any, db: str, thread: str, before: tuple[set[str], set[tuple[str, str, int]]]
) -> dict[str, Any]:
    """The bytes one turn added to ``thread``, by part (``before``: `turn_rows` before the turn)."""
    values: Counter[str] = Counter()
    writes: Counter[str] = Counter()
    parts: Counter[str] = Counter()
    steps = 0
    with sqlite3.connect(db) as conn:
        for cid, kind, blob, meta in conn.execute(
            "SELECT checkpoint_id, type, checkpoint, metadata FROM checkpoints WHERE thread_id = ?", (thread,)
        ):
            if cid in before[0]:
                continue
            steps += 1
            checkpoint = saver.serde.loads_typed((kind, blob))
            inside = 0
            for channel, value in checkpoint["channel_values"].items():
                size = len(saver.serde.dumps_typed(value)[1])
                values[channel_part(channel)] += size
                inside += size
            for part in ("channel_versions", "versions_seen"):
                size = len(ormsgpack.packb(checkpoint[part]))
                parts[part] += size
                inside += size
            parts["blob framing, id, ts, updated_channels"] += len(blob) - inside
            parts["metadata"] += len(meta)
        for cid, task, idx, channel, kind, value in conn.execute(
            "SELECT checkpoint_id, task_id, idx, channel, type, value FROM writes WHERE thread_id = ?",
            (thread,),
        ):
            if (cid, task, idx) in before[1]:
                continue
            if channel == "bookkeeping":  # the seal's share of it apart (it is written at every step)
                written = saver.serde.loads_typed((kind, value))
                if isinstance(written, dict) and "seal" in written:
                    seal = len(saver.serde.dumps_typed(written["seal"])[1])
                    writes["bookkeeping: seal"] += seal
                    writes["bookkeeping"] += len(value) - seal
                    continue
            writes[channel_part(channel)] += len(value)
    total = sum(values.values()) + sum(writes.values()) + sum(parts.values())
    return {
        "total": total,
        "checkpoints": steps,
        "channel_values": dict(values.most_common()),
        "writes": dict(writes.most_common()),
        **dict(parts),
    }


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
        breakdown: dict[str, dict[str, Any]] = {"bare": {}, "toolgate": {}}
        with open_saver("sqlite", ckpt) as saver:
            bare = create_react_agent(script(calls, "b"), [plain_tool(demo)], checkpointer=saver)
            toolgate = demo.graph(script(calls, "g"), saver)
            runs = {
                "bare": lambda cfg: bare.invoke({"messages": [HumanMessage("Order O-5512?")]}, cfg),
                "toolgate": lambda cfg: toolgate.invoke(
                    {"messages": [HumanMessage("Order O-5512?")]}, cfg, context=context
                ),
            }
            for n in range(calls):
                broken_down = n in (0, calls - 1)
                for name, run in runs.items():
                    thread = f"growth-{name}"
                    rows = turn_rows(ckpt, thread) if broken_down else None
                    before = thread_bytes(ckpt, thread)
                    started = time.perf_counter()
                    run({"configurable": {"thread_id": thread}})
                    series[name]["seconds"].append(time.perf_counter() - started)
                    series[name]["bytes"].append(thread_bytes(ckpt, thread) - before)
                    if rows is not None:
                        parts = turn_parts(saver, ckpt, thread, rows)
                        cfg = {"configurable": {"thread_id": thread}}
                        graph = bare if name == "bare" else toolgate
                        parts["messages_in_thread"] = len(graph.get_state(cfg).values["messages"])
                        breakdown[name][f"call {n + 1}"] = parts
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
            "measure": f"checkpoint bytes per turn, median of calls {calls - WINDOW + 1}-{calls}",
            "toolgate": facts["toolgate"]["bytes_median_last"],
            "bare": facts["bare"]["bytes_median_last"],
            "ratio": facts["toolgate"]["bytes_median_last"] / facts["bare"]["bytes_median_last"],
            "target": "",
            "verdict": "",
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
    for call in ("call 1", f"call {calls}"):
        parts_rows = []
        keys = sorted(
            {f"values: {k}" for n in breakdown for k in breakdown[n][call]["channel_values"]}
            | {f"writes: {k}" for n in breakdown for k in breakdown[n][call]["writes"]}
            | {k for n in breakdown for k, v in breakdown[n][call].items() if not isinstance(v, dict)}
        )
        for key in keys:
            got = {}
            for name in breakdown:
                where, _, channel = key.partition(": ")
                part = breakdown[name][call]
                got[name] = (
                    part.get({"values": "channel_values", "writes": "writes"}[where], {}).get(channel, 0)
                    if channel and where in ("values", "writes")
                    else part.get(key, 0)
                )
            parts_rows.append({"part": key, **got})
        print_table(f"checkpoint bytes of {call}, by part", parts_rows)
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
            "breakdown": breakdown,
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
