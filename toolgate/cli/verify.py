"""``toolgate verify``: the finish-line checklist, and ``toolgate verify idempotency``."""

from __future__ import annotations

from typing import Annotated

import typer

from toolgate.cli.common import open_from_env

verify_app = typer.Typer(help="Run the finish-line checks against the configured database.")


@verify_app.callback(invoke_without_command=True)
def verify(
    context: typer.Context,
    check: Annotated[list[str] | None, typer.Option(help="Run only these checks (repeatable).")] = None,
) -> None:
    """Every check, one ``key=value`` line each; exit 1 when any check fails."""
    if context.invoked_subcommand is not None:
        return
    from toolgate.verify import CHECKS, run_checks

    unknown = sorted(set(check or []) - set(CHECKS))
    if unknown:
        raise typer.BadParameter(f"unknown check(s) {unknown}; known: {sorted(CHECKS)}")
    application = open_from_env()
    results = run_checks(application, check or None)
    for result in results:
        typer.echo(result.line())
    failed = [r.name for r in results if r.status == "FAIL"]
    typer.echo(f"verify={'FAIL' if failed else 'PASS'}" + (f" failed={','.join(failed)}" if failed else ""))
    raise typer.Exit(1 if failed else 0)


@verify_app.command("idempotency")
def idempotency(concurrency: Annotated[int, typer.Option(min=2, max=200)] = 20) -> None:
    """Deliver one approved operation N times at once: one execution, N-1 stored results."""
    from toolgate.verify import run_idempotency

    result = run_idempotency(open_from_env(), concurrency)
    typer.echo(
        f"deliveries={result.deliveries} executions={result.executions} "
        f"stored_result_returned={result.stored_result_returned}"
    )
    typer.echo(f"operation_key={result.operation_key}")
    ok = result.executions == 1 and result.stored_result_returned == concurrency - 1
    raise typer.Exit(0 if ok else 1)


__all__ = ["verify_app"]
