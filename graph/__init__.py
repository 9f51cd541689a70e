"""The gateway StateGraph: state, context, nodes, routing and the `build_graph` composition root."""

from toolgate.graph.builder import build_gateway, build_graph
from toolgate.graph.context import Context
from toolgate.graph.delivery import Delivery
from toolgate.graph.execution import Executor
from toolgate.graph.gateway import INSTRUCTIONS, Gateway
from toolgate.graph.review import ReviewOutcome, decide
from toolgate.graph.state import Budget, CallRecord, GatewayState, Outcome

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
