"""Human sign-off of a gate report's critical cases (``toolgate evals review REPORT --as ...``).

Who may sign: an authenticated, active identity holding a sign-off role (`SIGN_OFF_ROLES`), for
the critical cases whose principal acts in a tenant the reviewer reviews for (their own, or one
the operator granted them as staff). Each tenant's administrator thus signs the cases that act in
their tenant; a reviewer of no tenant in the report is refused.

What a sign-off binds: the report's digest, the case id, the reviewer, and the dataset digest and
candidate manifest digest the report names. A later ``toolgate evals run`` counts a critical case
as reviewed when a sign-off exists for the same dataset digest, the same candidate manifest
digest and the same case id, whose MAC verifies (the store's secret, so a row written with
database access alone does not count) and whose reviewer still holds a sign-off role for the
case's tenant. Re-running the same candidate on the same dataset keeps its sign-offs; any change
to the bundle or to the dataset needs a new review.

A report is signed only when a gate run recorded it in this store: its digest is an unkeyed
SHA-256 anyone recomputes, so ``report_tampered`` catches careless edits only, and a report
written by hand with its critical cases shown passing would otherwise count for the real
candidate's gate. The MAC'd ``gate`` evidence row that ``toolgate evals run`` writes (with
``--control``, on an existing store, not ``--critical-only``) names its report's digest
(`toolgate.store.evidence.recorded_gate`); any other report is refused ``report_unknown``.

A report is signed only as `toolgate evals run` writes it, redacted (`toolgate.evals.redaction`):
one holding a secret-looking value (written before reports were redacted, or by hand) is refused
``report_unredacted``, so no sign-off, and no evidence that cites it, binds an unredacted export.

Refusals (unreadable, tampered or unredacted report, a live model's run, a report dated in the
store's future, wrong role, another tenant, a report no gate run recorded) raise `ReviewRefused`
with a stable code and audit it, nothing else.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from toolgate.canonical import canonical_json
from toolgate.clock import iso, parse_iso
from toolgate.errors import ReleaseControlError, StoreError, ToolgateUsageError
from toolgate.evals.fixtures import SCRIPTED
from toolgate.evals.redaction import unredacted
from toolgate.evals.report import REPORT_KIND, REPORT_SCHEMA_VERSION, report_digest
from toolgate.policy.identities import IdentityDirectory
from toolgate.policy.principal import Principal
from toolgate.store.audit import Auditor
from toolgate.store.base import Store
from toolgate.store.evidence import recorded_gate
from toolgate.store.migrations import Migration

SIGN_OFF_ROLES = frozenset({"admin", "release_reviewer"})
"""Roles whose holders may sign off critical cases (``release_reviewer`` for people who review
releases without administering identities)."""
MAX_REPORT_CLOCK_SKEW = timedelta(minutes=5)
"""A report dated further ahead of the store's clock was made by a skewed or forged clock."""
COMPONENT = "toolgate.evals"

_SCHEMA = """
CREATE TABLE toolgate_eval_signoffs (
    report_digest TEXT NOT NULL,
    case_id TEXT NOT NULL,
    reviewer_id TEXT NOT NULL,
    reviewer_tenant_id TEXT NOT NULL,
    case_tenant_id TEXT NOT NULL,
    dataset_sha256 TEXT NOT NULL,
    release TEXT NOT NULL,
    manifest_sha256 TEXT NOT NULL,
    case_passed INTEGER NOT NULL,
    signed_at TEXT NOT NULL,
    mac TEXT NOT NULL,
    PRIMARY KEY (report_digest, case_id, reviewer_id)
);
CREATE INDEX toolgate_eval_signoffs_binding ON toolgate_eval_signoffs (dataset_sha256, manifest_sha256)"""

MIGRATIONS: tuple[Migration, ...] = (Migration(name="eval sign-offs", sqlite=_SCHEMA, postgres=_SCHEMA),)
"""Append-only schema of the sign-off table (component ``toolgate.evals``)."""

_FIELDS = (
    "report_digest",
    "case_id",
    "reviewer_id",
    "reviewer_tenant_id",
    "case_tenant_id",
    "dataset_sha256",
    "release",
    "manifest_sha256",
    "case_passed",
    "signed_at",
)


class ReviewRefused(ToolgateUsageError):
    """A sign-off was refused; ``code`` is stable (``report_tampered``, ``not_reviewer``, ...)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class SignOffResult:
    """What one ``evals review`` recorded."""

    report_digest: str
    signed: list[str]
    """Critical cases signed now."""
    already: list[str] = field(default_factory=list)
    """Critical cases this reviewer had signed before (nothing written)."""
    other_tenant: list[str] = field(default_factory=list)
    """Critical cases acting in tenants this reviewer does not review for."""
    signed_at: str = ""


def _mac(store: Store, row: dict[str, Any]) -> str:
    key = hmac.new(store.keys.secret, b"toolgate/evals-signoff", hashlib.sha256).digest()
    content = canonical_json({k: row[k] for k in _FIELDS})
    return hmac.new(key, content.encode("utf-8"), hashlib.sha256).hexdigest()


def refuse(
    auditor: Auditor, code: str, message: str, *, user_id: str | None, digest: str | None
) -> ReviewRefused:
    """Audit a refused sign-off and return the error to raise."""
    auditor.record(
        "evals.review_refused",
        "refused",
        user_id=user_id,
        code=code,
        detail={"report_digest": digest, "reason": message},
    )
    return ReviewRefused(code, message)


def load_report(path: Path, auditor: Auditor, user_id: str | None) -> dict[str, Any]:
    """A gate report whose digest matches its content; refused (and audited) otherwise."""
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise refuse(
            auditor, "report_unreadable", f"cannot read report {path}: {exc}", user_id=user_id, digest=None
        ) from exc
    claimed = report.get("digest") if isinstance(report, dict) else None
    if (
        not isinstance(report, dict)
        or report.get("kind") != REPORT_KIND
        or report.get("schema_version") != REPORT_SCHEMA_VERSION
    ):
        raise refuse(
            auditor,
            "report_unreadable",
            f"{path} is not a toolgate gate report (v1)",
            user_id=user_id,
            digest=claimed,
        )
    try:
        actual = report_digest(report)
    except (TypeError, ValueError) as exc:
        raise refuse(
            auditor, "report_tampered", f"{path} cannot be digested: {exc}", user_id=user_id, digest=claimed
        ) from exc
    if actual != claimed:
        raise refuse(
            auditor,
            "report_tampered",
            f"{path} does not match its digest (changed after the run)",
            user_id=user_id,
            digest=claimed,
        )
    if unredacted(report):
        raise refuse(
            auditor,
            "report_unredacted",
            f"{path} holds secret-looking values; sign a report written by `toolgate evals run`",
            user_id=user_id,
            digest=claimed,
        )
    return report


def sign_off(
    store: Store, auditor: Auditor, directory: IdentityDirectory, report_path: Path, reviewer: Principal
) -> SignOffResult:
    """Record ``reviewer``'s sign-off of every critical case of the report they may sign."""
    report = load_report(report_path, auditor, reviewer.user_id)
    digest = str(report["digest"])
    if report.get("model", SCRIPTED) != SCRIPTED:  # reports from before --model were scripted
        message = f"the report is of model {report['model']!r}; sign the report of a run without --model"
        raise refuse(auditor, "live_model_report", message, user_id=reviewer.user_id, digest=digest)
    current = directory.active(reviewer.user_id, reviewer.tenant_id)
    if current is None or not current.roles & SIGN_OFF_ROLES:
        roles = ", ".join(sorted(SIGN_OFF_ROLES))
        raise refuse(
            auditor,
            "not_reviewer",
            f"{reviewer.user_id!r} may not sign off (needs role {roles})",
            user_id=reviewer.user_id,
            digest=digest,
        )
    now = store.now()
    try:
        generated = parse_iso(str(report["generated_at"]))
    except (KeyError, ValueError) as exc:
        raise refuse(
            auditor,
            "report_unreadable",
            "report has no valid generated_at",
            user_id=current.user_id,
            digest=digest,
        ) from exc
    if generated - now > MAX_REPORT_CLOCK_SKEW:
        raise refuse(
            auditor,
            "report_clock_skew",
            f"report is dated {report['generated_at']}, after the store's clock ({iso(now)})",
            user_id=current.user_id,
            digest=digest,
        )
    candidate = report["candidate"]
    critical = [c for c in candidate["cases"] if c.get("critical")]
    if not critical:
        raise refuse(
            auditor,
            "no_critical_cases",
            "the report has no critical cases to sign",
            user_id=current.user_id,
            digest=digest,
        )
    mine = [c for c in critical if current.reviews_for(str(c["tenant"]))]
    other = [c["id"] for c in critical if c not in mine]
    if not mine:
        tenants = ", ".join(sorted({str(c["tenant"]) for c in critical}))
        raise refuse(
            auditor,
            "cross_tenant",
            f"{current.user_id!r} reviews for none of the report's tenants ({tenants})",
            user_id=current.user_id,
            digest=digest,
        )
    try:  # last: only a person who may sign learns whether the store knows the report
        recorded_gate(store, digest, str(candidate["manifest_sha256"]), str(report["dataset"]["sha256"]))
    except ReleaseControlError as exc:
        raise refuse(auditor, exc.code, str(exc), user_id=current.user_id, digest=digest) from exc
    store.migrate(COMPONENT, MIGRATIONS)
    signed: list[str] = []
    already: list[str] = []
    with store.transaction() as tx:
        for case in mine:
            row: dict[str, Any] = {
                "report_digest": digest,
                "case_id": str(case["id"]),
                "reviewer_id": current.user_id,
                "reviewer_tenant_id": current.tenant_id,
                "case_tenant_id": str(case["tenant"]),
                "dataset_sha256": str(report["dataset"]["sha256"]),
                "release": str(candidate["release"]),
                "manifest_sha256": str(candidate["manifest_sha256"]),
                "case_passed": int(bool(case.get("passed"))),
                "signed_at": iso(now),
            }
            row["mac"] = _mac(store, row)
            inserted = tx.execute(
                f"INSERT INTO toolgate_eval_signoffs ({', '.join([*_FIELDS, 'mac'])}) VALUES ({', '.join('?' * 11)})"
                " ON CONFLICT DO NOTHING RETURNING case_id",
                [row[k] for k in (*_FIELDS, "mac")],
            )
            (signed if inserted else already).append(row["case_id"])
    auditor.record(
        "evals.reviewed",
        "signed",
        user_id=current.user_id,
        detail={
            "report_digest": digest,
            "dataset_sha256": report["dataset"]["sha256"],
            "release": candidate["release"],
            "manifest_sha256": candidate["manifest_sha256"],
            "signed": signed,
            "already_signed": len(already),
            "other_tenant": len(other),
        },
    )
    return SignOffResult(
        report_digest=digest, signed=signed, already=already, other_tenant=other, signed_at=iso(now)
    )


def reviewed_cases(
    store: Store, dataset_sha256: str, manifest_sha256: str, tenants: dict[str, str]
) -> list[str]:
    """Critical case ids (``tenants``: case id -> tenant) with a valid sign-off for this binding."""
    try:
        with store.transaction(write=False) as tx:
            rows = tx.execute(
                "SELECT * FROM toolgate_eval_signoffs WHERE dataset_sha256 = ? AND manifest_sha256 = ?",
                (dataset_sha256, manifest_sha256),
            )
    except StoreError:
        return []  # no sign-off was ever recorded in this store (the table does not exist yet)
    directory = IdentityDirectory(store)
    found = set()
    for row in rows:
        case_id = row["case_id"]
        if tenants.get(case_id) != row["case_tenant_id"] or not hmac.compare_digest(
            _mac(store, row), row["mac"]
        ):
            continue
        reviewer = directory.reviewer_for(row["reviewer_id"], row["case_tenant_id"])
        if reviewer is not None and reviewer.roles & SIGN_OFF_ROLES:
            found.add(case_id)
    return sorted(found)


__all__ = [
    "MAX_REPORT_CLOCK_SKEW",
    "MIGRATIONS",
    "SIGN_OFF_ROLES",
    "ReviewRefused",
    "SignOffResult",
    "load_report",
    "refuse",
    "reviewed_cases",
    "sign_off",
]
