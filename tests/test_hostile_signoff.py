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
from toolgate.store.evidence import record
from toolgate.tools.demo.identities import seed_demo_identities

CANDIDATE = "ops-tools/1.1.0"
DATASET_SHA, MANIFEST_SHA = digest("the operator's dataset"), digest("the candidate's bundle")


def forged_report(store: Store, directory: IdentityDirectory) -> dict[str, object]:
    """A report written by hand, digest and all, its critical case shown passing; the store set up
    with the demo people."""
    initialize_store(store, load_release(CANDIDATE))
    seed_demo_identities(directory)
    forged: dict[str, object] = {
        "kind": REPORT_KIND,
        "schema_version": REPORT_SCHEMA_VERSION,
        "generated_at": iso(store.now()),
        "model": "scripted",
        "dataset": {"sha256": DATASET_SHA},
        "candidate": {
            "release": CANDIDATE,
            "manifest_sha256": MANIFEST_SHA,
            "cases": [{"id": "xt-ada-reads-globex", "critical": True, "tenant": "acme", "passed": True}],
        },
    }
    forged["digest"] = report_digest(forged)
    return forged


def signed_by_ivy(
    store: Store, directory: IdentityDirectory, report: dict[str, object], tmp_path: Path
) -> ReviewRefused:
    """ivy, a reviewer of acme, signs ``report`` written to a file; the refusal (a signature
    fails the test)."""
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report), encoding="utf-8")
    ivy = directory.active("ivy", "acme")
    assert ivy is not None
    with pytest.raises(ReviewRefused) as refused:
        sign_off(store, Auditor(store, CANDIDATE), directory, path, ivy)
    return refused.value


def test_a_report_no_gate_run_wrote_is_not_signed(store: Store, tmp_path: Path) -> None:
    """`evals review` signs only a report whose digest a gate run recorded in the store (the MAC'd
    gate row, and its ``release.gate_recorded`` event, name it); any other report is refused
    ``report_unknown`` (audited ``evals.review_refused``), nothing signed. A report's digest is an
    unkeyed SHA-256 anyone recomputes, so ``report_tampered`` only catches careless edits: a report
    written by hand, with critical cases shown passing, would count for the real candidate's gate.
    The price: reports of runs without a control or a store cannot be signed."""
    directory = IdentityDirectory(store)
    forged = forged_report(store, directory)
    refused = signed_by_ivy(store, directory, forged, tmp_path)

    assert refused.code == "report_unknown"
    assert reviewed_cases(store, DATASET_SHA, MANIFEST_SHA, {"xt-ada-reads-globex": "acme"}) == []
    [event] = [e for e in store.audit.events() if e.event.startswith("evals.")]
    assert (event.event, event.code, event.detail["report_digest"]) == (
        "evals.review_refused",
        "report_unknown",
        forged["digest"],
    )


def test_a_gate_row_written_without_the_stores_key_does_not_make_a_report_known(
    store: Store, tmp_path: Path
) -> None:
    """Database access alone cannot make a hand-written report signable: the gate row that names
    its digest must verify under the store's key (edited here to name the forged report)."""
    directory = IdentityDirectory(store)
    forged = forged_report(store, directory)
    gate = record(
        store,
        "gate",
        release=CANDIDATE,
        manifest_sha256=MANIFEST_SHA,
        control="ops-tools/1.0.0",
        control_sha256=digest("the control's bundle"),
        dataset_sha256=DATASET_SHA,
        verdict="PASS",
        recorded_by="toolgate.evals",
        detail={"report_digest": "0" * 64, "model": "scripted", "derived": 3},
    )
    with store.transaction() as tx:  # what a writer without the key can do: point the row at the forgery
        tx.execute(
            "UPDATE release_evidence SET detail = ? WHERE evidence_id = ?",
            (json.dumps({"report_digest": forged["digest"], "model": "scripted", "derived": 3}), gate.evidence_id),
        )
    refused = signed_by_ivy(store, directory, forged, tmp_path)

    assert refused.code == "report_unknown"
    assert reviewed_cases(store, DATASET_SHA, MANIFEST_SHA, {"xt-ada-reads-globex": "acme"}) == []
