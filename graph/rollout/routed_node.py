"""A node of a graph under release control (`toolgate.graph.rollout.router`): each run goes to its arm.

`ReleaseRouter.node` makes one per node name; `build_graph` adds them in place of the guarded
nodes when it is given a router (the CLI, the server and the worker under release control).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from toolgate.graph.context import Context
from toolgate.graph.nodes._common import context_of, thread_id
from toolgate.graph.rollout.pins import stop_node
from toolgate.graph.rollout.shadow import shadow_turn
from toolgate.graph.rollout.stop import halt_node
from toolgate.graph.seals.guard import guarded
from toolgate.graph.state import GatewayState

if TYPE_CHECKING:
    from toolgate.graph.rollout.router import NodeFactory, ReleaseRouter


class RoutedNode:
    """Node ``name`` of a graph under release control: each run goes to its arm's node.

    A callable object rather than a closure, like `toolgate.graph.seals.guard.GuardedNode`: LangGraph
    does not disassemble it for subgraphs each time the graph compiles."""

    def __init__(self, router: ReleaseRouter, name: str, make: NodeFactory) -> None:
        self.router = router
        """Decides each run's arm from the store's records."""
        self.name = name
        """The node's name in the graph."""
        self.make = make
        """Builds the node around one arm's gateway (once per gateway, `ReleaseRouter._arm_node`)."""
        self.__name__ = name

    def __repr__(self) -> str:
        return f"RoutedNode({self.name!r})"

    def __call__(
        self, state: GatewayState, runtime: Runtime[Context], config: RunnableConfig
    ) -> dict[str, Any]:
        router, name = self.router, self.name
        route = router.route(name, state, runtime, config)
        if route.halted:
            if route.stop is not None:
                return guarded(route.gateway, name, stop_node(route.gateway, route.stop))(
                    state, runtime, config
                )
            assert route.rollout is not None
            return guarded(route.gateway, name, halt_node(route.gateway, route.rollout))(
                state, runtime, config
            )
        update = router._arm_node(route.gateway, name, self.make)(state, runtime, config)
        if route.shadow is not None and route.rollout is not None:
            shadow_turn(
                control=route.gateway,
                candidate=route.shadow,
                rollout=route.rollout,
                thread_id=thread_id(config),
                state=state,
                update=update,
                ctx=context_of(runtime),
            )
        if route.monitored and route.rollout is not None:
            router.check(route.rollout, route.gateway)
        return update


__all__ = ["RoutedNode"]
