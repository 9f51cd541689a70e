"""The dependencies every node shares, wired once per process by `build_gateway`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models import BaseChatModel

from toolgate.clock import SYSTEM_CLOCK, Clock
from toolgate.graph.delivery.executor import Executor
from toolgate.graph.nodes.prompt_cache import ANTHROPIC_LLM_TYPE, cache_options
from toolgate.models.provider_openai import release_metadata
from toolgate.policy.authority import Authority
from toolgate.policy.identities import IdentityDirectory
from toolgate.policy.ratelimit import InboundRateLimiter
from toolgate.policy.rules import PolicyRules
from toolgate.releases.bundle import INSTRUCTIONS
from toolgate.store.audit import Auditor
from toolgate.store.base import Store
from toolgate.tools.registry import Registry
from toolgate.tools.spec import ToolSpec


@dataclass(frozen=True, kw_only=True)
class Gateway:
    """Everything the nodes need; built once per process by the composition root
    (`toolgate.graph.bootstrap.open_app`, through `toolgate.graph.builder.build_gateway`)."""

    model: BaseChatModel
    registry: Registry
    policy: PolicyRules
    store: Store
    auditor: Auditor
    executor: Executor
    rate_limiter: InboundRateLimiter
    authority: Authority
    """Whether a call may go on, at dispatch (also for edits, rollbacks and shadow turns), at
    execute and before the claim (`toolgate.policy.authority`): one per gateway."""
    directory: IdentityDirectory
    """Who may act: authenticates people at the doors, and tells execute whether an approver is
    still active."""
    instructions: str = INSTRUCTIONS
    """The release's trusted system instructions."""
    server_mode: bool = False
    """Served by the LangGraph server: the acting principal comes from its auth handler and the
    run context is rebuilt from the server's own settings (`toolgate.graph.server.context`)."""
    tool_choice: str = "auto"
    """The release's tool choice (`toolgate.releases.bundle.Release.tool_choice`), applied per step
    (`toolgate.graph.nodes.tool_offer`)."""
    clock: Clock = SYSTEM_CLOCK
    """The process clock (handler deadlines); the store keeps its own for expiry and leases."""
    bundle_sha256: str = ""
    """The verified digest of the bundle it serves (`toolgate.graph.bootstrap.ServedRelease`;
    "" when it was not verified): the router serves a rollout's candidate only when it is the
    bundle release control gated."""
    _bound: dict[tuple[str, ...], Any] = field(default_factory=dict, init=False, compare=False, repr=False)
    """Models bound per tool set (`model_for`); a copy made with `dataclasses.replace` starts empty."""

    @property
    def can_force_tools(self) -> bool:
        """False when the model refuses a forced tool choice: Anthropic with extended thinking
        (the API rejects it, and ``ChatAnthropic`` would silently send ``auto``)."""
        thinking = getattr(self.model, "thinking", None)
        return not (
            getattr(self.model, "_llm_type", None) == ANTHROPIC_LLM_TYPE
            and isinstance(thinking, dict)
            and thinking.get("type") in ("enabled", "adaptive")
        )

    def model_for(self, specs: Sequence[ToolSpec], tool_choice: str = "auto") -> Any:
        """The model bound to exactly ``specs`` (the tools offered this request, in their stable
        order) with ``tool_choice`` (``auto``, ``required``, ``none`` or the real name of one of
        ``specs``, `toolgate.graph.nodes.tool_offer`), made once per tool set and choice and reused by
        every later turn: binding converts every definition again, and a release's definitions
        never change while the process runs. The provider's prompt-cache options are bound with
        them (`toolgate.graph.nodes.prompt_cache`), keyed on the tools actually bound, and the
        release's request metadata (`toolgate.models.provider_openai.release_metadata`)."""
        if not specs:
            options = release_metadata(self.model, self.registry.release)
            return self.model.bind(**options) if options else self.model
        names = tuple(s.wire_name for s in specs)
        bound = self._bound.get((*names, "\x00", tool_choice))
        if bound is None:
            # each tool says whether it is strict
            kwargs: dict[str, Any] = {"tool_choice": provider_tool_choice(self.model, tool_choice, specs)}
            if self.registry.has_stateful_writes() and not (
                tool_choice == "none" and getattr(self.model, "_llm_type", None) == ANTHROPIC_LLM_TYPE
            ):
                kwargs["parallel_tool_calls"] = False  # Anthropic's ``none`` takes no parallel flag
            kwargs.update(cache_options(self.model, self.registry.release, self.instructions, names))
            kwargs.update(release_metadata(self.model, self.registry.release))
            bound = self.model.bind_tools(self.registry.openai_tools(specs), **kwargs)
            if len(self._bound) < MAX_BOUND_MODELS:
                self._bound[(*names, "\x00", tool_choice)] = bound
        return bound


def provider_tool_choice(model: Any, choice: str, specs: Sequence[ToolSpec]) -> Any:
    """``choice`` as ``model``'s ``bind_tools`` takes it: a named tool by its wire name, and for
    Anthropic ``required`` as ``any`` and ``none`` as its block (the client would read the string
    ``none`` as a tool's name)."""
    anthropic = getattr(model, "_llm_type", None) == ANTHROPIC_LLM_TYPE
    if choice == "required":
        return "any" if anthropic else "required"
    if choice == "none":
        return {"type": "none"} if anthropic else "none"
    if choice == "auto":
        return "auto"
    return next(s.wire_name for s in specs if s.name == choice)


MAX_BOUND_MODELS = 256
"""Distinct tool sets kept bound per gateway (one per role mix in practice)."""


__all__ = ["INSTRUCTIONS", "Gateway", "provider_tool_choice"]
