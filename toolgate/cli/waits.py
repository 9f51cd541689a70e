"""``toolgate worker waits``: the durable job waits in the store, and the worker's wait pass."""

from __future__ import annotations

from typing import Annotated, Any, get_args

import typer

from toolgate.cli.common import kv, open_from_env
from toolgate.graph.bootstrap import App
from toolgate.graph.waits.progress import Report, WaitPass, graph_resumer
from toolgate.store.waits import WaitState


def worker_waits(
    state: Annotated[
        str | None, typer.Option(help="Only waits in this state (waiting, ready, resumed).")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="At most this many, newest first.")] = 100,
) -> None:
    """List job waits: thread, job, state, checks, the job's latest status, next check and expiry."""
    if state not in (None, *get_args(WaitState)):  # a usage error (exit 2), like any bad option value
        raise typer.BadParameter("state must be waiting, ready or resumed", param_hint="--state")
    application = open_from_env(read_only=True)
    for wait in application.store.waits.list(state, limit=limit):  # type: ignore[arg-type]
        kv(**wait.facts())


def worker_wait_pass(application: App, graph: Any, report: Report) -> WaitPass:
    """The wait pass of ``toolgate worker run``: checks as the release that proposed each write,
    resumes threads through ``graph`` (this process's checkpointer)."""
    return WaitPass(
        application.store,
        lambda key: application.executor_gateway(key).executor,
        resume=graph_resumer(graph),
        report=report,
    )


__all__ = ["worker_wait_pass", "worker_waits"]
