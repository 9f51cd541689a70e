"""Every checkpoint commit of an approved write and of a read call, toolgate against its baseline.

Evidence for issue 31, not a timed benchmark: it answers "which steps and which checkpoint writes
does toolgate make beyond the bare LangGraph flow" without a profiler. Each flow runs once after a
warm-up on a fresh thread, on the same saver as its baseline (``write_path.py``'s plain approval
flow; ``read_path.py``'s `create_react_agent`), and every ``put`` and ``put_writes`` of the saver
is listed in order: the step (a put's metadata) or the task that wrote (a put_writes; ``input``
is the resume value a ``Command(resume=...)`` saves before any step), the channels, and the bytes
the saver's serde makes of them (for a put, the whole checkpoint, as SqliteSaver stores it; the
PostgreSQL saver stores the new channel values as blobs of their own, so read its bytes as an
upper bound). Each commit is one transaction of the saver.

``--durability exit`` runs toolgate's flows as LangGraph's ``durability="exit"`` would (the
baseline keeps its default), to show what that mode would commit; toolgate does not run so.

Run: ``.venv/bin/python bench/checkpoint_steps.py [--durability exit]`` (PostgreSQL too under
``scripts/with-postgres.sh``)
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from _common import (  # bench/ is on sys.path when run as a script
    Demo,
    fresh_pg_database,
    new_key,
    open_saver,
    open_store,
    pg_url,
    print_table,
)
from langchain_core.messages import HumanMessage
from langgraph.prebuilt import create_react_agent
from langgraph.types import Command
from read_path import QUESTION, plain_tool
from read_path import script as read_script
from write_path import ORDER, REQUEST, plain_graph
from write_path import script as write_script

from toolgate.graph.review.decisions import decide


class CommitLog:
    """Records every ``put`` and ``put_writes`` of ``saver`` (which it wraps) while ``on``."""

    def __init__(self, saver: Any) -> None:
        self.rows: list[dict[str, Any]] = []
        self.on = False
        put, put_writes, serde = saver.put, saver.put_writes, saver.serde

        def logged_put(config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
            if self.on:
                self.rows.append(
                    {
                        "commit": "put",
                        "step": metadata.get("step"),
                        "by": metadata.get("source"),
                        "channels": ",".join(sorted(new_versions)),
                        "bytes": len(serde.dumps_typed(checkpoint)[1]),
                    }
                )
            return put(config, checkpoint, metadata, new_versions)

        def logged_writes(config: Any, writes: Any, task_id: str, task_path: str = "") -> Any:
            if self.on:
                self.rows.append(
                    {
                        "commit": "put_writes",
                        "step": "",
                        "by": task_name(task_path),
                        "channels": ",".join(c for c, _ in writes),
                        "bytes": sum(len(serde.dumps_typed(v)[1]) for _, v in writes),
                    }
                )
            return put_writes(config, writes, task_id, task_path)

        saver.put, saver.put_writes = logged_put, logged_writes

    @contextlib.contextmanager
    def recording(self) -> Iterator[list[dict[str, Any]]]:
        self.rows, self.on = [], True
        try:
            yield self.rows
        finally:
            self.on = False


def task_name(task_path: str) -> str:
    """The node a task runs (``~__pregel_pull, model``), ``push`` for a `Send`'s task (the react
    agent's tool call), ``input`` for what a run saves before any step (a resume value)."""
    if not task_path:
        return "input"
    parts = task_path.split(", ")
    return "push" if parts[0] == "~__pregel_push" else parts[-1]


def summary(flow: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    puts = [r for r in rows if r["commit"] == "put"]
    writes = [r for r in rows if r["commit"] == "put_writes"]
    return {
        "flow": flow,
        "steps": len([r for r in puts if r["by"] == "loop"]),
        "puts": len(puts),
        "put_writes": len(writes),
        "commits": len(rows),
        "put_bytes": sum(r["bytes"] for r in puts),
        "writes_bytes": sum(r["bytes"] for r in writes),
    }


def run_kind(kind: str, where_store: str, where_saver: str, durability: str | None) -> None:
    store = open_store(kind, where_store, key=new_key())
    demo = Demo(store)
    fiona = demo.principals["fiona"]
    extra = {"durability": durability} if durability else {}
    with open_saver(kind, where_saver) as saver:
        log = CommitLog(saver)
        plain = plain_graph(demo, write_script(1, "p"), saver)
        app = demo.app(write_script(1, "g"))
        gateway, toolgate = app.gateway, app.compiled(checkpointer=saver)
        react = create_react_agent(read_script(2, "r"), [plain_tool(demo)], checkpointer=saver)
        reader = demo.graph(read_script(2, "q"), saver)
        context, resume_context = demo.context(), demo.context(user="fiona").__class__()

        def reset() -> None:
            with store.transaction() as tx:
                tx.execute("UPDATE sor_orders SET refunded_cents = 0 WHERE order_id = ?", (ORDER,))

        def plain_write(config: dict[str, Any]) -> None:
            reset()
            plain.invoke({"messages": [HumanMessage(REQUEST)]}, config)
            plain.invoke(Command(resume={"type": "approve"}), config)

        def toolgate_write(config: dict[str, Any]) -> None:
            reset()
            paused = toolgate.invoke({"messages": [HumanMessage(REQUEST)]}, config, context=context, **extra)
            proposal = paused["__interrupt__"][0].value["toolgate"]["proposals"][0]
            decide(gateway, proposal["proposal_id"], fiona, "approve")
            toolgate.invoke(Command(resume={"wake": True}), config, context=resume_context, **extra)

        flows: dict[str, Callable[[dict[str, Any]], None]] = {
            "plain approval flow": plain_write,
            "toolgate approved write": toolgate_write,
            "create_react_agent read": lambda c: react.invoke({"messages": [HumanMessage(QUESTION)]}, c),
            "toolgate read call": lambda c: reader.invoke(
                {"messages": [HumanMessage(QUESTION)]}, c, context=context, **extra
            ),
        }
        totals = []
        for name, flow in flows.items():
            flow({"configurable": {"thread_id": f"{name}-warm"}})
            with log.recording() as rows:
                flow({"configurable": {"thread_id": name}})
            print_table(f"{kind}: {name}, every checkpoint commit in order", rows)
            totals.append(summary(name, rows))
        print_table(f"{kind}: checkpoint commits per flow (toolgate durability: {durability or 'default'})", totals)
    store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--durability", choices=("exit", "async", "sync"), default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run_kind("sqlite", str(Path(tmp) / "store.sqlite"), str(Path(tmp) / "ckpt.sqlite"), args.durability)
    url = pg_url()
    if url:
        with fresh_pg_database(url) as db:
            run_kind("postgres", db, db, args.durability)
    else:
        print("checkpoint_steps: PostgreSQL skipped (set TOOLGATE_BENCH_PG_URL or run via scripts/with-postgres.sh)")


if __name__ == "__main__":
    main()
