"""The dependencies every node shares, wired once per process by `build_gateway`."""

from __future__ import annotations

from dataclasses import dataclass

from langchain_core.language_models import BaseChatModel

from toolgate.clock import SYSTEM_CLOCK, Clock
from toolgate.graph.execution import Executor
from toolgate.policy.identities import IdentityDirectory
from toolgate.policy.judge import Judge
from toolgate.policy.ratelimit import InboundRateLimiter
from toolgate.policy.rules import PolicyRules
from toolgate.store.audit import Auditor
from toolgate.store.base import Store
from toolgate.tools.registry import Registry
from toolgate.tools.release import INSTRUCTIONS


@dataclass(frozen=True, kw_only=True)
class Gateway:
    """Everything the nodes need; built once per process by `toolgate.graph.builder.build_gateway`."""

    model: BaseChatModel
    registry: Registry
    policy: PolicyRules
    store: Store
    auditor: Auditor
    executor: Executor
    rate_limiter: InboundRateLimiter
    judge: Judge
    """The release's checks of one proposed call, shared by dispatch, edits and rollbacks."""
    directory: IdentityDirectory
    """Who may act: authenticates people at the doors, and tells execute whether an approver is
    still active."""
    instructions: str = INSTRUCTIONS
    """The release's trusted system instructions."""
    server_mode: bool = False
    """Served by the LangGraph server: the acting principal comes from its auth handler and the
    run context is rebuilt from the server's own settings (`toolgate.graph.server_context`)."""
    clock: Clock = SYSTEM_CLOCK
    """The process clock (handler deadlines); the store keeps its own for expiry and leases."""


__all__ = ["INSTRUCTIONS", "Gateway"]
