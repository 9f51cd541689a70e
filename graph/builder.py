"""`build_graph`: the one place where the gateway's dependencies are wired."""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import BaseChatModel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from toolgate.graph.context import Context
from toolgate.graph.deps import INSTRUCTIONS, Gateway
from toolgate.graph.execution import Executor
from toolgate.graph.guard import guarded
from toolgate.graph.nodes.approval import make_approval_node
from toolgate.graph.nodes.dispatch import make_dispatch_node
from toolgate.graph.nodes.execute import make_execute_node
from toolgate.graph.nodes.model import make_model_node
from toolgate.graph.nodes.proposal import make_proposal_node
from toolgate.graph.nodes.respond import make_respond_node
from toolgate.graph.routing import after_dispatch, after_execute, after_model, after_proposal
from toolgate.graph.state import GatewayState
from toolgate.policy.breaker import BreakerRegistry
from toolgate.policy.identities import IdentityDirectory
from toolgate.policy.judge import Judge
from toolgate.policy.ratelimit import InboundRateLimiter
from toolgate.policy.rules import PolicyRules
from toolgate.store.audit import Auditor
from toolgate.store.base import Store
from toolgate.tools.registry import Registry


def build_gateway(
    *,
    model: BaseChatModel,
    registry: Registry,
    policy: PolicyRules,
    store: Store,
    instructions: str = INSTRUCTIONS,
    breakers: BreakerRegistry | None = None,
    server_mode: bool = False,
) -> Gateway:
    """The node dependencies (also used by operator commands that execute outside a graph run).

    Every secret comes from the store's keyring: one configured secret per store, never a second
    key that could disagree with it."""
    auditor = Auditor(store, registry.release)
    directory = IdentityDirectory(store, auditor)
    rate_limiter = InboundRateLimiter(store, policy.rate_limits)
    return Gateway(
        model=model,
        registry=registry,
        policy=policy,
        store=store,
        auditor=auditor,
        executor=Executor(store, registry, auditor, directory, breakers=breakers or BreakerRegistry()),
        rate_limiter=rate_limiter,
        judge=Judge(registry, policy, rate_limiter),
        directory=directory,
        instructions=instructions,
        server_mode=server_mode,
    )


def build_graph(
    *,
    model: BaseChatModel,
    registry: Registry,
    policy: PolicyRules,
    store: Store,
    checkpointer: BaseCheckpointSaver[Any] | None = None,
    instructions: str = INSTRUCTIONS,
    breakers: BreakerRegistry | None = None,
    server_mode: bool = False,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Compile the gateway graph.

    ``model -> dispatch -> proposal -> approval -> execute -> model ... -> respond``. Nothing
    connects here: the store opens connections on first use, and the caller runs ``store.setup()``.
    Pass ``checkpointer=None`` for the LangGraph server, which brings its own, and
    ``server_mode=True`` there: the acting principal then comes from the server's auth handler,
    never from the client's ``context``.
    """
    gw = build_gateway(
        model=model,
        registry=registry,
        policy=policy,
        store=store,
        instructions=instructions,
        breakers=breakers,
        server_mode=server_mode,
    )
    builder: StateGraph[Any, Any, Any, Any] = StateGraph(GatewayState, context_schema=Context)
    nodes = {
        "model": make_model_node(gw),
        "dispatch": make_dispatch_node(gw),
        "proposal": make_proposal_node(gw),
        "approval": make_approval_node(gw),
        "execute": make_execute_node(gw),
        "respond": make_respond_node(gw),
    }
    for name, node in nodes.items():
        builder.add_node(name, guarded(gw, name, node))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", after_model)
    builder.add_conditional_edges("dispatch", after_dispatch)
    builder.add_conditional_edges("proposal", after_proposal)
    builder.add_edge("approval", "execute")
    builder.add_conditional_edges("execute", after_execute)
    builder.add_edge("respond", END)
    return builder.compile(checkpointer=checkpointer, name="toolgate")


__all__ = ["build_gateway", "build_graph"]
