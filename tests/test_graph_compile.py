"""Compiling the gateway graph: its nodes are small callable objects, with the closures' contract.

`build_graph` runs once per App open (CLI, server, worker) and once per evaluation case. Its nodes
used to be closures, and LangGraph disassembles the bytecode of every function node (and of what
it reaches) at each compile to look for subgraphs (``find_subgraph_pregel``); a callable object
is not searched. These tests hold that change to what it must keep: no node runs a subgraph
(LangGraph's own search, run on each node's inner function, finds none), LangGraph still injects
``runtime`` and ``config`` from the ``__call__`` signature, each node keeps its name and
docstring, and the seal still refuses a thread whose state was changed outside the gateway,
through the plain graph and through the release router.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from types import FunctionType
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from release_control_support import CONTROL, TwoReleases
from support import Harness, principal, start, tool_messages

from toolgate.graph import Context, build_graph
from toolgate.graph.builder import NODE_FACTORIES
from toolgate.graph.rollout.router import RoutedNode
from toolgate.graph.seals.guard import GuardedNode, guarded
from toolgate.graph.state import GatewayState, StoredState, gateway_state
from toolgate.graph.stored import StoredNode
from toolgate.store import SQLiteStore
from toolgate.testing import ScriptedChatModel, ai, tool_call

LOOKUP = {"order_id": "O-5512"}


def cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    return Harness(SQLiteStore(tmp_path / "t.sqlite", key=b"k" * 32))


def _searched(func: Any) -> Any:
    """What LangGraph's subgraph search finds from a node callable (None: no subgraph)."""
    from langgraph._internal._runnable import RunnableCallable
    from langgraph.pregel._utils import find_subgraph_pregel

    return find_subgraph_pregel(RunnableCallable(func, name="probe"))


def test_every_node_is_a_guarded_object_holding_no_subgraph(harness: Harness) -> None:
    from langgraph.pregel._utils import get_function_nonlocals

    graph = harness.graph(ScriptedChatModel(responses=[]), InMemorySaver())
    assert set(graph.builder.nodes) == set(NODE_FACTORIES)
    for name, spec in graph.builder.nodes.items():
        stored = spec.runnable.func  # the node on the view of the stored state (`toolgate.graph.stored`)
        assert isinstance(stored, StoredNode) and get_function_nonlocals(stored) == []
        node = stored.node
        assert isinstance(node, GuardedNode) and not isinstance(node, FunctionType)
        assert get_function_nonlocals(node) == []  # nothing left for LangGraph to disassemble
        assert _searched(node.fn) is None  # and nothing it would have found inside the node itself
        assert (node.__name__, node.name, node.__doc__) == (name, name, node.fn.__doc__)
        assert stored.__name__ == name
        assert spec.input_schema is StoredState  # given, as LangGraph would infer it from the first parameter
    assert dict(graph.get_subgraphs()) == {}


def test_langgraph_still_injects_runtime_and_config_into_every_node(harness: Harness) -> None:
    graph = harness.graph(ScriptedChatModel(responses=[]), InMemorySaver())
    for name in NODE_FACTORIES:
        assert set(graph.nodes[name].bound.func_accepts) == {"config", "runtime"}, name


def test_a_guarded_function_gets_exactly_the_arguments_it_names(harness: Harness) -> None:
    """Through a real LangGraph run: runtime (with the run's context) and config reach a node
    function that names them, and only those it names."""
    seen: dict[str, dict[str, Any]] = {}

    def both(state: GatewayState, runtime: Runtime[Context], config: RunnableConfig) -> dict[str, Any]:
        seen["both"] = {"runtime": runtime, "config": config}
        return {}

    def runtime_only(state: GatewayState, runtime: Runtime[Context]) -> dict[str, Any]:
        seen["runtime_only"] = {"runtime": runtime}
        return {}

    def config_only(state: GatewayState, config: RunnableConfig) -> dict[str, Any]:
        seen["config_only"] = {"config": config}
        return {}

    def neither(state: GatewayState) -> dict[str, Any]:
        seen["neither"] = {}
        return {"status": "done"}

    gw = harness.gateway()
    builder: StateGraph[Any, Any, Any, Any] = StateGraph(GatewayState, context_schema=Context)
    order = [both, runtime_only, config_only, neither]
    for fn in order:
        builder.add_node(fn.__name__, guarded(gw, fn.__name__, fn), input_schema=GatewayState)
    builder.add_edge(START, order[0].__name__)
    for first, second in itertools.pairwise(order):
        builder.add_edge(first.__name__, second.__name__)
    builder.add_edge(order[-1].__name__, END)
    final = builder.compile(checkpointer=InMemorySaver()).invoke(
        {"messages": []}, cfg("t-probe"), context=Context(principal=principal("cust-ada"))
    )
    assert final["status"] == "done" and final["seal"]  # every update sealed by the guard
    assert set(seen) == {"both", "runtime_only", "config_only", "neither"}
    assert {k: set(v) for k, v in seen.items()} == {
        "both": {"runtime", "config"},
        "runtime_only": {"runtime"},
        "config_only": {"config"},
        "neither": set(),
    }
    for got in (seen["both"], seen["runtime_only"]):
        assert got["runtime"].context.principal == principal("cust-ada")
    for got in (seen["both"], seen["config_only"]):
        assert got["config"]["configurable"]["thread_id"] == "t-probe"


def _tamper_before_execute(graph: Any, thread: str, user: str = "cust-ada") -> dict[str, Any]:
    """Pause a lookup before execute, rewrite its call's arguments, and run on."""
    graph.invoke(
        {"messages": [HumanMessage("status of O-5512")]},
        cfg(thread),
        context=Context(principal=principal(user)),
        interrupt_before=["execute"],
    )
    assert graph.get_state(cfg(thread)).next == ("execute",)
    values = gateway_state(graph.get_state(cfg(thread)).values)
    forged = {"c1": {**values["calls"]["c1"], "arguments": {"order_id": "O-7001"}}}
    graph.update_state(cfg(thread), {"calls": forged})
    final: dict[str, Any] = graph.invoke(None, cfg(thread), context=Context(principal=principal(user)))
    return final


def _refused(final: dict[str, Any]) -> None:
    assert final["status"] == "refused"
    answered = {m.tool_call_id: json.loads(str(m.content)) for m in tool_messages(final)}
    assert answered["c1"]["error"] == "state_tampered"


def test_the_guarded_graph_still_refuses_tampered_state(harness: Harness) -> None:
    model = ScriptedChatModel(responses=[ai("", tool_call("lookup_order", LOOKUP, "c1")), ai("done")])
    final = _tamper_before_execute(harness.graph(model, InMemorySaver()), "t-tamper")
    _refused(final)
    assert harness.total_handler_calls() == 0
    events = [e for e in harness.store.audit.events() if e.event == "state.tampered"]
    assert len(events) == 1 and events[0].detail == {"keys": ["calls"], "node": "execute"}
    again = start(
        harness.graph(ScriptedChatModel(responses=[ai("hello")]), InMemorySaver()), "hi", "cust-ada", "t-2"
    )
    assert again["status"] != "refused"  # another thread is untouched


def test_the_routed_graph_still_refuses_tampered_state(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "r.sqlite", key=b"k" * 32)
    model = ScriptedChatModel(responses=[ai("", tool_call("lookup_order", LOOKUP, "c1")), ai("done")])
    releases = TwoReleases(store, tmp_path, models={CONTROL: model})
    graph = build_graph(gateway=releases(CONTROL), checkpointer=InMemorySaver(), router=releases.router)
    for name, spec in graph.builder.nodes.items():
        stored = spec.runnable.func
        assert isinstance(stored, StoredNode)
        node = stored.node
        assert isinstance(node, RoutedNode) and not isinstance(node, FunctionType)
        assert node.__name__ == name and set(graph.nodes[name].bound.func_accepts) == {"config", "runtime"}
        assert _searched(node.make(releases(CONTROL))) is None
    _refused(_tamper_before_execute(graph, "t-routed"))
    assert releases.counters[CONTROL].total() == 0
    events = [e for e in store.audit.events() if e.event == "state.tampered"]
    assert len(events) == 1 and events[0].detail == {"keys": ["calls"], "node": "execute"}
