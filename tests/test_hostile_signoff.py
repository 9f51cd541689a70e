"""A gate report is a file anyone can write: what a reviewer's sign-off of one may bind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolgate.canonical import digest
from toolgate.clock import iso
from toolgate.evals.report import REPORT_KIND, REPORT_SCHEMA_VERSION, report_digest
from toolgate.evals.signoff import ReviewRefused, reviewed_cases, sign_off
from toolgate.graph.bootstrap import initialize_store
from toolgate.policy.identities import IdentityDirectory
from toolgate.releases.loader import load_release
from toolgate.store.audit import Auditor
from toolgate.store.base import Store
from toolgate.tools.demo.identities import seed_demo_identities

CANDIDATE = "ops-tools/1.1.0"


@pytest.mark.xfail(
    strict=True,
    reason="decision: should `evals review` sign only a report whose digest a gate run recorded in "
    "the store (`release.gate_recorded` names it), refusing any other (`report_unknown`)? A report's "
    "digest is an unkeyed SHA-256 anyone recomputes, so `report_tampered` only catches careless "
    "edits: a report written by hand, with critical cases shown passing, is signed and counts for "
    "the real candidate's gate. Requiring a recorded run refuses reports of runs without a control or store",
)
def test_a_report_no_gate_run_wrote_is_not_signed(store: Store, tmp_path: Path) -> None:
    initialize_store(store, load_release(CANDIDATE))
    directory = IdentityDirectory(store)
    seed_demo_identities(directory)
    dataset_sha, manifest_sha = digest("the operator's dataset"), digest("the candidate's bundle")
    forged = {
        "kind": REPORT_KIND,
        "schema_version": REPORT_SCHEMA_VERSION,
        "generated_at": iso(store.now()),
        "model": "scripted",
        "dataset": {"sha256": dataset_sha},
        "candidate": {
            "release": CANDIDATE,
            "manifest_sha256": manifest_sha,
            "cases": [{"id": "xt-ada-reads-globex", "critical": True, "tenant": "acme", "passed": True}],
        },
    }
    forged["digest"] = report_digest(forged)
    path = tmp_path / "report.json"
    path.write_text(json.dumps(forged), encoding="utf-8")
    ivy = directory.active("ivy", "acme")
    assert ivy is not None

    with pytest.raises(ReviewRefused) as refused:
        sign_off(store, Auditor(store, CANDIDATE), directory, path, ivy)

    assert refused.value.code == "report_unknown"
    assert reviewed_cases(store, dataset_sha, manifest_sha, {"xt-ada-reads-globex": "acme"}) == []
