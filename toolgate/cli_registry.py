"""``toolgate registry``: audit a release bundle, check its exported schemas, print its manifest."""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from toolgate.bootstrap import load_registry, release_manifest
from toolgate.config import Settings
from toolgate.errors import ConfigurationError
from toolgate.graph.deps import INSTRUCTIONS
from toolgate.policy.rules import PolicyRules
from toolgate.store.factory import open_store
from toolgate.tools.audit import audit_specs
from toolgate.tools.manifest import effective_manifest, reviewed_manifest
from toolgate.tools.schema_export import anthropic_tool, openai_tool, strict_problems
from toolgate.tools.spec import ToolSpec

registry_app = typer.Typer(no_args_is_help=True, help="Audit and inspect tool releases.")

SPECS_ONLY_KEY = b"toolgate-registry-specs-only-never-connected"
"""Registry commands build specs on a store that is never connected; no MAC is made with this."""


def _release_specs(release: str) -> Callable[[], Sequence[ToolSpec]]:
    settings = Settings.from_env()

    def load() -> Sequence[ToolSpec]:
        # never connected (specs only), so a throwaway secret: nothing is signed with it
        store = open_store(settings.database_url, settings.data_dir, key=SPECS_ONLY_KEY)
        return list(load_registry(release, store, secret=SPECS_ONLY_KEY).tools.values())

    return load


def _bundle_specs(reference: str) -> Callable[[], Sequence[ToolSpec]]:
    module_name, _, attribute = reference.partition(":")
    if not attribute:
        raise ConfigurationError("--bundle must be 'module:function'")
    factory = getattr(importlib.import_module(module_name), attribute)
    return lambda: list(factory())


def _say(line: str) -> None:
    typer.echo(line)


@registry_app.command("audit")
def audit(
    release: Annotated[str, typer.Option(help="Release id to audit.")] = Settings.from_env().release,
    bundle: Annotated[
        str | None, typer.Option(help="Audit 'module:function' returning ToolSpecs instead.")
    ] = None,
    manifest: Annotated[
        Path | None, typer.Option(help="Reviewed manifest JSON to compare a --bundle with.")
    ] = None,
) -> None:
    """Print the seeds' registry figures and every defect; exit 1 on any defect."""
    policy = PolicyRules.for_release(release) if bundle is None else None
    reviewed: dict[str, Any] | None
    if bundle is None:
        reviewed = reviewed_manifest(release)
        load = _release_specs(release)
    else:
        reviewed = json.loads(manifest.read_text(encoding="utf-8")) if manifest else None
        load = _bundle_specs(bundle)

    def effective(specs: Sequence[ToolSpec]) -> dict[str, Any]:
        assert reviewed is not None
        pol = reviewed.get("policy", {})
        return effective_manifest(
            release,
            specs,
            policy_version=policy.policy_version if policy else str(pol.get("version")),
            policy_sha256=policy.sha256 if policy else str(pol.get("sha256")),
            instructions=INSTRUCTIONS,
            pinned_models=list(reviewed.get("pinned_models", [])),
        )

    report = audit_specs(release, load, reviewed=reviewed, effective=effective if reviewed else None)
    for line in report.lines():
        _say(line)
    raise typer.Exit(0 if report.passed else 1)


@registry_app.command("schemas")
def schemas(
    release: Annotated[str, typer.Option(help="Release id.")] = Settings.from_env().release,
    check: Annotated[bool, typer.Option("--check", help="Validate against strict-mode rules.")] = False,
    provider: Annotated[str, typer.Option(help="openai or anthropic (printing only).")] = "openai",
) -> None:
    """Print every exported schema, or with --check validate each against strict-mode rules."""
    failures = 0
    for spec in sorted(_release_specs(release)(), key=lambda s: s.name):
        tool = openai_tool(spec.name, spec.description, spec.args_model)
        params = tool["function"]["parameters"]
        if not check:
            exported = (
                tool if provider == "openai" else anthropic_tool(spec.name, spec.description, spec.args_model)
            )
            _say(json.dumps(exported, sort_keys=True))
            continue
        problems = strict_problems(params)
        failures += bool(problems)
        required = len(params.get("required", []))
        unsupported = sum("unsupported keyword" in p for p in problems)
        _say(
            f"schema={spec.name} strict=true required={required}/{len(params.get('properties', {}))} "
            f"additional_properties={str(params.get('additionalProperties')).lower()} "
            f"unsupported_keywords={unsupported} problems={len(problems)}"
        )
        for problem in problems:
            _say(f"problem={spec.name}: {problem}")
    if check:
        _say("schemas_checked=PASS" if not failures else f"schemas_checked=FAIL failing_tools={failures}")
    raise typer.Exit(1 if failures else 0)


@registry_app.command("manifest")
def manifest_command(
    release: Annotated[str, typer.Option(help="Release id.")] = Settings.from_env().release,
    write: Annotated[Path | None, typer.Option(help="Write the effective manifest here for review.")] = None,
) -> None:
    """Print the effective manifest (hashes of schemas, handlers, policy, instructions)."""
    settings = Settings.from_env()
    store = open_store(settings.database_url, settings.data_dir, key=SPECS_ONLY_KEY)
    registry = load_registry(release, store, secret=SPECS_ONLY_KEY)
    try:
        pinned = list(reviewed_manifest(release).get("pinned_models", []))
    except Exception:
        pinned = ["offline"]
    text = (
        json.dumps(
            release_manifest(registry, PolicyRules.for_release(release), pinned), indent=2, sort_keys=True
        )
        + "\n"
    )
    if write:
        write.write_text(text, encoding="utf-8")
        _say(f"manifest_written={write}")
    else:
        typer.echo(text, nl=False)


__all__ = ["registry_app"]
