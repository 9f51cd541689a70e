"""The ``toolgate`` operator command line.

Output is one ``key=value`` line per fact, so scripts and people read the
same text. Errors from misuse exit with code 2 and a one-line message; no stack traces. Every
command first checks every ``TOOLGATE_*`` setting (`toolgate.settings`), so a bad value stops it
before it touches anything; ``--help`` and ``--version`` need no settings.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import sys
import uuid
from typing import TYPE_CHECKING, Annotated, Any

import typer

from toolgate import json_limits
from toolgate.cli.common import (
    checked_filter,
    close_opened,
    invoke,
    open_from_env,
    open_store_from_env,
    person,
)
from toolgate.cli.lines import kv_line
from toolgate.cli.own_output import command_output
from toolgate.errors import ApprovalError, ConfigurationError, InvalidFilter, NotFoundError, ToolgateError

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig

DISTRIBUTION = "langgraph-toolgate"
"""The installed package whose version ``toolgate --version`` prints."""
NEEDS_NO_SETTINGS = frozenset({"--help", "--version"})
"""Options that only print; a command line holding one runs no command."""
STATE_HELP = "Also print the last model request's state line and a continuation line per tool result."
OPERATION_STATUSES = (
    "pending_approval",
    "approved",
    "rejected",
    "expired",
    "executing",
    "succeeded",
    "failed",
    "unknown",
    "dead_lettered",
)
"""What ``proposals list --status`` accepts: `toolgate.store.records.OperationStatus` (a test keeps
the two equal; spelt out so that parsing a command line imports no store)."""
LIST_PAGE, LIST_PAGE_MAX = 100, 500
"""``proposals list --limit``'s default and bound: `toolgate.store.proposals.PAGE_SIZE` and
``PAGE_MAX`` (a test keeps them equal; spelt out for the same reason)."""
GROUPS: dict[str, tuple[str, str]] = {
    "audit": ("toolgate.cli.audit", "Read, verify and export the audit trail."),
    "worker": ("toolgate.cli.worker", "Execute approved operations outside a graph run."),
    "deadletter": ("toolgate.cli.deadletter", "Operations whose outcome needs a person."),
    "registry": ("toolgate.cli.registry", "Audit and inspect tool releases."),
    "dispatch": ("toolgate.cli.dispatch", "Exercise the dispatch boundary."),
    "verify": ("toolgate.cli.verify", "Run the finish-line checks against the configured database."),
    "identities": ("toolgate.cli.identities", "Manage the people who may act (admins only)."),
    "release": ("toolgate.cli.release", "Create, list and roll out tool releases."),
    "mcp": ("toolgate.cli.mcp", "Serve the gate to MCP clients."),
    "evals": (
        "toolgate.cli.evals",
        "Evaluate releases: the release gate, sign-offs, captured incidents, LangSmith datasets.",
    ),
}
"""The command groups, each in its module as ``<name>_app``, with its one-line help. A command
line imports only the group it runs (`command_line`): ``toolgate --help`` and ``toolgate
proposals list`` never import the graph stack the other groups need (a test keeps these help
lines equal to the groups' own)."""

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    help="toolgate: a tool-calling gateway for LLM agents.",
)
proposals_app = typer.Typer(no_args_is_help=True, help="Inspect write proposals.")
app.add_typer(proposals_app, name="proposals")


def group(name: str) -> typer.Typer:
    """The command group ``name`` (imports its module)."""
    module, _ = GROUPS[name]
    sub: typer.Typer = getattr(importlib.import_module(module), f"{name}_app")
    return sub


def command_line(args: list[str]) -> Any:
    """The click command for ``args``: `app` with every group of `GROUPS`, the one ``args`` runs
    imported, the others stand-ins with their help line (what ``toolgate --help`` lists)."""
    root = typer.main.get_group(app)
    chosen = next((arg for arg in args if not arg.startswith("-")), None)
    for name, (_, help_line) in GROUPS.items():
        sub = group(name) if name == chosen else typer.Typer(help=help_line)
        command = typer.main.get_group(sub)
        command.name = name
        root.add_command(command, name)
    _plain(root)
    return root


def _plain(command: Any) -> None:
    """Plain help and usage errors for ``command`` and everything under it: flags without a
    ``<bool>`` type (typer's rich panels show one on every flag), and no rich import."""
    command.rich_markup_mode = None
    for sub in getattr(command, "commands", {}).values():
        _plain(sub)


def _out(line: str) -> None:
    typer.echo(line)


def _kv(**facts: Any) -> None:
    _out(kv_line(**facts))


def _print_version(asked: bool) -> None:
    if asked:
        from importlib.metadata import PackageNotFoundError, version

        try:
            installed = version(DISTRIBUTION)
        except PackageNotFoundError:  # run from a source tree that was never installed
            installed = "unknown"
        typer.echo(f"toolgate {installed}")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: Annotated[
        bool,
        typer.Option("--version", is_eager=True, callback=_print_version, help="Print the version and exit."),
    ] = False,
) -> None:
    """Options of ``toolgate`` itself."""


@app.command()
def demo() -> None:
    """Tell the refund story end to end, offline, on embedded SQLite."""
    from toolgate.config import Settings
    from toolgate.demo import run_demo

    raise typer.Exit(run_demo(Settings.from_env(), _out))


@app.command("test-retries")
def test_retries(
    all_states: Annotated[
        bool, typer.Option("--all-states", help="Simulate every failure class, not only print the matrix.")
    ] = False,
) -> None:
    """Print the retry matrix's check line; with --all-states, simulate the failure classes on a
    fresh embedded store (exit 1 when anything but a transient read or model request retried)."""
    from toolgate.policy.retry import DEFAULT_RETRY_MATRIX

    if not all_states:
        for line in DEFAULT_RETRY_MATRIX.lines():
            _out(line)
        return
    from toolgate.retry_check import run_retry_check

    check = run_retry_check()
    for line in check.lines():
        _out(line)
    raise typer.Exit(0 if check.passed else 1)


@app.command()
def init() -> None:
    """Create the store and its secret, unless they exist.

    Where TOOLGATE_DATA_DIR (default ./.toolgate) or TOOLGATE_DATABASE_URL points. Besides this,
    only demo and seeding an empty store's people (identities import, identities seed-demo) create
    a store; every other command refuses a missing one with error=store_missing."""
    from toolgate.config import Settings

    settings = Settings.from_env()
    path = settings.sqlite_path
    existed = path is not None and path.exists()
    if existed:
        settings.require_store()  # never a second secret for a store that has one (or lost it)
    application = open_from_env(create=True)
    people = len(application.store.identities.list())
    _kv(store=path or "postgresql", created=str(not existed).lower(), identities=people)
    if not people:
        _kv(next=json.dumps("toolgate identities import FILE (or toolgate identities seed-demo, a local demo)"))


@app.command()
def run(
    message: Annotated[str, typer.Argument(help="What the user asks.")],
    as_user: Annotated[str, typer.Option("--as", help="Requesting person (token in TOOLGATE_TOKEN).")],
    thread: Annotated[str | None, typer.Option(help="Thread id (default: a new one).")] = None,
    request_state: Annotated[bool, typer.Option("--request-state", help=STATE_HELP)] = False,
) -> None:
    """Start (or continue) a thread as an authenticated user."""
    from langchain_core.messages import HumanMessage

    from toolgate.graph.context import Context

    application = open_from_env()
    principal = person(application, as_user)
    thread_id = thread or f"thread-{uuid.uuid4().hex[:12]}"
    with application.graph() as graph:
        result = invoke(
            graph,
            {"messages": [HumanMessage(message)]},
            {"configurable": {"thread_id": thread_id}},
            context=Context(principal=principal),
        )
        _report(application, graph, thread_id, result, request_state)


@app.command()
def resume(
    thread_id: Annotated[str, typer.Argument(help="Thread waiting at the approval interrupt.")],
    request_state: Annotated[bool, typer.Option("--request-state", help=STATE_HELP)] = False,
) -> None:
    """Wake a thread after review; decisions come from the store, not from this command.

    A thread that finished before its writes settled (a run that ended ``in_progress``, a store
    that failed mid-delivery) is answered again from the store instead
    (`toolgate.graph.worker.answers`)."""
    from langgraph.types import Command

    from toolgate.graph.context import Context
    from toolgate.graph.worker.answers import stale_writes

    application = open_from_env()
    with application.graph() as graph:
        config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
        snapshot = graph.get_state(config)
        command: Command[str] | None
        if snapshot.next and snapshot.interrupts:
            command = Command(resume={"wake": True})
        elif snapshot.next:  # its last run failed mid-way (the store failing under it): continue it
            command = None
        elif snapshot.values and stale_writes(application.store, snapshot.values):
            command = Command(goto="respond")
        else:
            raise NotFoundError(
                f"thread {thread_id} is not waiting (nothing to resume) and what it reports matches the store"
            )
        result = invoke(graph, command, config, context=Context())
        _report(application, graph, thread_id, result, request_state)


def _report(application: Any, graph: Any, thread: str, result: dict[str, Any], check_lines: bool) -> None:
    from toolgate.cli.report import report

    history = graph.get_state_history({"configurable": {"thread_id": thread}}) if check_lines else None
    report(application, thread, result, _out, history)


@proposals_app.command("list")
def proposals_list(
    status: Annotated[
        str | None, typer.Option(help=f"Only proposals whose operation is in this status: {', '.join(OPERATION_STATUSES)}.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=LIST_PAGE_MAX, help="Proposals per page.")] = LIST_PAGE,
    after: Annotated[
        str | None, typer.Option(help="Start after this position (the next_after a previous page printed).")
    ] = None,
) -> None:
    """List one page of proposals with their operation status, oldest first (a store without any says
    so on stderr; when more follow, stderr names the ``--after`` of the next page)."""
    from toolgate.store.proposals import InvalidCursor

    status = checked_filter("--status", status, OPERATION_STATUSES)
    with open_store_from_env() as store:
        try:
            page = store.proposals.page(status, after=after, limit=limit)
        except InvalidCursor as exc:
            raise InvalidFilter(f"--after: {exc} (pass the next_after a previous page printed)") from None
    rows = page.rows
    if not rows and after is None:
        typer.echo(f"note=no proposals{'' if status is None else ' with status ' + status}", err=True)
    if page.next_after is not None:
        typer.echo(kv_line(note="more proposals follow", next_after=page.next_after), err=True)
    for proposal, operation in rows:
        _kv(
            proposal=proposal.proposal_id,
            tool=proposal.tool,
            status=operation.status,
            risk=proposal.risk,
            requester=proposal.requester_id,
            expires_at=proposal.expires_at,
        )


@proposals_app.command("show")
def proposals_show(proposal_id: str) -> None:
    """Show one proposal exactly as a reviewer must see it."""
    from toolgate.graph.review.decisions import handler_timeout_s
    from toolgate.graph.review.facts import review_facts

    application = open_from_env(read_only=True)
    proposal = application.store.proposals.get(proposal_id)
    if proposal is None:
        raise NotFoundError(f"no proposal {proposal_id}")
    operation = application.store.operations.get(proposal.operation_key)
    assert operation is not None
    _kv(proposal=proposal.proposal_id)
    _kv(tool=proposal.tool, handler=proposal.handler_revision, release=proposal.release)
    _kv(arguments=json.dumps(proposal.arguments, sort_keys=True))
    _kv(arguments_sha256=proposal.arguments_sha256, authentic=str(proposal.authentic).lower())
    _kv(digest=proposal.digest)
    _kv(risk=proposal.risk, approval=proposal.approval_class, requester=proposal.requester_id)
    if (why := proposal.escalation_reason) is not None:
        _kv(escalated_by=proposal.escalation_rule_id, escalation_reason=json.dumps(why))
    _kv(effect=json.dumps(proposal.effect))
    # what the tool shows its reviewer (what a preview token buys, a refund's order): the same
    # lookup the interrupt and the API show, as the proposing release's implementation runs it
    details, details_error = review_facts(application.gateway_for_proposal(proposal_id).registry, proposal)
    if details_error is not None:
        _kv(review_details="unavailable", review_details_error=json.dumps(details_error))
    elif details:
        _kv(review_details=json.dumps(details, sort_keys=True, separators=(",", ":")))
    _kv(rollback=json.dumps(proposal.rollback), timeout_s=handler_timeout_s(application.gateway, proposal))
    _kv(expires_at=proposal.expires_at, status=operation.status, operation_key=proposal.operation_key)
    for record in application.store.approvals.for_proposal(proposal_id):
        _kv(
            decision=record.decision,
            reviewer=record.reviewer_id,
            digest_bound=record.digest == proposal.digest,
            authentic=str(record.authentic).lower(),
            decided_at=record.decided_at,
        )


@app.command()
def approve(
    proposal_id: str,
    as_user: Annotated[str, typer.Option("--as", help="Reviewer (token in TOOLGATE_TOKEN).")],
    digest: Annotated[str | None, typer.Option(help="Digest you reviewed (refused if it differs).")] = None,
) -> None:
    """Approve a proposal as an authenticated reviewer."""
    from toolgate.graph.review.decisions import decide

    application = open_from_env()
    reviewer = person(application, as_user)
    gateway = application.gateway_for_proposal(proposal_id)  # the rules of the release that proposed it
    outcome = decide(gateway, proposal_id, reviewer, "approve", seen_digest=digest)
    _kv(
        proposal=proposal_id,
        decision="approve",
        reviewer=as_user,
        status=outcome.operation.status,
        digest=outcome.record.digest,
    )


@app.command()
def reject(
    proposal_id: str,
    as_user: Annotated[str, typer.Option("--as", help="Reviewer (token in TOOLGATE_TOKEN).")],
    reason: Annotated[str, typer.Option(help="Why, in words the requester will see.")],
) -> None:
    """Reject a proposal as an authenticated reviewer."""
    from toolgate.graph.review.decisions import decide

    application = open_from_env()
    reviewer = person(application, as_user)
    gateway = application.gateway_for_proposal(proposal_id)
    outcome = decide(gateway, proposal_id, reviewer, "reject", reason=reason)
    _kv(proposal=proposal_id, decision="reject", reviewer=as_user, status=outcome.operation.status)


@app.command()
def edit(
    proposal_id: str,
    as_user: Annotated[str, typer.Option("--as", help="Reviewer (token in TOOLGATE_TOKEN).")],
    arguments: Annotated[str, typer.Option("--args", help="The edited arguments as one JSON object.")],
    tool: Annotated[
        str | None, typer.Option(help="Tool of the edited call (must equal the proposal's).")
    ] = None,
) -> None:
    """Replace a pending proposal with edited arguments: a new proposal that needs its own approval."""
    from toolgate.graph.review.edits import edit_proposal

    application = open_from_env()
    reviewer = person(application, as_user)
    original = application.store.proposals.get(proposal_id)
    if original is None:
        raise NotFoundError(f"no proposal {proposal_id}")
    try:
        edited = json_limits.loads(arguments)
    except json_limits.JSONTooDeep as exc:
        raise ApprovalError("malformed_arguments", f"--args is {exc}") from exc
    except json.JSONDecodeError as exc:
        raise ApprovalError("malformed_arguments", f"--args is not valid JSON: {exc.msg}") from exc
    if not isinstance(edited, dict):
        raise ApprovalError("malformed_arguments", "--args must be one JSON object")
    created = edit_proposal(
        application.gateway_for_proposal(proposal_id),  # judged by the release that proposed it
        proposal_id,
        reviewer,
        tool=tool or original.tool,
        arguments=edited,
    )
    _kv(
        proposal=created.proposal_id, supersedes=proposal_id, status="pending_approval", digest=created.digest
    )


@app.command()
def rollback(
    operation_key: str,
    as_user: Annotated[str, typer.Option("--as", help="Requesting person (token in TOOLGATE_TOKEN).")],
) -> None:
    """Propose the declared rollback of a completed operation (a new proposal that needs approval)."""
    from toolgate.graph.review.rollback import propose_rollback

    application = open_from_env()
    proposal = propose_rollback(application.gateway, operation_key, person(application, as_user))
    _kv(
        proposal=proposal.proposal_id,
        tool=proposal.tool,
        arguments=json.dumps(proposal.arguments, sort_keys=True),
        status="pending_approval",
        operation_key=proposal.operation_key,
        rolls_back=operation_key,
    )


def main() -> None:
    """Console entry point: usage errors become one line on stderr and exit code 2 (a bad setting:
    ``toolgate: TOOLGATE_X must be ...``; anything else: ``error=CODE message="..."``)."""
    args = sys.argv[1:]
    try:
        if args and not NEEDS_NO_SETTINGS.intersection(args):
            from toolgate.settings import read_settings

            read_settings()  # every command starts from valid settings, before it touches anything
            from toolgate.telemetry.otel_env import configure_from_env

            configure_from_env()  # OTEL_* variables: spans and metrics to an OTLP endpoint, flushed at exit
        # the command's stdout is its own: loaded code's prints and writes go to stderr
        routed = contextlib.nullcontext() if args[:2] == ["mcp", "serve"] else command_output()
        with routed:
            command_line(args).main(args, standalone_mode=True)
    except ToolgateError as exc:
        typer.echo(error_line(exc), err=True)
        raise SystemExit(2) from None
    finally:
        close_opened()  # the apps the command opened (`closed_at_exit`), however it ended


def error_line(exc: ToolgateError) -> str:
    """The one line a refused command prints: ``error=CODE message="..."`` with the error's stable
    code (`ToolgateError.code`), never its class name; a bad setting stays ``toolgate:
    TOOLGATE_X must be ...`` (what the variable should hold)."""
    if isinstance(exc, ConfigurationError) and hasattr(exc, "variable"):  # settings.InvalidSetting
        return f"toolgate: {exc}"
    return f"error={exc.code} message={json.dumps(str(exc))}"


__all__ = ["GROUPS", "OPERATION_STATUSES", "app", "command_line", "error_line", "main"]
