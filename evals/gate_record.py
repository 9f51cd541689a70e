"""A gate run's verdict kept in the configured store: the ``gate`` evidence row release control
judges a move by (`toolgate.releases.evidence`) and the ``release.gate_recorded`` audit event that
names it. Both name the digest of the run's report, the only report ``evals review`` signs
(`toolgate.store.evidence.recorded_gate`)."""

from __future__ import annotations

from toolgate.evals.gate import GateResult
from toolgate.releases.evidence import GATE_RECORDED
from toolgate.store.audit import Auditor
from toolgate.store.base import Store
from toolgate.store.evidence import Evidence, record


def record_gate_run(store: Store, result: GateResult, report_digest: str) -> Evidence:
    """Record the verdict of ``result`` (a run against a control; every check but review) for its
    exact bundles and dataset, naming the report of ``report_digest``, and audit it."""
    assert result.control is not None, "only a run against a control is release evidence"
    candidate, control = result.candidate.facts, result.control.facts
    failures = result.tested_failures()
    evidence = record(
        store,
        "gate",
        release=candidate.release,
        manifest_sha256=candidate.manifest_sha256,
        control=control.release,
        control_sha256=control.manifest_sha256,
        dataset_sha256=result.dataset.sha256,
        verdict="FAIL" if failures else "PASS",
        recorded_by="toolgate.evals",
        detail={
            "report_digest": report_digest,
            "model": result.candidate.model,
            "derived": len(result.derived),
            "critical": result.critical_tenants(),
            "failures": [f[:300] for f in failures[:20]],
        },
    )
    Auditor(store, candidate.release).record(
        GATE_RECORDED,
        evidence.verdict.lower(),
        detail={
            "evidence_id": evidence.evidence_id,
            "candidate_sha256": candidate.manifest_sha256,
            "control": control.release,
            "control_sha256": control.manifest_sha256,
            "dataset_sha256": result.dataset.sha256,
            "report_digest": report_digest,
            "model": result.candidate.model,
            "derived": len(result.derived),
        },
    )
    return evidence


__all__ = ["record_gate_run"]
