"""The composition root's internal parts: `build_gateway` wires one release's node dependencies,
`build_graph` compiles the graph around them.

A running gateway is built by the root, `toolgate.graph.bootstrap.open_app` (tests, evals and
bench through `toolgate.testing.open_test_app`): it loads and verifies the release, opens or takes
the store, and calls these two. They stay exported (``toolgate.build_gateway``,
``toolgate.build_graph``) for an embedder wiring its own process and for tests of the builder
itself; a caller of them owns what the root would have done (release verification, store
initialization, the ``release.loaded`` record, release routing)."""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import BaseChatModel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from toolgate.clock import SYSTEM_CLOCK, Clock
from toolgate.graph.context import Context
from toolgate.graph.delivery.executor import Executor
from toolgate.graph.gateway import INSTRUCTIONS, Gateway
from toolgate.graph.nodes.approval import make_approval_node
from toolgate.graph.nodes.dispatch import make_dispatch_node
from toolgate.graph.nodes.execute import make_execute_node
from toolgate.graph.nodes.model import make_model_node
from toolgate.graph.nodes.proposal import make_proposal_node
from toolgate.graph.nodes.respond import make_respond_node
from toolgate.graph.nodes.wait import after_wait, make_after_execute, make_wait_node
from toolgate.graph.rollout.router import ReleaseRouter
from toolgate.graph.routing import after_dispatch, after_model, after_proposal
from toolgate.graph.seals.guard import guarded
from toolgate.graph.state import StoredState
from toolgate.graph.stored import stored_node, stored_route
from toolgate.policy.authority import Authority
from toolgate.policy.breaker import BreakerRegistry
from toolgate.policy.escalation import check_escalations
from toolgate.policy.identities import IdentityDirectory
from toolgate.policy.ratelimit import InboundRateLimiter
from toolgate.policy.retry import DEFAULT_READ_RETRY, ReadRetry
from toolgate.policy.rules import PolicyRules
from toolgate.policy.shared_breaker import SharedBreakerRegistry
from toolgate.store.audit import Auditor
from toolgate.store.base import Store
from toolgate.tools.credentials import CredentialProvider
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
    clock: Clock | None = None,
    tool_choice: str = "auto",
    credential_provider: CredentialProvider | None = None,
    read_retry: ReadRetry | None = None,
) -> Gateway:
    """The node dependencies (also used by operator commands that execute outside a graph run);
    called by the composition root (`toolgate.graph.bootstrap.open_app`) for each release it serves.

    Every secret comes from the store's keyring: one configured secret per store, never a second
    key that could disagree with it. The one exception is asymmetric by design:
    ``credential_provider`` signs service credentials with a private key of its own
    (``TOOLGATE_SERVICE_SIGNING_KEY_FILE``) whose public half downstreams hold; None: the built-in
    HS256 provider keyed by the store's secret."""
    approvals = {name: spec.approval for name, spec in registry.tools.items()}
    check_escalations(policy.escalations, approvals, unknown_ok=True)  # raise, never lower
    auditor = Auditor(store, registry.release)
    directory = IdentityDirectory(store, auditor)
    rate_limiter = InboundRateLimiter(store, policy.rate_limits)
    authority = Authority(
        registry=registry,
        policy=policy,
        store=store,
        auditor=auditor,
        directory=directory,
        rate_limiter=rate_limiter,
    )
    return Gateway(
        model=model,
        registry=registry,
        policy=policy,
        store=store,
        auditor=auditor,
        executor=Executor(
            store,
            registry,
            auditor,
            directory,
            breakers=breakers or SharedBreakerRegistry(store),  # one state for every process
            clock=clock or SYSTEM_CLOCK,
            authority=authority,
            credential_provider=credential_provider,
            read_retry=read_retry or DEFAULT_READ_RETRY,
        ),
        rate_limiter=rate_limiter,
        authority=authority,
        directory=directory,
        instructions=instructions,
        server_mode=server_mode,
        clock=clock or SYSTEM_CLOCK,
        tool_choice=tool_choice,
    )


NODE_FACTORIES = {
    "model": make_model_node,
    "dispatch": make_dispatch_node,
    "proposal": make_proposal_node,
    "approval": make_approval_node,
    "execute": make_execute_node,
    "respond": make_respond_node,
    "wait": make_wait_node,
}
"""Each node, built around one release's gateway."""


def build_graph(
    *,
    gateway: Gateway,
    checkpointer: BaseCheckpointSaver[Any] | None = None,
    router: ReleaseRouter | None = None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Compile the gateway graph around ``gateway`` (built once per process by `build_gateway`);
    called by the composition root (`toolgate.graph.bootstrap.App.compiled` and `App.graph`) for
    the CLI, the server, the worker, evals, bench and tests.

    ``model -> dispatch -> proposal -> approval -> execute -> model ...``; a text answer ends the
    task turn in the model node (it renders the final answer itself, one step fewer), a stopped
    task ends through ``respond``. Nothing
    connects here: the store opens connections on first use. Pass ``checkpointer=None`` for the
    LangGraph server, which brings its own (and build the gateway with ``server_mode=True``: the
    acting principal then comes from the server's auth handler, never from the client's
    ``context``). Compiled with a checkpointer, a run's background pool has `RUN_THREADS` threads.

    With a ``router`` (release control: `toolgate.graph.rollout.router`), each node runs the node of the
    release the store pins the thread to; without one, ``gateway`` serves every thread.
    """
    builder: StateGraph[Any, Any, Any, Any] = StateGraph(StoredState, context_schema=Context)
    for name, make in NODE_FACTORIES.items():
        node = router.node(name, make) if router is not None else guarded(gateway, name, make(gateway))
        # the input schema LangGraph would infer from the node's first parameter, given so that
        # compiling does not evaluate every annotation of the state once per node
        builder.add_node(name, stored_node(name, node), input_schema=StoredState)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", stored_route(after_model))
    builder.add_conditional_edges("dispatch", stored_route(after_dispatch))
    builder.add_conditional_edges("proposal", stored_route(after_proposal))
    builder.add_edge("approval", "execute")
    # or a declared wait
    builder.add_conditional_edges("execute", stored_route(make_after_execute(gateway.registry)))
    builder.add_conditional_edges("wait", stored_route(after_wait))
    builder.add_edge("respond", END)
    compiled = builder.compile(checkpointer=checkpointer, name="toolgate")
    if checkpointer is None:  # the server's graph: its runs are async and start no threads
        return compiled
    return compiled.with_config(max_concurrency=RUN_THREADS)


RUN_THREADS = 2
"""Threads of a run's background executor (LangGraph's ``max_concurrency``) in a graph compiled
with a checkpointer. LangGraph makes a thread pool for every sync run and gives it the
checkpoint writes (each step's ``put_writes``, then its ``put``, which waits for the writes and
the put before it); a write submitted while the others wait starts a thread of its own, about
4.5 thread starts per read call, each costing the caller CPU and a wait for the thread to start.
Every step of this graph runs one node, and those writes go one after another anyway. Two, not
one: a streamed run (``custom`` or ``messages`` mode) keeps one waiter for the stream on the
pool (a coroutine holding the pool's semaphore in an async run) and runs its node on the pool
too, so with one thread the node never starts. Each write waits only for writes submitted
before it, and the pool takes them in order, so the second thread never waits for itself. A
run's own ``max_concurrency`` in its config still wins."""


__all__ = ["NODE_FACTORIES", "RUN_THREADS", "build_gateway", "build_graph"]
