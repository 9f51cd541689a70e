"""``toolgate verify``: the finish-line checklist, and ``toolgate verify idempotency``."""

from __future__ import annotations

from typing import Annotated

import typer

from toolgate.cli.common import open_from_env

verify_app = typer.Typer(help="Run the finish-line checks against the configured database.")


AS_ADMIN = typer.Option(
    "--as",
    help="The administrator running the idempotency check (TOOLGATE_TOKEN proves it): it proposes, "
    "approves and runs a restart as the demo's sam and omar.",
)


@verify_app.callback(invoke_without_command=True)
def verify(
    context: typer.Context,
    check: Annotated[list[str] | None, typer.Option(help="Run only these checks (repeatable).")] = None,
    as_user: Annotated[str | None, AS_ADMIN] = None,
) -> None:
    """Every check, one ``key=value`` line each; exit 1 when any check fails. The idempotency check
    runs a write: an authenticated administrator only, refused before any check runs."""
    if context.invoked_subcommand is not None:
        return
    from toolgate.verify import CHECKS, WRITES, authorize_verifier, run_checks

    unknown = sorted(set(check or []) - set(CHECKS))
    if unknown:
        raise typer.BadParameter(f"unknown check(s) {unknown}; known: {sorted(CHECKS)}")
    application = open_from_env()
    names = check or list(CHECKS)
    by = authorize_verifier(application, as_user) if WRITES & set(names) else None
    results = run_checks(application, names, by)
    for result in results:
        typer.echo(result.line())
    failed = [r.name for r in results if r.status == "FAIL"]
    typer.echo(f"verify={'FAIL' if failed else 'PASS'}" + (f" failed={','.join(failed)}" if failed else ""))
    raise typer.Exit(1 if failed else 0)


@verify_app.command("idempotency")
def idempotency(
    concurrency: Annotated[int, typer.Option(min=2, max=200)] = 20,
    as_user: Annotated[str | None, AS_ADMIN] = None,
) -> None:
    """Deliver one approved operation N times at once: one execution, N-1 stored results (an
    authenticated administrator only: it proposes, approves and runs a restart)."""
    from toolgate.verify import authorize_verifier, run_idempotency

    application = open_from_env()
    result = run_idempotency(application, concurrency, authorize_verifier(application, as_user))
    typer.echo(
        f"deliveries={result.deliveries} executions={result.executions} "
        f"stored_result_returned={result.stored_result_returned}"
    )
    typer.echo(f"operation_key={result.operation_key}")
    ok = result.executions == 1 and result.stored_result_returned == concurrency - 1
    raise typer.Exit(0 if ok else 1)


__all__ = ["verify_app"]
