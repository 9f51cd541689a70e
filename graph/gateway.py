"""The dependencies every node shares, wired once per process by `build_gateway`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models import BaseChatModel

from toolgate.clock import SYSTEM_CLOCK, Clock
from toolgate.graph.execution import Executor
from toolgate.graph.prompt_cache import cache_options
from toolgate.policy.identities import IdentityDirectory
from toolgate.policy.judge import Judge
from toolgate.policy.ratelimit import InboundRateLimiter
from toolgate.policy.rules import PolicyRules
from toolgate.release import INSTRUCTIONS
from toolgate.store.audit import Auditor
from toolgate.store.base import Store
from toolgate.tools.registry import Registry
from toolgate.tools.spec import ToolSpec


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
    _bound: dict[tuple[str, ...], Any] = field(default_factory=dict, init=False, compare=False, repr=False)
    """Models bound per tool set (`model_for`); a copy made with `dataclasses.replace` starts empty."""

    def model_for(self, specs: Sequence[ToolSpec]) -> Any:
        """The model bound to exactly ``specs`` (a principal's tools), made once per tool set and
        reused by every later turn: binding converts every definition again, and a release's
        definitions never change while the process runs. The provider's prompt-cache options are
        bound with them (`toolgate.graph.prompt_cache`)."""
        if not specs:
            return self.model
        names = tuple(s.wire_name for s in specs)
        bound = self._bound.get(names)
        if bound is None:
            kwargs: dict[str, Any] = {"tool_choice": "auto"}  # each tool says whether it is strict
            if self.registry.has_stateful_writes():
                kwargs["parallel_tool_calls"] = False
            kwargs.update(cache_options(self.model, self.registry.release, self.instructions, names))
            bound = self.model.bind_tools(self.registry.openai_tools(specs), **kwargs)
            if len(self._bound) < MAX_BOUND_MODELS:
                self._bound[names] = bound
        return bound


MAX_BOUND_MODELS = 256
"""Distinct tool sets kept bound per gateway (one per role mix in practice)."""


__all__ = ["INSTRUCTIONS", "Gateway"]
