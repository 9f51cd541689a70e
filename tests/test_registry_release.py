"""Release manifests and the registry audit: a complete bundle passes, broken ones name their defect."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from support import TEST_KEY, cli_env, toolgate

from toolgate.errors import RegistryError
from toolgate.graph.bootstrap import release_manifest
from toolgate.releases.bundle import Release, ReleaseEnv
from toolgate.store import SQLiteStore
from toolgate.tools.demo.release import DEMO_RELEASES
from toolgate.tools.manifest import manifest_drift, verify_release
from toolgate.tools.registry import Registry

REFUND = DEMO_RELEASES["ops-tools/1.0.0"]

FIGURES = [
    "release=ops-tools/1.0.0",
    "dynamic_handlers=0",
    "write_without_approval=0",
    "identity_fields_in_schemas=0",
    "generic_executors=0",
    "manifest=MATCH",
    "audit=PASS",
]


def _registry(release: Release = REFUND) -> Registry:
    return release.registry(ReleaseEnv(SQLiteStore("unused.sqlite", key=TEST_KEY), secret=b"k"))


def test_committed_manifest_matches_the_bundle() -> None:
    for release in DEMO_RELEASES.values():
        effective = release_manifest(release, _registry(release))
        assert manifest_drift(release.reviewed_manifest(), effective) == []
        verify_release(release.reviewed_manifest(), effective, "offline")


def test_startup_refuses_a_drifted_bundle_and_an_unpinned_model() -> None:
    registry = _registry()
    reviewed = REFUND.reviewed_manifest()
    drifted = replace(REFUND, policy=replace(REFUND.policy, sha256="0" * 64))
    with pytest.raises(RegistryError, match=r"drifted from its reviewed manifest.*policy"):
        verify_release(reviewed, release_manifest(drifted, registry), "offline")
    with pytest.raises(RegistryError, match="not pinned"):
        verify_release(reviewed, release_manifest(REFUND, registry), "openai:gpt-unreviewed")
    refund = registry.tools["issue_refund"]
    changed = replace(registry, tools={**registry.tools, "issue_refund": replace(refund, timeout_s=99)})
    with pytest.raises(RegistryError, match="issue_refund: metadata_sha256 drifted"):
        verify_release(reviewed, release_manifest(REFUND, changed), "offline")
    instructed = replace(REFUND, instructions=REFUND.instructions + "\nAlways refund.")
    with pytest.raises(RegistryError, match="instructions_sha256"):
        verify_release(reviewed, release_manifest(instructed, registry), "offline")


def test_registry_audit_passes_for_the_demo_release(tmp_path: Path) -> None:
    result = toolgate(["registry", "audit", "--release", "ops-tools/1.0.0"], cli_env(tmp_path))
    for figure in FIGURES:
        assert figure in result.stdout.splitlines()
    tools = int(
        next(line for line in result.stdout.splitlines() if line.startswith("tool_count=")).split("=")[1]
    )
    for key in ("timeouts", "output_limits", "policy_bindings"):
        assert f"{key}={tools}/{tools}" in result.stdout


@pytest.mark.parametrize(
    ("bundle", "figure", "defect"),
    [
        ("shell_tool", "generic_executors=1", "run_maintenance: generic executor parameters: command"),
        ("write_without_approval", "write_without_approval=1", "a write needs an approval class"),
        (
            "identity_argument",
            "identity_fields_in_schemas=1",
            "identity or authority in arguments: tenant_id",
        ),
        ("dynamic_handler", "dynamic_handlers=1", "handler resolves code dynamically"),
        ("unbounded_arguments", "unbounded_arguments=2", "annotate_order: unbounded arguments"),
    ],
)
def test_registry_audit_fails_on_broken_bundles(
    tmp_path: Path, bundle: str, figure: str, defect: str
) -> None:
    env = cli_env(tmp_path, PYTHONPATH=str(Path(__file__).parent))
    result = toolgate(["registry", "audit", "--bundle", f"fixtures.bundles:{bundle}"], env, check=False)
    assert result.returncode == 1
    assert figure in result.stdout.splitlines()
    assert defect in result.stdout and "audit=FAIL" in result.stdout


def test_registry_audit_prints_the_inventory_and_warns_of_complex_schemas(tmp_path: Path) -> None:
    env = cli_env(tmp_path, PYTHONPATH=str(Path(__file__).parent))
    result = toolgate(["registry", "audit", "--bundle", "fixtures.bundles:complex_arguments"], env)
    lines = result.stdout.splitlines()
    release = lines[0].removeprefix("release=")
    assert "complex_schemas=1" in lines and "unbounded_arguments=0" in lines and lines[-1] == "audit=PASS"
    assert "tool=ship_order risk=caution approval=operator timeout=5s" in lines
    assert (
        "tool=issue_refund risk=danger approval=two_person(finance,support;sole=finance) timeout=15s" in lines
    )
    assert f"arbitrary_shell=REJECTED unknown_rollback=REJECTED registry_candidate={release}" in lines
    assert "warning=ship_order: arguments nest 3 levels deep (aim for 2 at most)" in lines
    assert "warning=ship_order: 12 leaf arguments (aim for fewer than 10)" in lines
    shell = toolgate(["registry", "audit", "--bundle", "fixtures.bundles:shell_tool"], env, check=False)
    assert f"arbitrary_shell=PRESENT unknown_rollback=REJECTED registry_candidate={release}" in shell.stdout


def test_registry_audit_fails_on_a_drifted_hash(tmp_path: Path) -> None:
    env = cli_env(tmp_path, PYTHONPATH=str(Path(__file__).parent))
    manifest = json.loads(json.dumps(REFUND.reviewed_manifest()))
    manifest["tools"]["lookup_order"]["code_sha256"] = "f" * 64
    path = tmp_path / "reviewed.json"
    path.write_text(json.dumps(manifest))
    result = toolgate(
        ["registry", "audit", "--bundle", "fixtures.bundles:healthy", "--manifest", str(path)],
        env,
        check=False,
    )
    assert result.returncode == 1
    assert "manifest=DRIFT" in result.stdout and "lookup_order: code_sha256 drifted" in result.stdout


def test_exported_schemas_pass_the_strict_check(tmp_path: Path) -> None:
    result = toolgate(["registry", "schemas", "--check"], cli_env(tmp_path))
    assert "schemas_checked=PASS" in result.stdout
    assert (
        "schema=issue_refund wire_name=issue_refund strict=true required=3/3 additional_properties=false"
        " unsupported_keywords=0" in (result.stdout)
    )
