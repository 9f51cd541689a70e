"""``toolgate evals capture`` and ``toolgate evals captured``: production incidents as dataset cases
that count only once someone reviewed them (`toolgate.evals.captured.capture`).

Every command acts as an authenticated person (``--as`` names them, ``TOOLGATE_TOKEN`` proves it).
A refusal exits 2 with ``error=CODE`` and is audited (``evals.capture_refused``); nothing else is
written by it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, get_args

import typer

from toolgate.cli.common import checked_filter, kv, open_from_env, person
from toolgate.errors import IdentityError
from toolgate.evals.captured.capture import capture, refuse
from toolgate.evals.captured.export import export, show, visible
from toolgate.evals.captured.review import edit, review
from toolgate.evals.captured.rows import CapturedCase, Status
from toolgate.graph.bootstrap import App
from toolgate.policy.principal import Principal

captured_app = typer.Typer(
    no_args_is_help=True, help="Captured incidents: list, show, review, edit and export them as a dataset."
)

AsPerson = Annotated[str, typer.Option("--as", help="The person acting (token in TOOLGATE_TOKEN).")]


def _person(application: App, as_user: str, action: str) -> Principal:
    """The authenticated person; a failed authentication is also audited as a capture refusal."""
    try:
        return person(application, as_user)
    except IdentityError as exc:
        refuse(application.gateway.auditor, exc.code, str(exc), action=action, user_id=as_user)
        raise


def _tools(application: App, release: str) -> frozenset[str]:
    """The tool names of ``release`` (loaded and verified against its reviewed manifest)."""
    if application.gateways is None or release == application.registry.release:
        return frozenset(application.registry.tools)
    return frozenset(application.gateways(release).registry.tools)


def capture_command(
    source: Annotated[str, typer.Argument(help="A thread id, an operation key or a proposal id.")],
    as_user: AsPerson,
) -> None:
    """Capture a production thread, refusal or dead letter as a redacted case pending review."""
    application = open_from_env()
    capturer = _person(application, as_user, "capture")
    with application.graph() as graph:
        row = capture(
            application.store,
            application.gateway.auditor,
            capturer,
            source,
            read_state=lambda thread: graph.get_state({"configurable": {"thread_id": thread}}).values,
            known_tools=lambda release: _tools(application, release),
        )
    case = row.case()
    kv(
        capture=row.capture_id,
        case=row.case_id,
        status=row.status,
        category=case.category,
        critical=str(case.critical).lower(),
        source=row.source_kind,
        thread=row.thread_id,
        task=row.task,
        release=row.release,
        digest=row.digest,
    )


def _line(row: CapturedCase) -> None:
    kv(
        capture=row.capture_id,
        case=row.case_id,
        tenant=row.tenant_id,
        status=row.status,
        source=row.source_kind,
        thread=row.thread_id,
        task=row.task,
        captured_by=row.captured_by,
        reviewed_by=row.reviewed_by or "-",
        authentic=str(row.intact()).lower(),
        created_at=row.created_at,
    )


@captured_app.command("list")
def list_command(
    as_user: AsPerson,
    status: Annotated[str | None, typer.Option(help="Only this status (e.g. pending_review).")] = None,
) -> None:
    """List the captured cases of your tenants, oldest first."""
    status = checked_filter("--status", status, get_args(Status))
    application = open_from_env()
    reader = _person(application, as_user, "read")
    for row in visible(application.store, application.gateway.auditor, reader, status=status):
        _line(row)


@captured_app.command("show")
def show_command(capture_id: str, as_user: AsPerson) -> None:
    """Show one captured case: its facts, then the case as one JSON line."""
    application = open_from_env()
    reader = _person(application, as_user, "read")
    row = show(application.store, application.gateway.auditor, reader, capture_id)
    _line(row)
    kv(
        digest=row.digest,
        release=row.release,
        authors=",".join(row.authors),
        supersedes=row.supersedes or "-",
    )
    if row.reviewed_at:
        kv(reviewed_at=row.reviewed_at, review_reason=json.dumps(row.review_reason or ""))
    typer.echo(f"case={row.body}")


@captured_app.command("review")
def review_command(
    capture_id: str,
    as_user: AsPerson,
    reject: Annotated[
        bool, typer.Option("--reject", help="Reject the case instead of approving it.")
    ] = False,
    reason: Annotated[str, typer.Option(help="Why (required to reject).")] = "",
) -> None:
    """Approve a pending captured case (it counts from now on), or reject it with a reason."""
    application = open_from_env()
    reviewer = _person(application, as_user, "review")
    row = review(
        application.store, application.gateway.auditor, reviewer, capture_id, reject=reject, reason=reason
    )
    kv(capture=row.capture_id, case=row.case_id, status=row.status, reviewer=as_user, digest=row.digest)


@captured_app.command("edit")
def edit_command(
    capture_id: str,
    as_user: AsPerson,
    expected: Annotated[str, typer.Option(help="The expected outcome the case must have, one JSON object.")],
    reason: Annotated[str, typer.Option(help="Why the expected outcome changes.")],
) -> None:
    """Replace the expected outcome: a new capture, pending review by someone else."""
    application = open_from_env()
    editor = _person(application, as_user, "edit")
    try:
        wanted = json.loads(expected)
    except json.JSONDecodeError as exc:
        wanted = exc
    if not isinstance(wanted, dict):
        auditor = application.gateway.auditor
        raise refuse(
            auditor,
            "invalid_case",
            "--expected must be one JSON object",
            action="edit",
            user_id=as_user,
            subject=capture_id,
        )
    row = edit(
        application.store, application.gateway.auditor, editor, capture_id, expected=wanted, reason=reason
    )
    kv(
        capture=row.capture_id,
        case=row.case_id,
        status=row.status,
        supersedes=row.supersedes,
        digest=row.digest,
    )


@captured_app.command("export")
def export_command(
    as_user: AsPerson,
    out: Annotated[Path, typer.Option(help="The dataset file to write (JSONL).")],
) -> None:
    """Write every reviewed captured case that verifies, of your tenants, as a dataset file."""
    application = open_from_env()
    reader = _person(application, as_user, "export")
    result = export(
        application.store, application.gateway.auditor, application.gateway.directory, reader, out
    )
    kv(out=result.path, exported=len(result.cases), skipped=len(result.skipped), sha256=result.sha256)
    for capture_id, why in sorted(result.skipped.items()):
        kv(skipped=capture_id, reason=why)


__all__ = ["capture_command", "captured_app"]
