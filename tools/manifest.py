"""Release manifests: the reviewed hashes of one immutable bundle.

A release is tool schemas, handler code, policy, instructions and the pinned models, each with
its SHA-256. The reviewed manifest is committed as ``tools/releases/<release>.json``; startup
computes the effective hashes and refuses to run when anything drifted ("fail startup on mixed
hashes", seed 000). ``toolgate registry manifest`` prints the effective manifest for review.
"""

from __future__ import annotations

import inspect
import json
import textwrap
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

from toolgate.canonical import digest, sha256_hex
from toolgate.errors import RegistryError
from toolgate.tools.schema_export import strict_json_schema
from toolgate.tools.spec import ToolSpec

SCHEMA_VERSION = 1


def handler_source_hash(spec: ToolSpec) -> str:
    """SHA-256 of the handler's source (dedented), or of its qualified name when no source exists."""
    try:
        source = textwrap.dedent(inspect.getsource(spec.handler))
    except (OSError, TypeError):
        source = f"{getattr(spec.handler, '__module__', '?')}.{getattr(spec.handler, '__qualname__', '?')}"
    return sha256_hex(source)


def tool_fingerprint(spec: ToolSpec) -> dict[str, Any]:
    """The hashes that pin one tool: contract, handler revision and code, and its safety metadata."""
    return {
        "version": spec.version,
        "schema_sha256": digest(
            {
                "arguments": strict_json_schema(spec.args_model),
                "result": spec.result_model.model_json_schema(),
            }
        ),
        "handler_revision": spec.handler_revision,
        "code_sha256": handler_source_hash(spec),
        "metadata_sha256": digest(
            {
                "risk": spec.risk,
                "owner": spec.owner,
                "description": spec.description,
                "effect": spec.effect,
                "timeout_s": spec.timeout_s,
                "max_output_bytes": spec.max_output_bytes,
                "approval": spec.approval.describe(),
                "scopes": sorted(spec.required_scopes),
                "rollback": spec.rollback_text(),
                # only when set, so manifests reviewed before the field existed stay valid
                **({"secret_arguments": spec.secret_arguments} if spec.secret_arguments != "refuse" else {}),
            }
        ),
    }


def effective_manifest(
    release: str,
    specs: Sequence[ToolSpec],
    *,
    policy_version: str,
    policy_sha256: str,
    instructions: str,
    pinned_models: Sequence[str],
) -> dict[str, Any]:
    """The manifest this process would run with."""
    return {
        "schema_version": SCHEMA_VERSION,
        "release": release,
        "pinned_models": sorted(pinned_models),
        "instructions_sha256": sha256_hex(instructions),
        "policy": {"version": policy_version, "sha256": policy_sha256},
        "tools": {spec.name: tool_fingerprint(spec) for spec in sorted(specs, key=lambda s: s.name)},
    }


def reviewed_manifest(release: str) -> dict[str, Any]:
    """The committed manifest of ``release``."""
    name = release.replace("/", "-") + ".json"
    try:
        text = resources.files("toolgate.tools").joinpath("releases", name).read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise RegistryError(f"release {release!r} has no reviewed manifest (tools/releases/{name})") from exc
    data: dict[str, Any] = json.loads(text)
    if data.get("schema_version") != SCHEMA_VERSION:
        raise RegistryError(
            f"manifest of {release}: unsupported schema_version {data.get('schema_version')!r}"
        )
    return data


def manifest_drift(reviewed: Mapping[str, Any], effective: Mapping[str, Any]) -> list[str]:
    """Human-readable differences, one per drifted hash (empty when the bundle matches)."""
    drift: list[str] = []
    for key in ("release", "instructions_sha256", "policy"):
        if reviewed.get(key) != effective.get(key):
            drift.append(f"{key}: reviewed {reviewed.get(key)!r} != effective {effective.get(key)!r}")
    reviewed_tools: Mapping[str, Any] = reviewed.get("tools", {})
    effective_tools: Mapping[str, Any] = effective.get("tools", {})
    for name in sorted(set(reviewed_tools) | set(effective_tools)):
        if name not in effective_tools:
            drift.append(f"tool {name}: in the reviewed manifest but not in the bundle")
        elif name not in reviewed_tools:
            drift.append(f"tool {name}: in the bundle but never reviewed")
        else:
            for field, value in reviewed_tools[name].items():
                if effective_tools[name].get(field) != value:
                    drift.append(f"tool {name}: {field} drifted")
    return drift


def check_model_pinned(reviewed: Mapping[str, Any], model: str) -> None:
    """Refuse a model the release does not pin (``offline`` is the deterministic demo model)."""
    if model not in reviewed.get("pinned_models", []):
        raise RegistryError(
            f"model {model!r} is not pinned by release {reviewed.get('release')!r} "
            f"(pinned: {', '.join(reviewed.get('pinned_models', []))})"
        )


def verify_release(effective: Mapping[str, Any], model: str) -> None:
    """Startup check: the effective bundle equals the reviewed manifest, and the model is pinned."""
    reviewed = reviewed_manifest(str(effective["release"]))
    drift = manifest_drift(reviewed, effective)
    if drift:
        raise RegistryError(
            f"release {effective['release']} drifted from its reviewed manifest; refusing to start: "
            + "; ".join(drift)
        )
    check_model_pinned(reviewed, model)


__all__ = [
    "check_model_pinned",
    "effective_manifest",
    "handler_source_hash",
    "manifest_drift",
    "reviewed_manifest",
    "tool_fingerprint",
    "verify_release",
]
