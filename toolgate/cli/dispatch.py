"""``toolgate dispatch test``: prove fail-closed dispatch against adversarial cases."""

from __future__ import annotations

from typing import Annotated

import typer

dispatch_app = typer.Typer(no_args_is_help=True, help="Exercise the dispatch boundary.")


@dispatch_app.command("test")
def dispatch_test(
    adversarial: Annotated[bool, typer.Option("--adversarial", help="Run every adversarial case.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", help="Print one line per case.")] = False,
) -> None:
    """Run the dispatch cases on a fresh embedded store; exit 1 on any miss."""
    from toolgate.evals.adversarial.cases import CASES
    from toolgate.evals.adversarial.runner import run_adversarial

    cases = CASES if adversarial else tuple(c for c in CASES if c.seed_tag)
    report = run_adversarial(cases=cases)
    if verbose:
        for result in report.results:
            typer.echo(
                f"case={result.case.name} category={result.case.category} expected={result.case.expected} "
                f"got={result.outcome} handler_calls={result.handler_calls}"
            )
    for line in report.lines():
        typer.echo(line)
    raise typer.Exit(0 if report.passed else 1)


__all__ = ["dispatch_app"]
