"""Reading and exporting captured cases (the rules: `toolgate.evals.captured.capture`).

Only reviewed cases are exported, and only those whose rows verify and whose reviewer still
reviews for their tenant: the file ``toolgate evals run --dataset`` runs holds nothing else.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from toolgate.canonical import sha256_hex
from toolgate.errors import StoreError
from toolgate.evals.captured import rows as table
from toolgate.evals.captured.capture import REVIEW_ROLES, covers, refuse, require_reader
from toolgate.evals.captured.rows import CapturedCase
from toolgate.evals.fixtures import EvalCase, dump_cases
from toolgate.policy.identities import IdentityDirectory
from toolgate.policy.principal import Principal
from toolgate.store.audit import Auditor
from toolgate.store.base import Store


def visible(
    store: Store, auditor: Auditor, person: Principal, *, status: str | None = None, action: str = "read"
) -> list[CapturedCase]:
    """The captured cases of the tenants ``person`` covers (check ``intact`` on each)."""
    require_reader(auditor, person, action)
    try:
        found = table.rows(store, status=status)
    except StoreError:
        return []  # a store created before captured cases existed, opened read-only
    return [r for r in found if covers(person, r.tenant_id)]


def show(store: Store, auditor: Auditor, person: Principal, capture_id: str) -> CapturedCase:
    """One captured case ``person`` may read (a row that does not verify is shown, marked so)."""
    require_reader(auditor, person, "read")
    row = table.get(store, capture_id)
    if row is None or not covers(person, row.tenant_id):
        code, message = ("not_found", f"no captured case {capture_id}")
        if row is not None:
            code, message = "cross_tenant", f"{person.user_id!r} does not act for tenant {row.tenant_id!r}"
        raise refuse(auditor, code, message, action="read", user_id=person.user_id, subject=capture_id)
    return row


@dataclass(frozen=True)
class Export:
    """What ``evals captured export`` wrote."""

    path: Path
    cases: list[str]
    """Case ids written, oldest capture first."""
    sha256: str
    """SHA-256 of the file (the dataset digest the gate reports)."""
    skipped: dict[str, str] = field(default_factory=dict)
    """Reviewed captures left out, with why: ``tampered`` or ``reviewer_unverified``."""


def export(
    store: Store, auditor: Auditor, directory: IdentityDirectory, person: Principal, out: Path
) -> Export:
    """Write every reviewed, verified case of the tenants ``person`` covers to ``out`` (JSONL)."""
    candidates = visible(store, auditor, person, status="reviewed", action="export")
    cases: list[EvalCase] = []
    skipped: dict[str, str] = {}
    for row in candidates:
        if not row.intact():
            skipped[row.capture_id] = "tampered"
            continue
        reviewer = directory.reviewer_for(row.reviewed_by or "", row.tenant_id)
        if reviewer is None or not reviewer.roles & REVIEW_ROLES or reviewer.user_id in row.authors:
            skipped[row.capture_id] = "reviewer_unverified"
            continue
        cases.append(row.case())
    tampered = sorted(k for k, why in skipped.items() if why == "tampered")
    if tampered:
        refuse(
            auditor,
            "capture_tampered",
            f"reviewed captured cases changed outside toolgate, not exported: {', '.join(tampered)}",
            action="export",
            user_id=person.user_id,
            tenant_id=person.tenant_id,
            subject=",".join(tampered)[:300],
        )
    if not cases:
        raise refuse(
            auditor,
            "nothing_to_export",
            "no reviewed captured case verifies for your tenants; nothing was written",
            action="export",
            user_id=person.user_id,
            tenant_id=person.tenant_id,
        )
    text = dump_cases(cases)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.{os.getpid()}.partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(out)  # a reader sees the old file or the whole new one
    result = Export(path=out, cases=[c.id for c in cases], sha256=sha256_hex(text), skipped=skipped)
    auditor.record(
        "evals.cases_exported",
        "exported",
        user_id=person.user_id,
        tenant_id=person.tenant_id,
        detail={"cases": result.cases, "sha256": result.sha256, "skipped": skipped},
    )
    return result


__all__ = ["Export", "export", "show", "visible"]
