"""The gateway StateGraph: state, context, nodes, routing and the composition root's parts
(`build_gateway`, `build_graph`; the root itself is `toolgate.graph.bootstrap.open_app`).

The names below are imported on first use (`toolgate.lazy_exports`): a submodule such as
``toolgate.graph.seals.versions`` imports without the whole graph stack."""

from typing import TYPE_CHECKING

from toolgate.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from toolgate.graph.builder import build_gateway, build_graph
    from toolgate.graph.context import Context
    from toolgate.graph.delivery.executor import Executor
    from toolgate.graph.delivery.result import Delivery
    from toolgate.graph.gateway import INSTRUCTIONS, Gateway
    from toolgate.graph.review.decisions import ReviewOutcome, decide
    from toolgate.graph.state import Budget, CallRecord, GatewayState, Outcome

_EXPORTS = {
    "build_gateway": "toolgate.graph.builder",
    "build_graph": "toolgate.graph.builder",
    "Context": "toolgate.graph.context",
    "Delivery": "toolgate.graph.delivery.result",
    "Executor": "toolgate.graph.delivery.executor",
    "INSTRUCTIONS": "toolgate.graph.gateway",
    "Gateway": "toolgate.graph.gateway",
    "ReviewOutcome": "toolgate.graph.review.decisions",
    "decide": "toolgate.graph.review.decisions",
    "Budget": "toolgate.graph.state",
    "CallRecord": "toolgate.graph.state",
    "GatewayState": "toolgate.graph.state",
    "Outcome": "toolgate.graph.state",
}
"""Where each public name lives."""

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

__all__ = [
    "INSTRUCTIONS",
    "Budget",
    "CallRecord",
    "Context",
    "Delivery",
    "Executor",
    "Gateway",
    "GatewayState",
    "Outcome",
    "ReviewOutcome",
    "build_gateway",
    "build_graph",
    "decide",
]
