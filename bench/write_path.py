"""Approved write end to end, toolgate against the plain LangGraph approval flow on the same saver.

One round, one new thread: the scripted model asks for a refund of cust-ada's order O-5512;
``toolgate`` proposes, fiona approves through `toolgate.graph.review.decisions.decide`, the thread resumes
with ``Command(resume=...)``, the executor claims, runs the refund and records the outcome, the
model answers. The baseline ``plain`` graph does what a bare LangGraph app does: the model node,
an approval node that calls ``interrupt()``, a resume with the reviewer's decision, a `ToolNode`
running the same refund (`DemoSystem.refund`) on the same store, the model answers. Rounds
alternate; the order's refunded amount is reset between rounds (outside the timing).

Counted per approved write: checkpoint commits (``put`` + ``put_writes``), store commits, and
the audit appends among them; store statements (round trips, excluding BEGIN/COMMIT).

Run: ``.venv/bin/python bench/write_path.py [--full]``
"""

from __future__ import annotations

import tempfile
import time
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
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import StructuredTool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, interrupt

from toolgate.graph.review.decisions import decide
from toolgate.testing import ScriptedChatModel, ai, tool_call

TARGET_RATIO = 1.5
TARGET_COMMITS = 8
FLOOR_STEPS = ("proposal", "approval", "claim", "outcome")
"""The durable steps of an approved write the store must commit, one transaction and (on
PostgreSQL) one round trip each at the floor; the effect is the system of record's own commit and
the checkpoints at the interrupt and the end are the saver's (both sides make those)."""
TARGET_TRIPS_VS_FLOOR = 2.0
ORDER = "O-5512"
REQUEST = "My blender arrived broken, order O-5512. Please refund it."


def refund_args(n: int) -> dict[str, Any]:
    return {"order_id": ORDER, "amount_cents": 100 + (n % 50), "reason": "damaged"}


def script(rounds: int, prefix: str) -> ScriptedChatModel:
    responses = []
    for n in range(-1, rounds):
        responses += [ai("", tool_call("issue_refund", refund_args(n), f"{prefix}{n}")), ai("Refunded.")]
    return ScriptedChatModel(responses=responses)


def plain_graph(demo: Demo, model: ScriptedChatModel, saver: Any) -> Any:
    """The plain LangGraph approval flow: interrupt in a node, resume, `ToolNode` executes."""
    tenant = demo.principals["cust-ada"].tenant_id

    def issue_refund(
        order_id: str, amount_cents: int, reason: str, idempotency_key: str = ""
    ) -> dict[str, Any]:
        """Refund part of an order, in cents."""
        return demo.system.refund(tenant, order_id, amount_cents, idempotency_key or reason)

    tool = StructuredTool.from_function(issue_refund)
    bound = model.bind_tools([tool])

    def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [bound.invoke(state["messages"])]}

    def approval(state: MessagesState) -> Command[Any]:
        last = state["messages"][-1]
        assert isinstance(last, AIMessage)
        decision = interrupt(
            {"action_requests": [{"name": c["name"], "args": c["args"]} for c in last.tool_calls]}
        )
        if decision.get("type") != "approve":
            return Command(goto=END)
        keyed = AIMessage(
            content=last.content,
            id=last.id,
            tool_calls=[
                {**c, "args": {**c["args"], "idempotency_key": str(c["id"])}} for c in last.tool_calls
            ],
        )
        return Command(goto="tools", update={"messages": [keyed]})

    def route(state: MessagesState) -> str:
        last = state["messages"][-1]
        return "approval" if isinstance(last, AIMessage) and last.tool_calls else END

    builder = StateGraph(MessagesState)
    builder.add_node("model", call_model)
    builder.add_node("approval", approval, destinations=("tools", END))
    builder.add_node("tools", ToolNode([tool]))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", route, ["approval", END])
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=saver)


def completed(state: dict[str, Any], name: str) -> None:
    results = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert len(results) == 1 and "re_" in str(results[0].content), f"{name}: no refund in {results}"


def run_kind(kind: str, where_store: str, where_saver: str, rounds: int) -> dict[str, Any]:
    store = open_store(kind, where_store, key=new_key())
    demo = Demo(store)
    counter = StoreCounter(store)
    fiona = demo.principals["fiona"]
    with open_saver(kind, where_saver) as saver:
        saver_counter = SaverCounter(saver)
        plain = plain_graph(demo, script(rounds, "p"), saver)
        gw_model = script(rounds, "g")
        gateway_app = demo.app(gw_model)
        gateway, toolgate = gateway_app.gateway, gateway_app.compiled(checkpointer=saver)
        context, resume_context = demo.context(), demo.context(user="fiona").__class__()
        counts: dict[str, dict[str, int]] = {}
        steps: dict[str, list[dict[str, Any]]] = {}
        cpu = CpuClock()

        def reset() -> None:
            with store.transaction() as tx:
                tx.execute("UPDATE sor_orders SET refunded_cents = 0 WHERE order_id = ?", (ORDER,))

        def measure(name: str, flow: Any) -> Any:
            def one(n: int) -> float:
                reset()
                config = {"configurable": {"thread_id": f"{name}-{kind}-{n}"}}
                before, saver_before = counter.snapshot(), saver_counter.snapshot()
                logged = len(counter.log)
                cpu.start()
                started = time.perf_counter()
                final = flow(config)
                seconds = time.perf_counter() - started
                cpu.stop(name, n)
                completed(final, name)
                steps[name] = [
                    {"kind": k, "label": label, "statements": st, "round_trips": rt}
                    for k, label, st, rt in counter.log[logged:]
                ]
                counts[name] = {
                    **delta(counter.snapshot(), before),
                    **delta(saver_counter.snapshot(), saver_before),
                }
                return seconds

            return one

        def plain_flow(config: dict[str, Any]) -> Any:
            paused = plain.invoke({"messages": [HumanMessage(REQUEST)]}, config)
            assert "__interrupt__" in paused
            return plain.invoke(Command(resume={"type": "approve"}), config)

        def toolgate_flow(config: dict[str, Any]) -> Any:
            paused = toolgate.invoke({"messages": [HumanMessage(REQUEST)]}, config, context=context)
            proposal = paused["__interrupt__"][0].value["toolgate"]["proposals"][0]
            decide(gateway, proposal["proposal_id"], fiona, "approve")
            return toolgate.invoke(Command(resume={"wake": True}), config, context=resume_context)

        samples = alternate(
            rounds, {"plain": measure("plain", plain_flow), "toolgate": measure("toolgate", toolgate_flow)}
        )
    store.close()
    return {"samples": samples, "counts": counts, "steps": steps, "cpu": cpu}


def floor_table(kind: str, steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Print one approved write's transactions, step by step, and sum them against the floor."""
    writes = [s for s in steps if s["kind"] == "write"]
    reads = [s for s in steps if s["kind"] == "read"]
    print_table(
        f"{kind}: one approved write, transaction by transaction (store only; floor: one write"
        f" transaction per step {', '.join(FLOOR_STEPS)})",
        [{"n": i + 1, **s} for i, s in enumerate(steps)],
    )
    floor = len(FLOOR_STEPS)
    trips = sum(s["round_trips"] for s in steps)
    summary = {
        "write_tx": len(writes),
        "read_tx": len(reads),
        "transactions": len(steps),
        "round_trips": trips,
        "floor_write_tx": floor,
        "floor_round_trips": floor,
        "write_tx_vs_floor": len(writes) / floor,
        "round_trips_vs_floor": trips / floor,
        "target_round_trips_vs_floor": TARGET_TRIPS_VS_FLOOR,
    }
    print_table(
        f"{kind}: store work per approved write against the floor (target round trips <= "
        f"{TARGET_TRIPS_VS_FLOOR}x floor)",
        [
            {"measure": "write transactions", "toolgate": len(writes), "floor": floor, "ratio": len(writes) / floor},
            {"measure": "all transactions", "toolgate": len(steps), "floor": floor, "ratio": len(steps) / floor},
            {"measure": "round trips", "toolgate": trips, "floor": floor, "ratio": trips / floor},
        ],
    )
    return summary


def main() -> None:
    args = arguments(__doc__.splitlines()[0], quick=12, full=40)
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
        print(
            "write_path: PostgreSQL skipped (set TOOLGATE_BENCH_PG_URL or run via scripts/with-postgres.sh)"
        )
    rows, result = (
        [],
        {
            "target_ratio": TARGET_RATIO,
            "target_store_commits": TARGET_COMMITS,
            "rounds": args.rounds,
            "kinds": {},
        },
    )
    for kind, data in kinds.items():
        r = ratio(data["samples"]["toolgate"], data["samples"]["plain"])
        cpu_r = data["cpu"].ratio("toolgate", "plain")
        for name in ("plain", "toolgate"):
            c = data["counts"][name]
            is_tg = name == "toolgate"
            rows.append(
                {
                    "saver": kind,
                    "flow": name,
                    "median_ms": spread(data["samples"][name])["median"] * 1000,
                    "ratio": r["ratio"] if is_tg else 1.0,
                    "rounds_min-max": f"{r['round_min']:.2f}-{r['round_max']:.2f}" if is_tg else "",
                    "target": f"<= {TARGET_RATIO}" if is_tg else "",
                    "time": verdict(r["ratio"], TARGET_RATIO) if is_tg else "",
                    "cpu_ms": cpu_r["median_ms"] if is_tg else cpu_r["baseline_median_ms"],
                    "cpu_ratio": cpu_r["ratio"] if is_tg else 1.0,
                    "ckpt_commits": c.get("checkpoint_put", 0) + c.get("checkpoint_writes", 0),
                    "store_commits": c.get("write_tx", 0),
                    "of_them_audit": c.get("audit", 0),
                    "commit_target": f"<= {TARGET_COMMITS}" if is_tg else "",
                    "commits": verdict(c.get("write_tx", 0), TARGET_COMMITS) if is_tg else "",
                    "read_tx": c.get("read_tx", 0),
                    "store_stmts": c.get("statements", 0),
                    "round_trips": c.get("round_trips", 0) if kind == "postgres" else "",
                    "sqlite_conns": c.get("connections", 0) if kind == "sqlite" else "pool",
                }
            )
        result["kinds"][kind] = {
            "toolgate_vs_plain": r,
            "toolgate_vs_plain_cpu": cpu_r,
            "cpu_samples_s": data["cpu"].samples,
            "spread_s": {n: spread(s) for n, s in data["samples"].items()},
            "counts_per_write": data["counts"],
            "samples_s": data["samples"],
        }
    result["table"] = rows
    for kind, data in kinds.items():
        result["kinds"][kind]["floor"] = floor_table(kind, data["steps"].get("toolgate", []))
        result["kinds"][kind]["steps_toolgate"] = data["steps"].get("toolgate", [])
    print_table(
        f"approved write end to end (targets: <= {TARGET_RATIO}x plain flow, <= {TARGET_COMMITS} store commits)",
        rows,
    )
    write_results("write_path", result)

    def draw(axes: Any) -> None:
        merged = {f"{n}\n{k}": s for k, d in kinds.items() for n, s in d["samples"].items()}
        boxplot(axes, merged, ylabel="ms per approved write (propose, approve, resume, execute)")

    plot("write_path", draw, title=f"Approved write end to end, {args.rounds} alternated rounds")


if __name__ == "__main__":
    main()
