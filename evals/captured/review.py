"""Reviewing and editing captured cases (the rules: `toolgate.evals.captured.capture`).

A review approves (the case counts from then on) or rejects a pending case; an edit replaces the
expected outcome of a pending or reviewed one with a new capture pending review. Both act only on
a row that verifies, for a tenant the person reviews for, and never by one of the case's authors.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from toolgate.clock import new_id
from toolgate.evals.captured import rows as table
from toolgate.evals.captured.capture import REVIEW_ROLES, covers, facts, refuse
from toolgate.evals.captured.incident_records import CaptureRefused
from toolgate.evals.captured.rows import CapturedCase, body_of
from toolgate.evals.fixtures import EvalCase
from toolgate.policy.output import redact_personal, redact_personal_text
from toolgate.policy.principal import Principal
from toolgate.store.audit import Auditor
from toolgate.store.base import Store


def row_for(
    store: Store, auditor: Auditor, person: Principal, capture_id: str, action: str, *, review: bool
) -> CapturedCase:
    """The row ``person`` may act on (`CaptureRefused`, audited, otherwise): it exists, is of a tenant
    they cover (review: one they review for), and verifies."""
    row = table.get(store, capture_id)
    if row is None:
        raise refuse(
            auditor,
            "not_found",
            f"no captured case {capture_id}",
            action=action,
            user_id=person.user_id,
            subject=capture_id,
        )
    allowed = person.reviews_for(row.tenant_id) if review else covers(person, row.tenant_id)
    if not allowed:
        raise refuse(
            auditor,
            "cross_tenant",
            f"{person.user_id!r} does not act for tenant {row.tenant_id!r}",
            action=action,
            user_id=person.user_id,
            tenant_id=person.tenant_id,
            subject=capture_id,
        )
    if not row.intact():
        raise refuse(
            auditor,
            "capture_tampered",
            f"captured case {capture_id} was changed outside toolgate",
            action=action,
            user_id=person.user_id,
            tenant_id=row.tenant_id,
            subject=capture_id,
        )
    return row


def _refuser(
    auditor: Auditor, person: Principal, action: str, row: CapturedCase
) -> Callable[[str, str], CaptureRefused]:
    """How ``person``'s ``action`` on ``row`` is refused: audited with its code, then raised."""

    def refused(code: str, message: str) -> CaptureRefused:
        return refuse(
            auditor,
            code,
            message,
            action=action,
            user_id=person.user_id,
            tenant_id=row.tenant_id,
            subject=row.capture_id,
        )

    return refused


def _reviewer(auditor: Auditor, person: Principal, action: str, subject: str) -> None:
    if not person.roles & REVIEW_ROLES:
        roles = ", ".join(sorted(REVIEW_ROLES))
        raise refuse(
            auditor,
            "not_reviewer",
            f"{person.user_id!r} may not {action} captured cases (needs role {roles})",
            action=action,
            user_id=person.user_id,
            tenant_id=person.tenant_id,
            subject=subject,
        )


def review(
    store: Store,
    auditor: Auditor,
    reviewer: Principal,
    capture_id: str,
    *,
    reject: bool = False,
    reason: str = "",
) -> CapturedCase:
    """Approve (or reject, with a reason) a pending captured case; it counts once approved."""
    _reviewer(auditor, reviewer, "review", capture_id)
    row = row_for(store, auditor, reviewer, capture_id, "review", review=True)

    refused = _refuser(auditor, reviewer, "review", row)

    if row.status != "pending_review":
        raise refused("not_pending", f"captured case {capture_id} is {row.status}, not pending review")
    if reviewer.user_id in row.authors:
        raise refused(
            "self_review", f"{reviewer.user_id!r} captured or edited this case; someone else reviews it"
        )
    if reject and not reason.strip():
        raise refused("reason_required", "a rejection needs --reason")
    decided = table.decide(
        store, row, "rejected" if reject else "reviewed", reviewer.user_id, redact_personal_text(reason)
    )
    if decided is None:
        raise refused("not_pending", f"captured case {capture_id} was decided meanwhile")
    auditor.record(
        "evals.case_reviewed",
        decided.status,
        user_id=reviewer.user_id,
        tenant_id=decided.tenant_id,
        thread_id=decided.thread_id,
        detail={"capture_id": decided.capture_id, "case_id": decided.case_id, "digest": decided.digest},
    )
    return decided


def edit(
    store: Store,
    auditor: Auditor,
    editor: Principal,
    capture_id: str,
    *,
    expected: Mapping[str, Any],
    reason: str,
) -> CapturedCase:
    """Replace the expected outcome of a pending or reviewed case: a new capture, pending review by
    someone who is none of its authors, superseding this one."""
    _reviewer(auditor, editor, "edit", capture_id)
    row = row_for(store, auditor, editor, capture_id, "edit", review=True)

    refused = _refuser(auditor, editor, "edit", row)

    if row.status not in ("pending_review", "reviewed"):
        raise refused("not_editable", f"captured case {capture_id} is {row.status}")
    if not reason.strip():
        raise refused("reason_required", "an edit needs --reason (why the expected outcome changes)")
    capture_id_new = new_id("cap")
    old = row.case()
    try:
        case = EvalCase.model_validate(
            {
                **old.model_dump(mode="json"),
                "id": "captured-" + capture_id_new.removeprefix("cap_"),
                "expected": redact_personal(dict(expected)),
                "note": redact_personal_text(f"{old.note}; expected outcome edited: {reason}")[:2000],
            }
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise refused("invalid_case", f"the edited case is not valid: {where}: {first['msg']}") from None
    body, digest = body_of(case)
    stored = table.insert(
        store,
        CapturedCase(
            capture_id=capture_id_new,
            case_id=case.id,
            tenant_id=row.tenant_id,
            source_kind=row.source_kind,
            source_id=row.source_id,
            thread_id=row.thread_id,
            task=row.task,
            release=row.release,
            body=body,
            digest=digest,
            authors=tuple(sorted({*row.authors, editor.user_id})),
            captured_by=editor.user_id,
            supersedes=row.capture_id,
        ),
        supersede=row,
    )
    if stored is None:
        raise refused("not_editable", f"captured case {capture_id} changed meanwhile")
    auditor.record(
        "evals.case_edited",
        stored.status,
        user_id=editor.user_id,
        tenant_id=stored.tenant_id,
        thread_id=stored.thread_id,
        detail={**facts(stored, case), "previous_digest": row.digest},
    )
    return stored


__all__ = ["edit", "review", "row_for"]
