"""``toolgate registry``: audit a release bundle, check its exported schemas and their quality, print its
manifest."""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from toolgate.cli.lines import kv_line
from toolgate.config import Settings
from toolgate.errors import ConfigurationError
from toolgate.graph.bootstrap import release_manifest
from toolgate.releases.bundle import INSTRUCTIONS, Release, ReleaseEnv
from toolgate.releases.loader import load_release
from toolgate.store.factory import open_store
from toolgate.tools.audit import audit_overrides, audit_specs
from toolgate.tools.manifest import effective_manifest
from toolgate.tools.registry import Registry
from toolgate.tools.schema.export import anthropic_tool, openai_tool, strict_problems
from toolgate.tools.schema.fixtures import check_fixtures
from toolgate.tools.schema.quality import release_quality
from toolgate.tools.spec import ToolSpec

registry_app = typer.Typer(no_args_is_help=True, help="Audit and inspect tool releases.")

SPECS_ONLY_KEY = b"toolgate-registry-specs-only-never-connected"
"""Registry commands build specs on a store that is never connected; no MAC is made with this."""


def _registry(release: Release) -> Registry:
    """The release's registry built on a store that is never connected (specs only), with a
    throwaway secret: nothing is signed with it."""
    settings = Settings.from_env()
    store = open_store(settings.database_url, settings.data_dir, key=SPECS_ONLY_KEY)
    return release.registry(ReleaseEnv(store=store, secret=SPECS_ONLY_KEY))


def _release_specs(release: Release) -> Callable[[], Sequence[ToolSpec]]:
    return lambda: list(_registry(release).tools.values())


def _registry_specs(release: Release, built: list[Registry]) -> Callable[[], Sequence[ToolSpec]]:
    """The release's specs, keeping the registry they came from in ``built``."""

    def load() -> list[ToolSpec]:
        built.append(_registry(release))
        return list(built[-1].tools.values())

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
    release: Annotated[
        str | None,
        typer.Option(
            help="Release to audit (id, 'package.module:attribute' or 'path.py:attribute'; "
            "default: TOOLGATE_RELEASE)."
        ),
    ] = None,
    bundle: Annotated[
        str | None, typer.Option(help="Audit 'module:function' returning ToolSpecs instead.")
    ] = None,
    manifest: Annotated[
        Path | None, typer.Option(help="Reviewed manifest JSON to compare a --bundle with.")
    ] = None,
) -> None:
    """Print the registry audit figures and every defect; exit 1 on any defect."""
    release = release or Settings.from_env().release
    loaded = load_release(release) if bundle is None else None
    policy = loaded.policy if loaded else None
    reviewed: Mapping[str, Any] | None
    built: list[Registry] = []  # the release's registry, once loaded: its tenants' overrides are audited too
    load: Callable[[], Sequence[ToolSpec]]
    if loaded is not None:
        release = loaded.id
        reviewed = loaded.manifest
        load = _registry_specs(loaded, built)
    else:
        assert bundle is not None
        reviewed = json.loads(manifest.read_text(encoding="utf-8")) if manifest else None
        load = _bundle_specs(bundle)

    def effective(specs: Sequence[ToolSpec]) -> dict[str, Any]:
        assert reviewed is not None
        if loaded is not None and built:
            return release_manifest(loaded, built[-1])
        pol = reviewed.get("policy", {})
        return effective_manifest(
            release,
            specs,
            policy_version=policy.policy_version if policy else str(pol.get("version")),
            policy_sha256=policy.sha256 if policy else str(pol.get("sha256")),
            instructions=loaded.instructions if loaded else INSTRUCTIONS,
            pinned_models=list(reviewed.get("pinned_models", [])),
            tool_choice=loaded.tool_choice if loaded else str(reviewed.get("tool_choice", "auto")),
        )

    report = audit_specs(release, load, reviewed=reviewed, effective=effective if reviewed else None)
    if built:  # each tenant's own implementation is audited like a tool's handler
        audit_overrides(report, built[-1].overrides)
    if loaded is not None and reviewed is None:
        report.manifest = "MISSING"
        report.defects.append("manifest: the release has no reviewed manifest (registry manifest --beside)")
    for line in report.lines():
        _say(line)
    raise typer.Exit(0 if report.passed else 1)


@registry_app.command("schemas")
def schemas(
    release: Annotated[
        str | None, typer.Option(help="Release (id or reference; default: TOOLGATE_RELEASE).")
    ] = None,
    check: Annotated[bool, typer.Option("--check", help="Validate against strict-mode rules.")] = False,
    provider: Annotated[str, typer.Option(help="openai or anthropic (printing only).")] = "openai",
) -> None:
    """Print every exported schema (under its wire name), or with --check validate each strict
    one against strict-mode rules (a schema exported non-strict keeps its declared meaning, e.g.
    optional fields, and is only reported)."""
    release = release or Settings.from_env().release
    failures = 0
    for spec in sorted(_release_specs(load_release(release))(), key=lambda s: s.name):
        tool = openai_tool(spec.wire_name, spec.description, spec.args_model)
        params, strict = tool["function"]["parameters"], bool(tool["function"]["strict"])
        if not check:
            exported = (
                tool
                if provider == "openai"
                else anthropic_tool(spec.wire_name, spec.description, spec.args_model)
            )
            _say(json.dumps(exported, sort_keys=True))
            continue
        problems = strict_problems(params) if strict else []
        fixture, alias = check_fixtures(spec.contract)
        failures += bool(problems) or fixture == "FAIL" or alias == "ACCEPTED"
        required = len(params.get("required", []))
        unsupported = sum("unsupported keyword" in p for p in problems)
        _say(
            f"schema={spec.name} wire_name={spec.wire_name} strict={str(strict).lower()}"
            f" required={required}/{len(params.get('properties', {}))} "
            f"additional_properties={str(params.get('additionalProperties')).lower()} "
            f"unsupported_keywords={unsupported} valid_fixture={fixture} unknown_alias={alias}"
            f" problems={len(problems)}"
        )
        for problem in problems:
            _say(f"problem={spec.name}: {problem}")
    if check:
        _say("schemas_checked=PASS" if not failures else f"schemas_checked=FAIL failing_tools={failures}")
    raise typer.Exit(1 if failures else 0)


@registry_app.command("lint")
def lint(
    release: Annotated[
        str | None, typer.Option(help="Release (id or reference; default: TOOLGATE_RELEASE).")
    ] = None,
) -> None:
    """The schema-quality check (the chapter's §3.1 and Lab 1): one ``schema_quality=<tool>`` line
    per tool, a ``problem=`` line per failure, and the verdict; exit 1 when any tool fails (release
    control refuses such a candidate ``schema_quality``)."""
    release = release or Settings.from_env().release
    results = release_quality(_release_specs(load_release(release))())
    for result in results:  # every value escaped: tool names and problems are free text
        _say(kv_line(**result.facts()))
        for problem in result.problems:
            _say(kv_line(problem=f"{result.name}: {problem}"))
    failing = [r.name for r in results if not r.passed]
    _say(
        kv_line(
            schema_quality="FAIL" if failing else "PASS",
            tools=len(results),
            failing=len(failing),
            **({"failing_tools": ",".join(failing)} if failing else {}),
        )
    )
    raise typer.Exit(0 if all(r.passed for r in results) else 1)


@registry_app.command("manifest")
def manifest_command(
    release: Annotated[
        str | None, typer.Option(help="Release (id or reference; default: TOOLGATE_RELEASE).")
    ] = None,
    write: Annotated[Path | None, typer.Option(help="Write the effective manifest here for review.")] = None,
    beside: Annotated[
        bool, typer.Option("--beside", help="Write it as the release's own manifest.json, for review.")
    ] = False,
) -> None:
    """Print the effective manifest (hashes of schemas, handlers, policy, instructions)."""
    release = release or Settings.from_env().release
    loaded = load_release(release)
    text = json.dumps(release_manifest(loaded, _registry(loaded)), indent=2, sort_keys=True) + "\n"
    if beside:
        if loaded.home is None:
            raise ConfigurationError(f"release {loaded.id} was not loaded from files; use --write PATH")
        write = loaded.home / "manifest.json"
    if write:
        write.write_text(text, encoding="utf-8")
        _say(f"manifest_written={write}")
    else:
        typer.echo(text, nl=False)


__all__ = ["registry_app"]
