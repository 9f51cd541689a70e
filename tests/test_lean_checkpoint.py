"""A lean checkpoint: what a thread keeps does not grow with every call it ever made.

The final answer reports this task turn's outcomes (the store and the audit log keep the history),
answered calls of earlier turns leave the checkpointed state at new user input, and a node that
leaves a channel as it was does not write it again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.types import Overwrite
from support import Harness, principal

from toolgate.graph.context import Context
from toolgate.graph.nodes.model import finished_turn_dropped
from toolgate.graph.seals.seal import Sealer
from toolgate.graph.state import gateway_state, merge_writes
from toolgate.store import SQLiteStore
from toolgate.store.chain import verify_chain
from toolgate.testing import ScriptedChatModel, ai, tool_call

ORDERS = ("O-5512", "O-5514")  # both cust-ada's (the same call at most twice per thread)


def lookup_turns(count: int) -> ScriptedChatModel:
    responses: list[AIMessage] = []
    for n in range(count):
        order = ORDERS[n % 2]
        responses += [ai("", tool_call("lookup_order", {"order_id": order}, f"c{n}")), ai(f"answer {n}")]
    return ScriptedChatModel(responses=responses)


def ask(graph: Any, text: str, thread: str) -> dict[str, Any]:
    return graph.invoke(
        {"messages": [HumanMessage(text)]},
        {"configurable": {"thread_id": thread}},
        context=Context(principal=principal("cust-ada")),
    )


def test_the_answer_and_the_state_hold_this_turns_calls_only(tmp_path: Path) -> None:
    harness = Harness(SQLiteStore(tmp_path / "t.sqlite", key=b"k" * 32))
    graph = harness.graph(lookup_turns(3))
    for n in range(3):
        state = ask(graph, f"where is my order? ({n})", "t-long")
        assert state["status"] == "done"
    assert list(state["calls"]) == ["c2"] and list(state["outcomes"]) == ["c2"]
    answer = state["messages"][-1].content
    assert "[c2]: completed" in answer and "[c0]" not in answer and "[c1]" not in answer
    assert harness.handler_calls["lookup_order"] == 3
    # the history stays in the audit log
    completed = [e.call_id for e in harness.store.audit.events(call_ids=["c0", "c1", "c2"])]
    assert completed.count("c0") == 2 and completed.count("c2") == 2  # accepted and completed
    assert verify_chain(harness.store).ok


def test_new_input_drops_only_answered_calls() -> None:
    state: dict[str, Any] = {
        "calls": {
            "r1": {"call_id": "r1", "tool": "lookup_order", "phase": "done"},
            "x1": {"call_id": "x1", "tool": "unknown", "phase": "rejected", "code": "unknown_tool"},
            "w1": {"call_id": "w1", "tool": "issue_refund", "phase": "proposed", "operation_key": "op_1"},
        },
        "outcomes": {"r1": {"call_id": "r1", "tool": "lookup_order", "status": "completed"}},
    }
    update = finished_turn_dropped(state)
    assert isinstance(update["calls"], Overwrite) and list(update["calls"].value) == ["w1"]
    assert isinstance(update["outcomes"], Overwrite) and update["outcomes"].value == {}
    assert finished_turn_dropped({"calls": {"w1": state["calls"]["w1"]}}) == {}  # nothing to drop


def test_unchanged_channels_are_not_written_again(tmp_path: Path) -> None:
    harness = Harness(SQLiteStore(tmp_path / "t.sqlite", key=b"k" * 32))
    graph = harness.graph(lookup_turns(2))
    ask(graph, "where is my order?", "t-writes")
    written: dict[str, set[str]] = {}
    for chunk in graph.stream(
        {"messages": [HumanMessage("and the other one?")]},
        {"configurable": {"thread_id": "t-writes"}},
        context=Context(principal=principal("cust-ada")),
        stream_mode="updates",
    ):
        for node, update in chunk.items():
            written.setdefault(node, set()).update(update or {})
            # the grouped keys a step changed are the keys of its bookkeeping write
            written[node].update((update or {}).get("bookkeeping") or {})
    # the principal, the release and the deadline were set by the first turn and did not change
    assert "model" in written and not written["model"] & {"principal", "release", "deadline_at"}
    # execute found nothing awaiting and the thread already running
    assert "execute" in written and not written["execute"] & {"awaiting", "status"}
    assert "messages" in written["execute"]


def test_a_channel_never_written_is_not_written_empty(tmp_path: Path) -> None:
    """A read turn screens nothing and leaves nothing awaiting: neither channel gets a version (which
    every later checkpoint would carry); a later write turn writes ``awaiting`` when it has calls to
    wait for, and empties it again once they ran."""
    harness = Harness(SQLiteStore(tmp_path / "t.sqlite", key=b"k" * 32))
    graph = harness.graph(lookup_turns(2))
    ask(graph, "where is my order?", "t-empty")
    snapshot = graph.get_state({"configurable": {"thread_id": "t-empty"}})
    versions = graph.checkpointer.get_tuple(snapshot.config).checkpoint["channel_versions"]
    assert not versions.keys() & {"awaiting", "screened", "status_reason", "review", "validation_failures"}
    assert "awaiting" not in snapshot.values and "screened" not in snapshot.values
    assert snapshot.values["status"] == "done" and harness.handler_calls["lookup_order"] == 1
    sealer = Sealer(harness.store.keys, "t-empty")
    assert sealer.tampered_keys(gateway_state(snapshot.values)) == []
    # the next turn runs on that state as on any other
    assert ask(graph, "and the other one?", "t-empty")["status"] == "done"
    assert harness.handler_calls["lookup_order"] == 2


def test_a_call_named_like_langgraphs_overwrite_sentinel_is_an_ordinary_call(tmp_path: Path) -> None:
    """A one-key dict ``{"__overwrite__": ...}`` replaces a reducer channel in LangGraph. A model
    naming its call ``__overwrite__`` must neither replace the thread's records nor get the thread
    refused as tampered."""
    harness = Harness(SQLiteStore(tmp_path / "t.sqlite", key=b"k" * 32))
    model = ScriptedChatModel(
        responses=[ai("", tool_call("lookup_order", {"order_id": "O-5512"}, "__overwrite__")), ai("done")]
    )
    state = ask(harness.graph(model), "where is my order?", "t-sentinel")
    assert state["status"] == "done"
    assert state["calls"]["__overwrite__"]["tool"] == "lookup_order"
    assert state["outcomes"]["__overwrite__"]["status"] == "completed"
    assert harness.handler_calls["lookup_order"] == 1
    assert not [e for e in harness.store.audit.events() if e.event == "state.tampered"]


def test_the_grouped_keys_are_written_as_they_change(tmp_path: Path) -> None:
    """The grouped keys live in one ``bookkeeping`` channel: a step writes only the keys it changed,
    and of the budget only the counters it moved (its limits never change); the thread reads the
    whole state back, sealed as before."""
    harness = Harness(SQLiteStore(tmp_path / "t.sqlite", key=b"k" * 32))
    graph = harness.graph(lookup_turns(2))
    config = {"configurable": {"thread_id": "t-grouped"}}
    ask(graph, "where is my order?", "t-grouped")
    ask(graph, "and the other one?", "t-grouped")
    writes = [
        value
        for snapshot in reversed(list(graph.get_state_history(config)))
        for _, channel, value in graph.checkpointer.get_tuple(snapshot.config).pending_writes or []
        if channel == "bookkeeping"
    ]
    budgets = [w["budget"] for w in writes if "budget" in w]
    assert set(budgets[0]) == {
        "model_turns",
        "tool_calls",
        "max_model_turns",
        "max_tool_calls",
        "max_identical_calls",
        "max_validation_retries",
    }
    assert len(budgets) == 6 and all(set(b) <= {"model_turns", "tool_calls"} for b in budgets[1:])
    assert all(len(b) == 1 for b in budgets[1:])  # each step moved one counter
    assert ["principal" in w for w in writes].count(True) == 1  # set once, at the first step
    assert all("seal" in w for w in writes)  # every step seals
    values = graph.get_state(config).values
    assert set(values) & {"principal", "budget", "seal"} == set()  # none has a channel of its own
    state = gateway_state(values)
    assert state["budget"]["model_turns"] == 4 and state["budget"]["tool_calls"] == 2
    assert state["budget"]["max_tool_calls"] == Context().max_tool_calls
    assert Sealer(harness.store.keys, "t-grouped").tampered_keys(state) == []


def test_bookkeeping_writes_fold_the_same_in_any_batching() -> None:
    """A delta channel is replayed in batches other than the steps that wrote it (LangGraph)."""
    writes = [
        {
            "principal": {"user_id": "cust-ada"},
            "budget": {"model_turns": 1, "tool_calls": 0, "max_tool_calls": 9},
        },
        {"budget": {"tool_calls": 1}, "turn_calls": ["c1"]},
        {"budget": {"model_turns": 2}, "screened": {}},
        {"budget": None},
        {"budget": {"model_turns": 3}},
    ]
    whole = merge_writes({}, writes)
    for cut in range(len(writes) + 1):
        assert merge_writes(merge_writes({}, writes[:cut]), writes[cut:]) == whole
    assert merge_writes({}, writes[:3])["budget"] == {"model_turns": 2, "tool_calls": 1, "max_tool_calls": 9}
    assert whole == {
        "principal": {"user_id": "cust-ada"},
        "budget": {"model_turns": 3},
        "turn_calls": ["c1"],
        "screened": {},
    }
