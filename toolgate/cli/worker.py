"""``toolgate worker``: execution outside a graph run, reconciliation and recovery (the people's
queue of operations whose outcome nobody could determine is `toolgate.cli.deadletter`)."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer

from toolgate.cli.common import EXIT_OVERLOADED, open_from_env
from toolgate.cli.common import kv as _kv
from toolgate.cli.own_output import speaking_for_the_command
from toolgate.cli.waits import worker_wait_pass, worker_waits
from toolgate.errors import NotFoundError
from toolgate.graph.bootstrap import App
from toolgate.graph.context import Context
from toolgate.graph.delivery.recovery import recover, verify_effect
from toolgate.graph.worker.answers import answer_thread, threads_of
from toolgate.graph.worker.loop import LoopOptions, WorkerLoop, stop_on_signals
from toolgate.policy.admission import Overloaded, admitted

worker_app = typer.Typer(no_args_is_help=True, help="Execute approved operations outside a graph run.")


@worker_app.command("execute")
def worker_execute(
    operation_key: Annotated[str, typer.Option("--operation-key", help="Operation to deliver.")],
    worker: Annotated[str | None, typer.Option(help="Worker id recorded as claim owner.")] = None,
) -> None:
    """Deliver one approved operation: execute it once, or return its stored result."""
    application = open_from_env()
    context = Context()
    # the executor of the release that proposed it, while release control still serves that release
    executor = application.executor_gateway(operation_key).executor
    op = application.store.operations.get(operation_key)
    try:  # a tool-execution slot of the operation's stored tenant, as every delivery takes
        with admitted(executor.auditor, "tool", op.tenant_id if op else None, operation_key=operation_key):
            delivery = executor.deliver(
                operation_key,
                worker_id=worker or context.worker_id,
                lease_s=context.claim_lease_s,
                wait_s=context.duplicate_wait_s,
            )
    except Overloaded as exc:  # audited; nothing claimed, the operation stays approved
        _kv(operation_key=operation_key, claim="NOT_ATTEMPTED", status="overloaded",
            retry_after_s=exc.retry_after_s, kind=exc.kind, scope=exc.scope)  # fmt: skip
        raise typer.Exit(EXIT_OVERLOADED) from None
    _kv(
        operation_key=operation_key,
        claim=delivery.claim,
        status=delivery.status,
        duplicate_delivery="stored_result_returned" if delivery.duplicate else "none",
        result=json.dumps(delivery.result, sort_keys=True) if delivery.result else "none",
    )


@worker_app.command("run")
def worker_run(
    poll: Annotated[
        float, typer.Option(min=0.0, help="Seconds between passes that found nothing to do.")
    ] = 1.0,
    batch: Annotated[int, typer.Option(min=1, help="Operations tried per pass.")] = 10,
    once: Annotated[bool, typer.Option("--once", help="Drain what is due, then exit.")] = False,
    max_operations: Annotated[
        int | None, typer.Option(min=1, help="Exit after this many claimed operations.")
    ] = None,
    grace: Annotated[
        float, typer.Option(min=0.0, help="Seconds past a claim's lease before it is abandoned.")
    ] = 30.0,
    recover_every: Annotated[float, typer.Option(min=0.0, help="Seconds between recovery passes.")] = 10.0,
    worker: Annotated[str | None, typer.Option(help="Worker id recorded as claim owner.")] = None,
) -> None:
    """Deliver approved operations, reconcile unknown outcomes and recover abandoned claims until
    SIGTERM/SIGINT (the delivery in flight finishes; a second signal exits at once)."""
    application = open_from_env()
    context = Context()
    options = LoopOptions(
        worker_id=worker or context.worker_id,
        poll_s=poll,
        batch=batch,
        once=once,
        max_operations=max_operations,
        lease_s=context.claim_lease_s,
        grace_s=grace,
        recover_every_s=recover_every,
        delays=tuple(context.reconcile_delays),
    )

    settled: list[str] = []

    def report(facts: dict[str, object]) -> None:
        _kv(**facts)
        sys.stdout.flush()
        key = facts.get("operation_key")
        if isinstance(key, str) and ("status" in facts or "reconciled" in facts):
            settled.append(key)

    loop = WorkerLoop(
        application.gateway.executor,
        options,
        executor_for=lambda key: application.executor_gateway(key).executor,
        report=report,
    )
    def stopping(name: str) -> None:  # on the signal's own short thread: a line of the command's
        with speaking_for_the_command():
            report({"worker": options.worker_id, "event": "stopping", "signal": name})

    restore = stop_on_signals(loop.stop, stopping)
    try:
        report({"worker": options.worker_id, "event": "started", "release": application.release.id})
        with application.graph() as graph:  # the wait pass resumes threads whose job wait is over
            waits = worker_wait_pass(application, graph, report)

            def wait_and_answer_pass() -> int:
                # and the threads of what this worker settled learn it from the store
                answered = _answer_threads(application, graph, settled)
                settled.clear()
                return waits() + answered

            loop.wait_pass = wait_and_answer_pass
            summary = loop.run()
    finally:
        restore()
    report({"worker": options.worker_id, **summary.facts()})


worker_app.command("waits")(worker_waits)


@worker_app.command("recover")
def worker_recover(
    grace: Annotated[
        float, typer.Option(help="Seconds past a claim's lease before it counts as abandoned.")
    ] = 30.0,
    redeliver: Annotated[
        bool, typer.Option(help="Deliver again operations proven not to have happened.")
    ] = True,
) -> None:
    """Reconcile operations left executing by dead workers, and every unknown outcome."""
    application = open_from_env()
    context = Context()
    report = recover(
        application.gateway.executor,
        worker_id=context.worker_id,
        grace_s=grace,
        delays=context.reconcile_delays,
        redeliver=redeliver,
    )
    for item in report.reconciled:
        final = application.store.operations.get(item.operation_key)
        _kv(
            operation_key=item.operation_key,
            reconciled=item.status,
            found=str(item.found).lower(),
            checks=item.checks,
            status=final.status if final else "missing",
        )
    settled = [*report.recovered, *(i.operation_key for i in report.reconciled), *report.redelivered]
    if settled:  # the threads of what settled learn it from the store (no checkpointer opened else)
        with application.graph() as graph:
            _answer_threads(application, graph, settled)
    _kv(
        recovered=len(report.recovered),
        reconciled=len(report.reconciled),
        redelivered=len(report.redelivered),
        dead_letters_open=len(application.store.operations.dead_letters()),
    )


def _answer_threads(application: App, graph: Any, operation_keys: list[str]) -> int:
    """Answer from the store each thread that proposed one of ``operation_keys``
    (`toolgate.graph.worker.answers`); a line per thread brought up to date. One thread failing
    (its checkpoint unreadable, the model down) is reported and never stops the others."""
    done = 0
    for thread_id in threads_of(application.store, operation_keys):
        try:
            answer = answer_thread(graph, application.store, thread_id)
        except Exception as exc:
            _kv(thread=thread_id, answered="error", error=type(exc).__name__)
            continue
        if answer in ("resumed", "answered"):
            done += 1
            _kv(thread=thread_id, answered=answer)
    return done


@worker_app.command("verify")
def worker_verify(
    operation_key: Annotated[str, typer.Option("--operation-key", help="Operation to verify.")],
) -> None:
    """Check one operation: its claim, its approval, its handler, its status, and a replayed delivery.

    Writes nothing: the store is opened read-only, and a delivery is replayed only for a finished
    operation (which returns its stored result)."""

    application = open_from_env(read_only=True)
    store = application.store
    op = store.operations.get(operation_key)
    if op is None or op.proposal_id is None:
        raise NotFoundError(f"no operation {operation_key}")
    proposal = store.proposals.get(op.proposal_id)
    spec = application.registry.get_for(op.tool, op.tenant_id)
    assert proposal is not None
    events = store.audit.events(operation_key=operation_key)
    claims = sum(e.event == "operation.claimed" for e in events)
    executions = sum(e.event == "handler.started" for e in events)
    verdict = application.gateway.authority.approval_validity(spec, proposal) if spec else None
    finished = op.status in ("succeeded", "failed")
    replay = (
        application.gateway.executor.deliver(operation_key, worker_id="worker-verify", wait_s=5)
        if finished
        else None
    )
    status = "completed" if op.status == "succeeded" else op.status
    # the system of record, through the tool's own status check: "active" only when it was asked
    verification, why = verify_effect(application.gateway.executor, operation_key)
    ok = (
        claims == 1
        and executions == 1
        and op.status == "succeeded"
        and replay is not None
        and replay.duplicate
        and verdict is not None
        and verdict.status == "approved"
        and verification in ("active", "passive")
    )
    _kv(
        operation_key=operation_key,
        claim="ACQUIRED" if claims == 1 else f"CLAIMS_{claims}",
        approval="VALID" if verdict and verdict.status == "approved" else "INVALID",
        handler=proposal.handler_revision,
        executions=executions,
        verification=verification,
        **({"verification_reason": why} if why else {}),
        status=status,
        duplicate_delivery=(
            "stored_result_returned"
            if replay and replay.duplicate
            else (replay.status if replay else "not_attempted")
        ),
    )
    raise typer.Exit(0 if ok else 1)


__all__ = ["worker_app"]
