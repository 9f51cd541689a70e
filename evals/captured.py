"""Incidents become cases: captured production threads wait for review before the gate counts them.

``toolgate evals capture THREAD|OPERATION|PROPOSAL`` turns one task turn of a production thread (a
refusal, a reviewed write, a dead letter) into a redacted `EvalCase` (`toolgate.evals.incident_case`)
and stores it ``pending_review`` in the store's ``captured_cases`` table (`toolgate.evals.captured_rows`,
MAC-bound). ``evals captured review`` approves or rejects it; ``evals captured export`` writes the
reviewed ones, and only those whose rows verify, as a dataset file ``evals run --dataset`` runs.

Who may do what (each person authenticated at the door: ``--as`` and their ``TOOLGATE_TOKEN``):

- capture, list, show and export: ``admin``, ``auditor`` or ``release_reviewer`` (`CAPTURE_ROLES`)
  of the thread's tenant, or staff reviewing for it; ``auditor:all`` for every tenant. Auditors
  investigate incidents, so they may capture; they cannot make a case count.
- review and edit: ``admin`` or ``release_reviewer`` (`REVIEW_ROLES`, those who sign off gate
  reports) who review for the case's tenant, and never an author of the case (its capturer or an
  editor): separation of duties, as for approvals.

An edit changes only the expected outcome: an incident in which the gateway did the wrong thing
becomes a case expecting the right thing. It is a new capture (a new digest, ``pending_review``)
that supersedes the old one, with the editor added to its authors, so someone else reviews it.

A refusal raises `CaptureRefused` with a stable code, writes nothing but one
``evals.capture_refused`` audit event (``detail.action``: capture, review, edit, read, export).
The rest is audited as ``evals.case_captured``, ``evals.case_reviewed`` (``reviewed`` or
``rejected``), ``evals.case_edited`` and ``evals.cases_exported``. An export skips a reviewed row
that does not verify (its case, status or reviewer changed with database access alone) or whose
reviewer no longer holds a review role for its tenant; tampered rows are also audited as a refusal.
No time decides anything here: timestamps are the store's clock, for people to read.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from toolgate.canonical import sha256_hex
from toolgate.clock import new_id
from toolgate.errors import StoreError, ToolgateError
from toolgate.evals import captured_rows as table
from toolgate.evals.captured_rows import CapturedCase, body_of
from toolgate.evals.fixtures import EvalCase, dump_cases
from toolgate.evals.incident_case import CaptureRefused, SourceKind, case_of, read_incident
from toolgate.evals.runner import default_people
from toolgate.evals.signoff import SIGN_OFF_ROLES
from toolgate.policy.identities import ALL_TENANTS_AUDITOR_ROLE, IdentityDirectory
from toolgate.policy.output import redact_personal, redact_personal_text
from toolgate.policy.principal import Principal
from toolgate.store.audit import Auditor
from toolgate.store.base import Store

CAPTURE_ROLES = frozenset({"admin", "auditor", "release_reviewer"})
"""Roles whose holders may capture incidents of their tenant and read and export its captured cases."""
REVIEW_ROLES = SIGN_OFF_ROLES
"""Roles whose holders may review (and edit) captured cases of the tenants they review for."""

ReadState = Callable[[str], Mapping[str, Any] | None]
"""A thread's checkpointed values (None or empty: no such thread)."""
KnownTools = Callable[[str], frozenset[str]]
"""The tool names of a release (raises when this process cannot load it)."""


def refuse(
    auditor: Auditor,
    code: str,
    message: str,
    *,
    action: str,
    user_id: str | None,
    tenant_id: str | None = None,
    subject: str | None = None,
) -> CaptureRefused:
    """Audit one refusal and return the error to raise."""
    auditor.record(
        "evals.capture_refused",
        "refused",
        user_id=user_id,
        code=code,
        tenant_id=tenant_id,
        detail={
            "action": action,
            "subject": redact_personal_text(subject)[:300] if subject else None,
            "reason": redact_personal_text(message)[:300],
        },
    )
    return CaptureRefused(code, message)


def covers(person: Principal, tenant_id: str) -> bool:
    """True when ``person`` may capture and read the cases of ``tenant_id``."""
    return ALL_TENANTS_AUDITOR_ROLE in person.roles or (
        bool(person.roles & CAPTURE_ROLES) and person.reviews_for(tenant_id)
    )


def _reader(auditor: Auditor, person: Principal, action: str) -> None:
    if ALL_TENANTS_AUDITOR_ROLE not in person.roles and not person.roles & CAPTURE_ROLES:
        roles = ", ".join(sorted(CAPTURE_ROLES))
        raise refuse(
            auditor,
            "not_capturer",
            f"{person.user_id!r} may not {action} captured cases (needs role {roles})",
            action=action,
            user_id=person.user_id,
            tenant_id=person.tenant_id,
        )


@dataclass(frozen=True)
class Source:
    """What the capturer named, and the thread and call it leads to."""

    kind: SourceKind
    source_id: str
    thread_id: str
    focus_call: str | None = None
    """The call whose task turn is captured (None: the thread's last task turn)."""


def resolve(store: Store, source: str) -> Source:
    """A proposal id, an operation key, or else a thread id."""
    proposal = store.get_proposal(source)
    kind: SourceKind = "proposal"
    if proposal is None:
        operation = store.get_operation(source)
        if operation is None:
            return Source("thread", source, source)
        proposal = store.get_proposal(operation.proposal_id) if operation.proposal_id else None
        if proposal is None or proposal.operation_key != source:
            raise CaptureRefused("not_found", f"operation {source} belongs to no proposal of a thread")
        kind = "operation"
    if not proposal.authentic:
        raise CaptureRefused("records_tampered", f"proposal {proposal.proposal_id} does not verify")
    return Source(kind, source, proposal.thread_id, proposal.call_id)


def capture(
    store: Store,
    auditor: Auditor,
    capturer: Principal,
    source: str,
    *,
    read_state: ReadState,
    known_tools: KnownTools,
    people: Mapping[str, Principal] | None = None,
) -> CapturedCase:
    """Capture the incident ``source`` names as a case waiting for review (see the module docstring)."""
    _reader(auditor, capturer, "capture")
    tenant: str | None = None
    try:
        found = resolve(store, source)
        values = read_state(found.thread_id) or {}
        claimed = values.get("principal")
        tenant = str(claimed.get("tenant_id")) if isinstance(claimed, Mapping) else None
        if not values.get("messages") or tenant is None:
            raise CaptureRefused("not_found", f"no thread, operation or proposal {source}")
        if not covers(capturer, tenant):
            raise CaptureRefused(
                "cross_tenant", f"{capturer.user_id!r} may not capture threads of {tenant!r}"
            )
        incident = read_incident(store, found.thread_id, values, focus_call=found.focus_call)
        try:
            tools = known_tools(incident.release)
        except (ToolgateError, ImportError) as exc:  # not installed here, or refused by its manifest
            raise CaptureRefused(
                "release_unavailable",
                f"release {incident.release!r} cannot be loaded here: {type(exc).__name__}",
            ) from exc
        capture_id = new_id("cap")
        case = case_of(
            incident,
            case_id="captured-" + capture_id.removeprefix("cap_"),
            people=people if people is not None else default_people(),
            pseudonym=lambda user_id: "user-" + store.keys.mac_text("capture", f"pseudonym:{user_id}")[:12],
            known_tools=tools,
            note=_provenance(found, incident.task, incident.release),
        )
        body, digest = body_of(case)
        stored = table.insert(
            store,
            CapturedCase(
                capture_id=capture_id,
                case_id=case.id,
                tenant_id=incident.tenant_id,
                source_kind=found.kind,
                source_id=found.source_id,
                thread_id=found.thread_id,
                task=incident.task,
                release=incident.release,
                body=body,
                digest=digest,
                authors=(capturer.user_id,),
                captured_by=capturer.user_id,
            ),
        )
        if stored is None:
            raise CaptureRefused(
                "already_captured",
                f"task {incident.task} of that thread is captured already (pending or reviewed)",
            )
    except CaptureRefused as exc:
        raise refuse(
            auditor,
            exc.code,
            str(exc),
            action="capture",
            user_id=capturer.user_id,
            tenant_id=tenant,
            subject=source,
        ) from None
    auditor.record(
        "evals.case_captured",
        stored.status,
        user_id=capturer.user_id,
        tenant_id=stored.tenant_id,
        thread_id=stored.thread_id,
        detail=_facts(stored, case),
    )
    return stored


def _provenance(found: Source, task: int, release: str) -> str:
    """Where the case came from, for its reviewers (the note; redacted with the rest)."""
    named = "" if found.kind == "thread" else f"{found.kind} {found.source_id} of "
    return f"captured from {named}thread {found.thread_id}, task {task}, served by {release}"


def _facts(row: CapturedCase, case: EvalCase) -> dict[str, Any]:
    return {
        "capture_id": row.capture_id,
        "case_id": row.case_id,
        "digest": row.digest,
        "source_kind": row.source_kind,
        "task": row.task,
        "release": row.release,
        "category": case.category,
        "critical": case.critical,
        "supersedes": row.supersedes,
    }


def _row_for(
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
    row = _row_for(store, auditor, reviewer, capture_id, "review", review=True)

    def refused(code: str, message: str) -> CaptureRefused:
        return refuse(
            auditor,
            code,
            message,
            action="review",
            user_id=reviewer.user_id,
            tenant_id=row.tenant_id,
            subject=capture_id,
        )

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
    row = _row_for(store, auditor, editor, capture_id, "edit", review=True)

    def refused(code: str, message: str) -> CaptureRefused:
        return refuse(
            auditor,
            code,
            message,
            action="edit",
            user_id=editor.user_id,
            tenant_id=row.tenant_id,
            subject=capture_id,
        )

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
        detail={**_facts(stored, case), "previous_digest": row.digest},
    )
    return stored


def visible(
    store: Store, auditor: Auditor, person: Principal, *, status: str | None = None
) -> list[CapturedCase]:
    """The captured cases of the tenants ``person`` covers (check ``intact`` on each)."""
    _reader(auditor, person, "read")
    try:
        found = table.rows(store, status=status)
    except StoreError:
        return []  # a store created before captured cases existed, opened read-only
    return [r for r in found if covers(person, r.tenant_id)]


def show(store: Store, auditor: Auditor, person: Principal, capture_id: str) -> CapturedCase:
    """One captured case ``person`` may read (a row that does not verify is shown, marked so)."""
    _reader(auditor, person, "read")
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
    candidates = visible(store, auditor, person, status="reviewed")
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


__all__ = [
    "CAPTURE_ROLES",
    "REVIEW_ROLES",
    "CaptureRefused",
    "Export",
    "KnownTools",
    "ReadState",
    "Source",
    "capture",
    "covers",
    "edit",
    "export",
    "refuse",
    "resolve",
    "review",
    "show",
    "visible",
]
