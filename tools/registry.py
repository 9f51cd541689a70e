"""The registry of one release: the immutable map from tool name to reviewed spec.

Lookups never resolve a model string to code: an unknown name is a rejection. Which of these
tools a principal sees (and the "did you mean" drawn only from those) is policy's decision:
`toolgate.policy.authorization.visible_tools`.

Tools are keyed by their real name; the model is told each tool's wire name
(`toolgate.tools.wire`), and `Registry.get` accepts either, so what the model calls maps back to
the real name before anything is proposed, audited or answered.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from langchain_core.tools import StructuredTool

from toolgate.errors import RegistryError
from toolgate.tools.adapters import to_structured_tool
from toolgate.tools.schema.export import anthropic_tool, openai_tool
from toolgate.tools.spec import ResourceResolver, ToolSpec, model_description
from toolgate.tools.tenant_overrides import TenantOverride, TenantSpecs, changed_contract, resolve_overrides
from toolgate.tools.wire import lookalike_key


@dataclass(frozen=True)
class Registry:
    """All tools of one release, with the resolver that checks resource ownership."""

    release: str
    """Release id, ``name/version`` (e.g. ``acme-tools/0.1.0``)."""
    tools: Mapping[str, ToolSpec]
    """Tool name to spec; frozen after construction."""
    resolver: ResourceResolver = field(repr=False)
    """Ownership lookups for the tools' resources."""
    overrides: TenantSpecs = field(default_factory=dict, repr=False)
    """Tenant id to tool name to the tenant's own implementation (`toolgate.tools.tenant_overrides`)."""
    _by_wire: dict[str, str] = field(init=False, repr=False, compare=False, default_factory=dict)

    def __post_init__(self) -> None:
        for name, spec in self.tools.items():
            if name != spec.name:
                raise RegistryError(f"registry key {name!r} does not match tool name {spec.name!r}")
        object.__setattr__(self, "tools", dict(self.tools))
        object.__setattr__(self, "overrides", {t: dict(by) for t, by in self.overrides.items()})
        for tenant, by_name in self.overrides.items():
            for name, spec in by_name.items():
                base = self.tools.get(name)
                changed = ["name"] if base is None else changed_contract(base, spec)
                if changed:  # what the model, policy and reviewer see never varies by tenant
                    raise RegistryError(
                        f"tenant {tenant!r} overrides {name!r} with another contract ({', '.join(changed)})",
                        tool=name,
                    )
        by_wire: dict[str, str] = {}
        for name, spec in sorted(self.tools.items()):
            other = by_wire.get(spec.wire_name) or (
                spec.wire_name if spec.wire_name != name and spec.wire_name in self.tools else None
            )
            if other is not None:
                raise RegistryError(
                    f"tools {other!r} and {name!r} share the wire name {spec.wire_name!r} in {self.release}",
                    tool=name,
                )
            by_wire[spec.wire_name] = name
        object.__setattr__(self, "_by_wire", by_wire)
        seen: dict[str, str] = {}
        for name in sorted(self.tools):
            other = seen.setdefault(lookalike_key(name), name)
            if other != name:
                raise RegistryError(
                    f"tools {other!r} and {name!r} look alike in {self.release} (the same after Unicode"
                    " normalization, case folding and confusable letters): rename one",
                    tool=name,
                    problems=[("lookalike_names", f"{other!r} and {name!r}")],
                )

    @classmethod
    def of(
        cls,
        release: str,
        specs: Iterable[ToolSpec],
        resolver: ResourceResolver,
        overrides: Iterable[TenantOverride] = (),
    ) -> Registry:
        """Build a registry, refusing duplicate names and any override `resolve_overrides` refuses."""
        tools: dict[str, ToolSpec] = {}
        for spec in specs:
            if not isinstance(spec, ToolSpec):  # a release's factory returned something else
                raise RegistryError(f"{release} lists a {type(spec).__name__} among its tools, not a ToolSpec")
            if spec.name in tools:
                raise RegistryError(f"tool {spec.name!r} registered twice in {release}")
            tools[spec.name] = spec
        resolved = resolve_overrides(release, tools, overrides)
        return cls(release=release, tools=tools, resolver=resolver, overrides=resolved)

    def narrowed(self, specs: Iterable[ToolSpec]) -> Registry:
        """This release with only ``specs`` (e.g. a canary arm's), keeping their tenants' overrides."""
        tools = {spec.name: spec for spec in specs}
        overrides = {t: {n: s for n, s in by.items() if n in tools} for t, by in self.overrides.items()}
        return Registry(release=self.release, tools=tools, resolver=self.resolver, overrides=overrides)

    def get(self, name: str) -> ToolSpec | None:
        """The spec registered under exactly ``name`` (its real name or its wire name), or None."""
        spec = self.tools.get(name)
        if spec is None and name in self._by_wire:
            spec = self.tools.get(self._by_wire[name])
        return spec

    def mapped(self, transform: Callable[[list[ToolSpec]], list[ToolSpec]]) -> Registry:
        """This release with its specs passed through ``transform`` (a harness's counting or
        comparing wrappers, injected faults), each tenant's overrides too: what is instrumented
        is what runs for every tenant. ``transform`` keeps each spec's name and contract."""
        tools = {spec.name: spec for spec in transform(list(self.tools.values()))}
        overrides = {t: {s.name: s for s in transform(list(by.values()))} for t, by in self.overrides.items()}
        return Registry(release=self.release, tools=tools, resolver=self.resolver, overrides=overrides)

    def get_for(self, name: str, tenant_id: str) -> ToolSpec | None:
        """The spec of ``name`` as it runs for ``tenant_id``: the tenant's own implementation and
        credential when the release overrides the tool for it, else the shared one (None for an
        unknown name). ``tenant_id`` must come from the authenticated principal or the store's
        record of the operation, never from a model argument or checkpointed state."""
        spec = self.get(name)
        if spec is None:
            return None
        return self.overrides.get(tenant_id, {}).get(spec.name, spec)

    def breaker_key(self, name: str, tenant_id: str) -> str:
        """The circuit breaker a call of ``name`` for ``tenant_id`` counts against: one per
        dependency, so a tenant's own implementation failing never opens the shared one's."""
        spec = self.get(name)
        real = spec.name if spec is not None else name
        return f"{real}@{tenant_id}" if real in self.overrides.get(tenant_id, {}) else real

    def has_stateful_writes(self) -> bool:
        """True when any tool writes; parallel tool calls are then disabled."""
        return any(s.is_write for s in self.tools.values())

    def openai_tools(self, specs: Iterable[ToolSpec]) -> list[dict[str, Any]]:
        """OpenAI tool definitions for ``specs`` under their wire names (strict where the arguments
        allow it, see `toolgate.tools.schema.export.exported_parameters`), every description in
        them plain text (`toolgate.tools.model_text.plain_text`)."""
        return [
            copy.deepcopy(_openai_definition(s.wire_name, model_description(s), s.args_model)) for s in specs
        ]

    def anthropic_tools(self, specs: Iterable[ToolSpec]) -> list[dict[str, Any]]:
        """Anthropic tool definitions for ``specs`` under their wire names, with the same plain text."""
        return [anthropic_tool(s.wire_name, model_description(s), s.args_model) for s in specs]

    def structured_tools(self) -> list[StructuredTool]:
        """Every tool as a LangChain StructuredTool bound to its Pydantic schema."""
        return [to_structured_tool(s) for _, s in sorted(self.tools.items())]


@functools.lru_cache(maxsize=4096)
def _openai_definition(wire_name: str, description: str, args_model: type[Any]) -> dict[str, Any]:
    """A tool's exported definition, built once per process: the model node asks for it on every
    turn, and its schema never changes while the process runs (a spec's argument model is fixed).
    Callers get a deep copy, so the cached value is never mutated."""
    return openai_tool(wire_name, description, args_model)


__all__ = ["Registry"]
