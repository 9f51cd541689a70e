"""What identifies the bundle an evaluation ran: its effective manifest and whether it was reviewed.

A report (and every sign-off on it) names the candidate by the SHA-256 of its effective manifest:
tool schemas, handler code, policy, instructions and pinned models as loaded, before any handler
is instrumented. A candidate whose bundle differs from its own reviewed manifest is
irreproducible, and the gate says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from toolgate.canonical import digest
from toolgate.graph.bootstrap import release_manifest
from toolgate.policy.cost_limits import CostLimits
from toolgate.releases.bundle import Release
from toolgate.tools.manifest import manifest_drift
from toolgate.tools.registry import Registry


@dataclass(frozen=True)
class ReleaseFacts:
    """The identity of an evaluated bundle."""

    release: str
    """Release id."""
    manifest_sha256: str
    """SHA-256 of the effective manifest (canonical JSON)."""
    manifest_status: str
    """``verified`` (equals its reviewed manifest), ``missing`` (none shipped) or ``drifted``."""
    drift: tuple[str, ...] = ()
    """What differs from the reviewed manifest, when drifted."""
    policy_version: str = ""
    tools: tuple[str, ...] = ()
    """Names of the release's tools."""
    cost_limits: CostLimits = field(default_factory=CostLimits)
    """Its policy's per-task cost limits against a control."""

    def applies_to(self, requires: list[str]) -> bool:
        """True when the release has every tool a case requires."""
        return set(requires) <= set(self.tools)


def release_facts(release: Release, registry: Registry) -> ReleaseFacts:
    """Facts of ``release`` as loaded into ``registry`` (uninstrumented handlers)."""
    effective = release_manifest(release, registry)
    drift: tuple[str, ...] = ()
    if release.manifest is None:
        status = "missing"
    else:
        drift = tuple(manifest_drift(release.manifest, effective))
        status = "drifted" if drift else "verified"
    return ReleaseFacts(
        release=release.id,
        manifest_sha256=digest(effective),
        manifest_status=status,
        drift=drift,
        policy_version=release.policy.policy_version,
        tools=tuple(sorted(registry.tools)),
        cost_limits=release.policy.cost_limits,
    )


__all__ = ["ReleaseFacts", "release_facts"]
