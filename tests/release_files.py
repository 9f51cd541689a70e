"""What the test releases served from a file (``TOOLGATE_RELEASE=tests/x_release.py:release``:
`streamed_release`, `worker_run_release`, `mcp_stdout_release`) share: a manifest made from their
own code, as if reviewed (a shipped release carries the manifest its reviewers read)."""

from __future__ import annotations

import secrets
import tempfile
from dataclasses import replace
from pathlib import Path

from toolgate.graph.bootstrap import release_manifest
from toolgate.releases.bundle import Release, ReleaseEnv
from toolgate.store.sqlite import SQLiteStore


def with_manifest(bundle: Release) -> Release:
    """``bundle`` carrying the manifest of its tools as they load now (on a throwaway store)."""
    with tempfile.TemporaryDirectory() as tmp:
        key = secrets.token_bytes(32)
        store = SQLiteStore(Path(tmp) / "specs-only.sqlite", key=key)
        manifest = release_manifest(bundle, bundle.registry(ReleaseEnv(store, secret=key)))
        store.close()
    return replace(bundle, manifest=manifest)
