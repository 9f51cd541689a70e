"""Release manifests: the reviewed hashes of one immutable bundle.

A release is tool schemas, handler code, policy, instructions and the pinned models, each with
its SHA-256. The reviewed manifest is committed beside the release (its ``manifest.json``, see
`toolgate.releases.bundle`); startup computes the effective hashes and refuses to run when anything
drifted (never run on mixed hashes). ``toolgate registry manifest`` prints the
effective manifest for review, or writes it beside the release. Which code stands for a
handler (its ``code_sha256``) is decided in `toolgate.tools.code_hash`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from toolgate.canonical import digest, sha256_hex
from toolgate.errors import RegistryError
from toolgate.tools.code_hash import code_pin, handler_source_hash
from toolgate.tools.schema.export import exported_parameters
from toolgate.tools.spec import ToolSpec, manifest_fields

SCHEMA_VERSION = 1


def tool_fingerprint(spec: ToolSpec) -> dict[str, Any]:
    """The hashes that pin one tool: contract, handler revision and code, and its safety metadata."""
    return {
        "version": spec.version,
        "schema_sha256": digest(
            {
                # what the model is sent (declared defaults included): a changed default drifts
                "arguments": exported_parameters(spec.args_model)[0],
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
                **({"identity_exempt": sorted(spec.identity_exempt)} if spec.identity_exempt else {}),
                **({"resources": _resources(spec)} if _resources(spec) else {}),
                **_reach(spec),
                **manifest_fields(spec),
            }
        ),
        # readable too: what a tool's handler may hold and reach is what a reviewer reads first
        **({"reach": _reach(spec)} if _reach(spec) else {}),
        # and the pin of a remote tool's definition (also inside code_sha256): what a reload changed
        **({"remote_pin": code_pin(spec.handler)} if code_pin(spec.handler) else {}),
        **manifest_fields(spec),  # cost estimate, per-tool rate limit, deprecation (when set)
    }


def _reach(spec: ToolSpec) -> dict[str, Any]:
    """What the handler may hold and reach (declared credentials, service scope, egress hosts):
    widening any of them is a reviewed change. Absent when the tool declares none."""
    reach: dict[str, Any] = {}
    if spec.forwarded_credentials:
        reach["forwarded_credentials"] = sorted(spec.forwarded_credentials)
    if spec.service_credential is not None:
        scope = spec.service_credential
        reach["service_credential"] = {"audience": scope.audience, "scopes": sorted(scope.scopes)}
    if spec.egress_hosts:
        reach["egress_hosts"] = sorted(spec.egress_hosts)
    return reach


def _resources(spec: ToolSpec) -> list[dict[str, Any]]:
    """The ownership declarations beyond the main resource (kind, path, staff roles, whether an
    owner check is declared): a change to who may touch what is a reviewed change."""
    declared = [
        {
            "kind": ref.kind,
            "argument": ref.argument,
            "conflict": ref.conflict,
            "owner_check": ref.owner is not None,
            "staff_roles": sorted(ref.staff_roles),
        }
        for ref in spec.resource_refs
    ]
    plain = spec.resource is not None and spec.resource.owner is None and not spec.resource.staff_roles
    return [] if not spec.resources and (spec.resource is None or plain) else declared


def effective_manifest(
    release: str,
    specs: Sequence[ToolSpec],
    *,
    policy_version: str,
    policy_sha256: str,
    instructions: str,
    pinned_models: Sequence[str],
    tool_choice: str = "auto",
    tenant_overrides: Mapping[str, Mapping[str, ToolSpec]] | None = None,
) -> dict[str, Any]:
    """The manifest this process would run with. Tenants' own implementations
    (`toolgate.tools.tenant_overrides`) are pinned under ``tenant_overrides`` (present only when
    the release has any), each with the same fingerprint as a tool."""
    overrides = {
        tenant: {name: tool_fingerprint(spec) for name, spec in sorted(by_name.items())}
        for tenant, by_name in sorted((tenant_overrides or {}).items())
        if by_name
    }
    return {
        **({"tenant_overrides": overrides} if overrides else {}),
        "tool_choice": tool_choice,
        "schema_version": SCHEMA_VERSION,
        "release": release,
        "pinned_models": sorted(pinned_models),
        "instructions_sha256": sha256_hex(instructions),
        "policy": {"version": policy_version, "sha256": policy_sha256},
        "tools": {spec.name: tool_fingerprint(spec) for spec in sorted(specs, key=lambda s: s.name)},
    }


def check_manifest(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A reviewed manifest as read from ``where``, refusing unknown schema versions."""
    if data.get("schema_version") != SCHEMA_VERSION:
        raise RegistryError(f"manifest {where}: unsupported schema_version {data.get('schema_version')!r}")
    return dict(data)


def manifest_drift(reviewed: Mapping[str, Any], effective: Mapping[str, Any]) -> list[str]:
    """Human-readable differences, one per drifted hash (empty when the bundle matches)."""
    drift: list[str] = []
    for key in ("release", "instructions_sha256", "policy"):
        if reviewed.get(key) != effective.get(key):
            drift.append(f"{key}: reviewed {reviewed.get(key)!r} != effective {effective.get(key)!r}")
    # a manifest written before the setting existed reviewed the default
    if reviewed.get("tool_choice", "auto") != effective.get("tool_choice", "auto"):
        drift.append(
            f"tool_choice: reviewed {reviewed.get('tool_choice', 'auto')!r} != "
            f"effective {effective.get('tool_choice', 'auto')!r}"
        )
    drift.extend(_tools_drift("tool", reviewed.get("tools", {}), effective.get("tools", {})))
    reviewed_overrides: Mapping[str, Any] = reviewed.get("tenant_overrides", {})
    effective_overrides: Mapping[str, Any] = effective.get("tenant_overrides", {})
    for tenant in sorted(set(reviewed_overrides) | set(effective_overrides)):
        drift.extend(
            _tools_drift(
                f"tenant {tenant} override of",
                reviewed_overrides.get(tenant, {}),
                effective_overrides.get(tenant, {}),
            )
        )
    return drift


def _tools_drift(label: str, reviewed: Mapping[str, Any], effective: Mapping[str, Any]) -> list[str]:
    drift: list[str] = []
    for name in sorted(set(reviewed) | set(effective)):
        if name not in effective:
            drift.append(f"{label} {name}: in the reviewed manifest but not in the bundle")
        elif name not in reviewed:
            drift.append(f"{label} {name}: in the bundle but never reviewed")
        else:
            for field, value in reviewed[name].items():
                if effective[name].get(field) != value:
                    drift.append(f"{label} {name}: {field} drifted")
    return drift


def check_model_pinned(reviewed: Mapping[str, Any], model: str) -> None:
    """Refuse a model the release does not pin (``offline`` is the deterministic `toolgate.models.offline`)."""
    if model not in reviewed.get("pinned_models", []):
        raise RegistryError(
            f"model {model!r} is not pinned by release {reviewed.get('release')!r} "
            f"(pinned: {', '.join(reviewed.get('pinned_models', []))})"
        )


def verify_release(reviewed: Mapping[str, Any], effective: Mapping[str, Any], model: str) -> None:
    """Startup check: the effective bundle equals the reviewed manifest, and the model is pinned."""
    drift = manifest_drift(reviewed, effective)
    if drift:
        raise RegistryError(
            f"release {effective['release']} drifted from its reviewed manifest; refusing to start: "
            + "; ".join(drift)
        )
    check_model_pinned(reviewed, model)


__all__ = [
    "check_manifest",
    "check_model_pinned",
    "effective_manifest",
    "manifest_drift",
    "tool_fingerprint",
    "verify_release",
]
