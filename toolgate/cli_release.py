"""``toolgate release``: start a release package of your own.

``toolgate release init acme-tools`` writes a package with one read and one write tool, its
policy, its reviewed manifest, a seed file of people and a passing test (`toolgate.scaffold`),
then prints how to point ``TOOLGATE_RELEASE`` at it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from toolgate.bootstrap import release_manifest
from toolgate.cli_common import kv
from toolgate.config import Settings
from toolgate.scaffold import package_name, scaffold
from toolgate.store.factory import open_store
from toolgate.tools.release import ReleaseEnv
from toolgate.tools.release_loader import load_release, registered_releases

release_app = typer.Typer(no_args_is_help=True, help="Create and list tool releases.")

SPECS_ONLY_KEY = b"toolgate-release-init-specs-only-never-connected"
"""The manifest is computed from specs built on a store that is never connected."""


@release_app.command("init")
def init(
    name: Annotated[str, typer.Argument(help="Distribution name of the new release, e.g. acme-tools.")],
    directory: Annotated[Path, typer.Option("--dir", help="Where to create it.")] = Path("."),
) -> None:
    """Create a release package NAME with one read and one write tool, its policy, reviewed
    manifest and a test that passes as generated."""
    root = scaffold(name, directory)
    reference = f"{(root / package_name(name) / 'release.py').resolve()}:release"
    release = load_release(reference)
    settings = Settings.from_env()
    store = open_store(None, settings.data_dir, key=SPECS_ONLY_KEY)
    manifest = release_manifest(release, release.registry(ReleaseEnv(store, secret=SPECS_ONLY_KEY)))
    assert release.home is not None
    (release.home / "manifest.json").write_text(
        json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
    kv(release=release.id, created=root, tools=",".join(sorted(manifest["tools"])))
    kv(next=f"export TOOLGATE_RELEASE={reference}")


@release_app.command("list")
def list_releases() -> None:
    """Releases installed packages register (entry points), and the configured one."""
    for release_id in registered_releases():
        kv(release=release_id, installed="true")
    kv(configured=Settings.from_env().release)


__all__ = ["release_app"]
