"""The effective manifest of a release as loaded in this process, and the startup check of it
against the reviewed one (`toolgate.tools.manifest`).

Beside the tools, policy, instructions and pinned models, the manifest records the release's
``tool_choice``: a change of how the model is asked to use tools is a reviewed change."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolgate.releases.bundle import Release
from toolgate.tools.manifest import effective_manifest, verify_release
from toolgate.tools.registry import Registry

DEFAULT_PINNED = ("offline",)
"""Models a release pins before its manifest is first written (the deterministic demo model)."""


def release_manifest(release: Release, registry: Registry) -> dict[str, Any]:
    """The effective manifest of ``release`` as loaded in this process (``registry``)."""
    reviewed: Mapping[str, Any] = release.manifest or {}
    return effective_manifest(
        release.id,
        list(registry.tools.values()),
        policy_version=release.policy.policy_version,
        policy_sha256=release.policy.sha256,
        instructions=release.instructions,
        pinned_models=list(reviewed.get("pinned_models", DEFAULT_PINNED)),
        tool_choice=release.tool_choice,
        tenant_overrides=registry.overrides,
    )


def verified_release(release: Release, registry: Registry, model: str) -> None:
    """Refuse to start when the bundle drifted from its reviewed manifest or the model is not pinned."""
    verify_release(release.reviewed_manifest(), release_manifest(release, registry), model)


__all__ = ["DEFAULT_PINNED", "release_manifest", "verified_release"]
