"""Incidents become cases: captured production threads wait for review before the gate counts them.

``toolgate evals capture THREAD|OPERATION|PROPOSAL`` turns one task turn of a production thread (a
refusal, a reviewed write, a dead letter) into a redacted `EvalCase` (what is believed:
`toolgate.evals.captured.incident_records`; what the case says: `toolgate.evals.captured.incident_case`) and stores
it ``pending_review`` in the store's ``captured_cases`` table (`toolgate.evals.captured.rows`,
MAC-bound). ``evals captured review`` approves or rejects it (`toolgate.evals.captured.review`);
``evals captured export`` writes the reviewed ones whose rows verify as a dataset file
``evals run --dataset`` runs (`toolgate.evals.captured.export`). This module holds the rules and
the capture itself.

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

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from toolgate.clock import new_id
from toolgate.errors import ToolgateError
from toolgate.evals.captured import rows as table
from toolgate.evals.captured.incident_case import case_of
from toolgate.evals.captured.incident_records import CaptureRefused, SourceKind, read_incident
from toolgate.evals.captured.rows import CapturedCase, body_of
from toolgate.evals.fixtures import EvalCase
from toolgate.evals.runner import default_people
from toolgate.evals.signoff import SIGN_OFF_ROLES
from toolgate.graph.state import gateway_state
from toolgate.policy.identities import ALL_TENANTS_AUDITOR_ROLE
from toolgate.policy.output import redact_personal_text
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
    """Audit one refusal and return the error to raise. The event holds the code, the action and
    its subject (a capture id, or what was named to capture), never ``message``: messages name
    people, and the audit log knows people only by keyed hash (``user_id`` is hashed)."""
    auditor.record(
        "evals.capture_refused",
        "refused",
        user_id=user_id,
        code=code,
        tenant_id=tenant_id,
        detail={"action": action, "subject": redact_personal_text(subject)[:300] if subject else None},
    )
    return CaptureRefused(code, message)


def covers(person: Principal, tenant_id: str) -> bool:
    """True when ``person`` may capture and read the cases of ``tenant_id``."""
    return ALL_TENANTS_AUDITOR_ROLE in person.roles or (
        bool(person.roles & CAPTURE_ROLES) and person.reviews_for(tenant_id)
    )


def require_reader(auditor: Auditor, person: Principal, action: str) -> None:
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
    proposal = store.proposals.get(source)
    kind: SourceKind = "proposal"
    if proposal is None:
        operation = store.operations.get(source)
        if operation is None:
            return Source("thread", source, source)
        proposal = store.proposals.get(operation.proposal_id) if operation.proposal_id else None
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
    require_reader(auditor, capturer, "capture")
    tenant: str | None = None
    try:
        found = resolve(store, source)
        values = gateway_state(read_state(found.thread_id) or {})  # the grouped keys as keys
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
        detail=facts(stored, case),
    )
    return stored


def _provenance(found: Source, task: int, release: str) -> str:
    """Where the case came from, for its reviewers (the note; redacted with the rest)."""
    named = "" if found.kind == "thread" else f"{found.kind} {found.source_id} of "
    return f"captured from {named}thread {found.thread_id}, task {task}, served by {release}"


def facts(row: CapturedCase, case: EvalCase) -> dict[str, Any]:
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


__all__ = [
    "CAPTURE_ROLES",
    "REVIEW_ROLES",
    "CaptureRefused",
    "KnownTools",
    "ReadState",
    "Source",
    "capture",
    "covers",
    "facts",
    "refuse",
    "require_reader",
    "resolve",
]
