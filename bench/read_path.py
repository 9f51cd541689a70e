"""Read path: one read tool call end to end, toolgate against bare LangGraph on the same saver.

Each round is a new thread: a scripted model asks for ``lookup_order`` of cust-ada's order
O-5512, the tool reads the order from the demo system of record, the model answers. Contenders,
alternated every round, all on the same checkpointer kind and the same store file or database:

- ``react``: `langgraph.prebuilt.create_react_agent` with a plain `StructuredTool` doing the same
  SQL read through the same store (the baseline every ratio divides by);
- ``toolnode``: a plain `StateGraph` of a model node and a `ToolNode`;
- ``toolgate``: toolgate's graph (`build_graph`) with the demo release.

SQLite always (SqliteSaver on a file); PostgreSQL when TOOLGATE_BENCH_PG_URL or
TOOLGATE_TEST_PG_URL is set (PostgresSaver). Store units of work are counted per call.

Run: ``.venv/bin/python bench/read_path.py [--full]``
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from _common import (  # bench/ is on sys.path when run as a script
    CpuClock,
    Demo,
    SaverCounter,
    StoreCounter,
    alternate,
    arguments,
    boxplot,
    delta,
    fresh_pg_database,
    new_key,
    open_saver,
    open_store,
    pg_url,
    plot,
    print_table,
    ratio,
    spread,
    verdict,
    write_results,
)
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import StructuredTool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, create_react_agent, tools_condition

from toolgate.testing import ScriptedChatModel, ai, tool_call

TARGET = 1.2
ORDER = "O-5512"
QUESTION = "Where is my order O-5512?"


def script(rounds: int, prefix: str) -> ScriptedChatModel:
    """A call then an answer, for every round (warm-up included)."""
    responses = []
    for n in range(rounds):
        responses += [
            ai("", tool_call("lookup_order", {"order_id": ORDER}, f"{prefix}{n}")),
            ai("Here it is."),
        ]
    return ScriptedChatModel(responses=responses)


def plain_tool(demo: Demo) -> StructuredTool:
    """The same read as toolgate's handler (`DemoSystem.order`), as a plain LangChain tool."""
    tenant = demo.principals["cust-ada"].tenant_id

    def lookup_order(order_id: str) -> dict[str, Any]:
        """Look up one of the customer's orders by its id."""
        return demo.system.order(tenant, order_id)

    return StructuredTool.from_function(lookup_order)


def toolnode_graph(model: ScriptedChatModel, tool: StructuredTool, saver: Any) -> Any:
    bound = model.bind_tools([tool])

    def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [bound.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", call_model)
    builder.add_node("tools", ToolNode([tool]))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition)
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=saver)


def check_answer(state: dict[str, Any], name: str) -> None:
    reads = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert len(reads) == 1 and ORDER in str(reads[0].content), f"{name}: no order read in {reads}"


def run_kind(kind: str, where_store: str, where_saver: str, rounds: int) -> dict[str, Any]:
    store = open_store(kind, where_store, key=new_key())
    demo = Demo(store)
    counter = StoreCounter(store)
    total = rounds + 1
    with open_saver(kind, where_saver) as saver:
        saver_counter = SaverCounter(saver)
        tool = plain_tool(demo)
        react = create_react_agent(script(total, "r"), [tool], checkpointer=saver)
        toolnode = toolnode_graph(script(total, "n"), tool, saver)
        toolgate = demo.graph(script(total, "g"), saver)
        context = demo.context()
        counts: dict[str, dict[str, int]] = {}
        cpu = CpuClock()

        def run(name: str, graph: Any, **extra: Any) -> Any:
            def one(n: int) -> float:
                config = {"configurable": {"thread_id": f"{name}-{kind}-{n}"}}
                store_before, saver_before = counter.snapshot(), saver_counter.snapshot()
                out: dict[str, Any] = {}
                cpu.start()
                seconds = _time(
                    lambda: out.update(graph.invoke({"messages": [HumanMessage(QUESTION)]}, config, **extra))
                )
                cpu.stop(name, n)
                check_answer(out, name)
                counts[name] = {
                    **delta(counter.snapshot(), store_before),
                    **delta(saver_counter.snapshot(), saver_before),
                }
                return seconds

            return one

        samples = alternate(
            rounds,
            {
                "react": run("react", react),
                "toolnode": run("toolnode", toolnode),
                "toolgate": run("toolgate", toolgate, context=context),
            },
        )
    store.close()
    return {"samples": samples, "counts": counts, "cpu": cpu}


def _time(fn: Any) -> float:
    import time

    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def main() -> None:
    args = arguments(__doc__.splitlines()[0], quick=15, full=60)
    kinds: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        kinds["sqlite"] = run_kind(
            "sqlite", str(Path(tmp) / "store.sqlite"), str(Path(tmp) / "ckpt.sqlite"), args.rounds
        )
    url = pg_url()
    if url:
        with fresh_pg_database(url) as db:
            kinds["postgres"] = run_kind("postgres", db, db, args.rounds)
    else:
        print("read_path: PostgreSQL skipped (set TOOLGATE_BENCH_PG_URL or run via scripts/with-postgres.sh)")

    rows, result = [], {"target_ratio": TARGET, "rounds": args.rounds, "kinds": {}}
    for kind, data in kinds.items():
        samples = data["samples"]
        entry: dict[str, Any] = {
            "spread_s": {n: spread(s) for n, s in samples.items()},
            "counts_per_call": data["counts"],
        }
        for subject in ("toolnode", "toolgate"):
            r = ratio(samples[subject], samples["react"])
            entry[f"{subject}_vs_react"] = r
            cpu_r = data["cpu"].ratio(subject, "react")
            entry[f"{subject}_vs_react_cpu"] = cpu_r
            c = data["counts"][subject]
            rows.append(
                {
                    "saver": kind,
                    "contender": subject,
                    "median_ms": spread(samples[subject])["median"] * 1000,
                    "react_ms": spread(samples["react"])["median"] * 1000,
                    "ratio": r["ratio"],
                    "rounds_min-max": f"{r['round_min']:.2f}-{r['round_max']:.2f}",
                    "target": f"<= {TARGET}" if subject == "toolgate" else "",
                    "verdict": verdict(r["ratio"], TARGET) if subject == "toolgate" else "",
                    "cpu_ms": cpu_r["median_ms"],
                    "cpu_ratio": cpu_r["ratio"],
                    "store_commits": c.get("write_tx", 0),
                    "audit": c.get("audit", 0),
                    "read_tx": c.get("read_tx", 0),
                    "sqlite_conns": c.get("connections", 0) if kind == "sqlite" else "pool",
                    "store_stmts": c.get("statements", 0),
                    "ckpt_commits": c.get("checkpoint_put", 0) + c.get("checkpoint_writes", 0),
                }
            )
        result["kinds"][kind] = {**entry, "samples_s": samples, "cpu_samples_s": data["cpu"].samples}
    result["table"] = rows
    print_table(
        f"read path: one read call end to end (target toolgate <= {TARGET}x create_react_agent)", rows
    )
    write_results("read_path", result)

    def draw(axes: Any) -> None:
        merged = {f"{n}\n{k}": s for k, d in kinds.items() for n, s in d["samples"].items()}
        boxplot(axes, merged, ylabel="ms per read call (one thread each)")

    plot("read_path", draw, title=f"Read call end to end, {args.rounds} alternated rounds")


if __name__ == "__main__":
    main()
