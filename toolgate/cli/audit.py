"""``toolgate audit``: reconstruct an operation, verify the chain, export for a SIEM, apply retention.

Reading the log (trace, verify, export) needs an auditor's credential (`toolgate.audit_access`):
each read shows only the reader's tenants and is itself recorded as ``audit.read``."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Annotated

import typer

from toolgate.audit_access import AuditScope, authenticate_auditor, open_for_audit, record_read
from toolgate.cli.common import closed_at_exit
from toolgate.cli.common import kv as _kv
from toolgate.clock import iso
from toolgate.errors import IdentityError, NotFoundError
from toolgate.forensics import trace
from toolgate.settings import read_settings
from toolgate.store.base import Store
from toolgate.store.chain import verify_chain, verify_records, verify_versions

audit_app = typer.Typer(no_args_is_help=True, help="Read, verify and export the audit trail.")

AsAuditor = Annotated[
    str | None,
    typer.Option(
        "--as",
        help="Reading auditor (role auditor, or auditor:all); token in TOOLGATE_TOKEN, which alone also works.",
    ),
]


@audit_app.command("trace")
def audit_trace(
    operation_key: Annotated[str | None, typer.Argument(help="Operation to reconstruct.")] = None,
    call: Annotated[
        str | None, typer.Option("--call", help="Reconstruct one (refused) call instead.")
    ] = None,
    as_user: AsAuditor = None,
) -> None:
    """Request -> call -> policy -> proposal -> approval -> claim -> handler -> result, in order."""
    if not operation_key and not call:
        raise NotFoundError("give an OPERATION_KEY or --call CALL_ID")
    application = closed_at_exit(open_for_audit())
    scope = authenticate_auditor(application, as_user, "trace")
    subject = operation_key or call
    operation = application.store.operations.get(operation_key) if operation_key else None
    report = (
        None
        if operation is not None and not scope.covers(operation.tenant_id)  # looks like an unknown key
        else trace(
            application.store,
            application.gateway.auditor,
            operation_key=operation_key,
            call_id=call,
            visible=scope.sees,
        )
    )
    if report is None or not report.events:
        record_read(application, scope, "trace", result="refused", code="not_found", subject=subject)
        raise NotFoundError(f"no audit events for {subject}")
    record_read(application, scope, "trace", subject=subject, events=len(report.events))
    for event in report.events:
        detail = event.detail
        facts = {
            "seq": event.seq,
            "at": event.occurred_at,
            "event": event.event,
            "result": event.result,
            "code": event.code or "-",
            "call_id": event.call_id or "-",
            "proposal": event.proposal_id or "-",
            "release": event.tool_release or "-",
            "handler": event.handler_revision or "-",
            "actor": event.actor_id or "-",
            "hash": event.hash[:16],
        }
        if detail.get("rule_id"):
            facts["rule"] = detail["rule_id"]
        if detail.get("digest"):
            facts["digest"] = str(detail["digest"])[:16]
        _kv(**facts)
    _kv(final_status=report.final, missing=",".join(report.missing) or "none")
    if report.tokens is not None:  # the task turn that proposed the call, every model turn of it
        typer.echo(report.tokens.line())
    typer.echo(report.summary())
    raise typer.Exit(
        0 if not report.missing and report.tamper_check == "PASS" and report.raw_secrets == 0 else 1
    )


def _in_scope(store: Store, scope: AuditScope) -> tuple[set[str], set[str], set[str]]:
    """The approval ids, user ids and proposal ids of the records the auditor's tenants own."""
    identities = {i.user_id for i in store.identities.list() if scope.covers(i.tenant_id)}
    proposals = {p.proposal_id for p, _ in store.proposals.list() if scope.covers(p.tenant_id)}
    tenants: dict[str, str | None] = {}
    approvals = set()
    for decision in store.approvals.all():
        if decision.proposal_id not in tenants:
            proposal = store.proposals.get(decision.proposal_id)
            tenants[decision.proposal_id] = proposal.tenant_id if proposal else None
        if scope.covers(tenants[decision.proposal_id]):
            approvals.add(decision.approval_id)
    return approvals, identities, proposals


def _head(text: str | None) -> tuple[int, str] | None:
    """``SEQ:HASH`` (a ``head=`` an earlier verify printed) as a head to expect, or None."""
    if text is None:
        return None
    seq, _, hash_ = text.partition(":")
    if not seq.isdigit() or len(hash_) != 64:
        raise typer.BadParameter("give the head as SEQ:HASH, as an earlier verify printed it (head=...)")
    return int(seq), hash_


@audit_app.command("verify")
def audit_verify(
    as_user: AsAuditor = None,
    expect_head: Annotated[
        str | None,
        typer.Option(
            "--expect-head",
            help="SEQ:HASH: the head an earlier verify printed (kept outside the database); fail when"
            " the chain no longer holds that event (its newest events were cut off, or rewritten).",
        ),
    ] = None,
) -> None:
    """Recompute the whole hash chain and every proposal, approval and identity MAC, and judge every
    release-control, pin and identity row against the latest version the chain bound; name what
    does not fit.

    The chain is one for every tenant and is checked whole; the approvals, identities and replayed
    rows counted and named are those of the auditor's tenants (release-control rows are
    process-level: all-tenant auditors see them). Writes nothing but its own ``audit.read``.
    Prints the chain's head (``head=SEQ:HASH``): a chain cut off at its end still links, so keep
    the head outside the database and give it to the next verify (``--expect-head``)."""
    expected = _head(expect_head)
    application = closed_at_exit(open_for_audit())
    scope = authenticate_auditor(application, as_user, "verify")
    store = application.store
    report = verify_chain(store, expect_head=expected)
    records = verify_records(store)
    versions = verify_versions(store)
    replayed = [r.describe() for r in versions.replayed if scope.covers(r.tenant_id)]
    approvals, identities, proposals = _in_scope(store, scope)
    forged_proposals = [p for p in records.forged_proposals if p in proposals]
    forged_approvals = [a for a in records.forged_approvals if a in approvals]
    forged_identities = [i for i in records.forged_identities if i in identities]
    record_read(application, scope, "verify", events=report.events)
    forged = forged_approvals or forged_identities or forged_proposals or replayed
    # one verdict: anything forged or replayed fails it, however whole the chain is (a line that
    # said PASS beside a forged approval read as a pass to anything that greps its first verdict)
    chain = (
        {"chain": "PASS", "head": f"{report.head_seq}:{report.head_hash}"}
        if report.ok
        else {
            "chain": "FAIL",
            "first_bad_seq": report.first_bad_seq,
            "first_bad_event": report.first_bad_event_id,
            "reason": json.dumps(report.reason),
        }
    )
    _kv(
        tamper_check="PASS" if report.ok and not forged else "FAIL",
        events=report.events,
        approvals=len(approvals),
        identities=len(identities),
        proposals=len(proposals),
        **chain,
        forged_approvals=",".join(forged_approvals) or "none",
        forged_identities=",".join(forged_identities) or "none",
        forged_proposals=",".join(forged_proposals) or "none",
        replayed_records=",".join(replayed) or "none",
    )
    raise typer.Exit(0 if report.ok and not forged else 1)


@audit_app.command("export")
def audit_export(
    output: Annotated[Path | None, typer.Option(help="File to write (default: stdout).")] = None,
    as_user: AsAuditor = None,
) -> None:
    """Every event of the auditor's tenants as JSON Lines (schema_version 1) for a SIEM."""
    application = closed_at_exit(open_for_audit())
    scope = authenticate_auditor(application, as_user, "export")
    events = scope.visible(application.store.audit.events())
    record_read(application, scope, "export", events=len(events))
    lines = []
    for event in events:
        record = {"schema_version": 1, **{k: v for k, v in event.__dict__.items()}}
        lines.append(json.dumps(record, sort_keys=True))
    text = "\n".join(lines) + ("\n" if lines else "")
    if output:
        output.write_text(text, encoding="utf-8")
        _kv(exported=len(lines), output=output)
    else:
        typer.echo(text, nl=False)


@audit_app.command("retention")
def audit_retention(
    older_than_days: Annotated[
        float | None,
        typer.Option(
            help="Delete protected payloads older than this (default: TOOLGATE_AUDIT_RETENTION_DAYS, 90)."
        ),
    ] = None,
    as_user: AsAuditor = None,
) -> None:
    """Delete audit payloads past the retention period; digests and the chain stay verifiable.

    Deleting evidence of every tenant is for an all-tenant auditor (role ``auditor:all``) only."""
    if older_than_days is None:
        older_than_days = read_settings().audit_retention_days
    application = closed_at_exit(open_for_audit())
    scope = authenticate_auditor(application, as_user, "retention")
    if scope.tenants is not None:
        record_read(application, scope, "retention", result="refused", code="not_all_tenants")
        raise IdentityError(
            f"{scope.principal.user_id!r} may not apply retention: it deletes every tenant's payloads"
            " (needs role auditor:all)",
            code="not_all_tenants",
        )
    before = iso(application.store.now() - timedelta(days=older_than_days))
    purged = application.store.audit.purge_payloads(before)
    application.gateway.auditor.record(
        "audit.retention_applied",
        "applied",
        user_id=scope.principal.user_id,
        detail={"older_than_days": older_than_days, "payloads_deleted": purged},
    )
    chain = verify_chain(application.store)
    _kv(payloads_deleted=purged, older_than_days=older_than_days, tamper_check="PASS" if chain.ok else "FAIL")


__all__ = ["audit_app"]
