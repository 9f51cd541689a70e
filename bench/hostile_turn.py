"""A runaway model turn: 10,000 tool calls in one response, refused with bounded cost.

The gateway judges the first 32 calls (the per-turn cap), refuses the rest as one batch (one
audit event), answers every call id, and seals the thread's state. The baseline, measured in the
same run on the same checkpointer, is the framework's floor: a plain LangGraph graph that only
answers every call id with a `ToolMessage` (no judging, no store, no seal). Rounds alternate and
medians are reported; the result is written to ``bench/results/hostile_turn.json``.

Run: ``.venv/bin/python bench/hostile_turn.py``
"""

from __future__ import annotations

import json
import secrets
import statistics
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from toolgate.graph import Context
from toolgate.graph.bootstrap import initialize_store
from toolgate.policy.identities import IdentityDirectory
from toolgate.store import SQLiteStore
from toolgate.testing import ScriptedChatModel, ai, open_test_app
from toolgate.tools import Registry
from toolgate.tools.demo import REFUND_RELEASE, DemoSystem, demo_specs
from toolgate.tools.demo.identities import demo_principals, seed_demo_identities
from toolgate.tools.demo.release import DEMO_RELEASES

CALLS = 10_000
ROUNDS = 5
RESULTS = Path(__file__).parent / "results" / "hostile_turn.json"


def flood() -> AIMessage:
    message = AIMessage(content="", tool_calls=[])
    message.tool_calls = [
        {"type": "tool_call", "name": "lookup_order", "args": {"order_id": "O-5512"}, "id": f"c{i}"}
        for i in range(CALLS)
    ]
    return message


class Plain(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def baseline_graph() -> Any:
    """The floor: the model's message, then one ToolMessage per call id."""

    def model(state: Plain) -> dict[str, Any]:
        return {"messages": [flood()]}

    def answer(state: Plain) -> dict[str, Any]:
        last = state["messages"][-1]
        assert isinstance(last, AIMessage)
        return {
            "messages": [
                ToolMessage(content='{"status":"rejected"}', tool_call_id=str(c["id"]))
                for c in last.tool_calls
            ]
        }

    builder: StateGraph[Any, Any, Any, Any] = StateGraph(Plain)
    builder.add_node("model", model)
    builder.add_node("answer", answer)
    builder.add_edge(START, "model")
    builder.add_edge("model", "answer")
    builder.add_edge("answer", END)
    return builder.compile(checkpointer=InMemorySaver())


def time_baseline(thread: str) -> float:
    graph = baseline_graph()
    started = time.perf_counter()
    graph.invoke({"messages": [HumanMessage("x")]}, {"configurable": {"thread_id": thread}})
    return time.perf_counter() - started


def time_toolgate(store: SQLiteStore, registry: Registry, thread: str) -> tuple[float, int]:
    model = ScriptedChatModel(responses=[flood(), ai("done")])
    graph = open_test_app(
        release=DEMO_RELEASES[REFUND_RELEASE], tools=registry, model=model, store=store, start=False
    ).compiled()
    before = len(store.audit.events())
    started = time.perf_counter()
    graph.invoke(
        {"messages": [HumanMessage("x")]},
        {"configurable": {"thread_id": thread}},
        context=Context(principal=demo_principals()["cust-ada"]),
    )
    return time.perf_counter() - started, len(store.audit.events()) - before


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "bench.sqlite", key=secrets.token_bytes(32))
        initialize_store(store, DEMO_RELEASES["ops-tools/1.1.0"])
        seed_demo_identities(IdentityDirectory(store))
        system = DemoSystem(store)
        registry = Registry.of(REFUND_RELEASE, demo_specs(system), system)
        time_toolgate(store, registry, "warm-up")
        time_baseline("warm-up")
        gateway, plain, events = [], [], []
        for n in range(ROUNDS):
            seconds, appended = time_toolgate(store, registry, f"g{n}")
            gateway.append(seconds)
            events.append(appended)
            plain.append(time_baseline(f"b{n}"))
    result = {
        "calls_in_turn": CALLS,
        "rounds": ROUNDS,
        "toolgate_median_s": round(statistics.median(gateway), 3),
        "baseline_median_s": round(statistics.median(plain), 3),
        "ratio": round(statistics.median(gateway) / statistics.median(plain), 2),
        "audit_events_per_run": max(events),
        "note": "baseline: a plain LangGraph graph answering every call id, same checkpointer, same run",
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(" ".join(f"{k}={v}" for k, v in result.items() if k != "note"))


if __name__ == "__main__":
    main()
