"""Across processes and under real concurrency: approval in another process, concurrent
resumes and deliveries of one operation, on embedded SQLite and a real PostgreSQL server."""

from __future__ import annotations

import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from langgraph.types import Command
from support import (
    REFUND_REQUEST,
    TEST_KEY,
    Harness,
    cli_env,
    kv_lines,
    open_test_store,
    principal,
    seed_people,
    start,
    toolgate,
)

from toolgate.graph import Context
from toolgate.graph.review.decisions import decide
from toolgate.store import PostgresStore, Store, open_checkpointer
from toolgate.testing import ScriptedChatModel, ai, tool_call
from toolgate.tools.demo import DemoSystem


def open_records(data_dir: Path, database_url: str | None) -> tuple[Store, DemoSystem]:
    store = open_test_store(data_dir, database_url)
    return store, DemoSystem(store)


def propose_refund_in_a_process(
    tmp_path: Path, database_url: str | None, thread: str
) -> tuple[dict[str, str], str]:
    env = cli_env(tmp_path, database_url)
    seed_people(tmp_path, database_url)
    ran = toolgate(["run", REFUND_REQUEST, "--as", "cust-ada", "--thread", thread], env)
    proposal = next(row for row in kv_lines(ran.stdout) if "proposal" in row)
    assert proposal["status"] == "pending_approval" and proposal["execution_started"] == "false"
    return env, proposal["proposal"]


@pytest.mark.slow
def test_a_second_process_approves_and_resumes_and_the_handler_runs_once(
    tmp_path: Path, database_url: str | None
) -> None:
    env, proposal_id = propose_refund_in_a_process(tmp_path, database_url, "t-proc")
    store, records = open_records(tmp_path, database_url)
    try:
        assert records.count("sor_payment_requests", order_id="O-5512") == 0
        approved = toolgate(["approve", proposal_id, "--as", "fiona"], env)
        assert "status=approved" in approved.stdout
        resumed = toolgate(["resume", "t-proc"], env)
        assert "issue_refund" in resumed.stdout and ": completed" in resumed.stdout
        assert records.count("sor_payment_requests", order_id="O-5512") == 1
        assert records.count("sor_refunds", order_id="O-5512") == 1
    finally:
        store.close()


@pytest.mark.postgres
@pytest.mark.slow
def test_two_concurrent_resume_processes_produce_one_effect(tmp_path: Path, pg_url: str) -> None:
    env, proposal_id = propose_refund_in_a_process(tmp_path, pg_url, "t-race")
    toolgate(["approve", proposal_id, "--as", "fiona"], env)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "toolgate", "resume", "t-race"],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert any(p.returncode == 0 for p in procs), outputs
    store, records = open_records(tmp_path, pg_url)
    try:
        assert records.count("sor_payment_requests", order_id="O-5512") == 1
        assert records.count("sor_refunds", order_id="O-5512") == 1
    finally:
        store.close()


@pytest.mark.postgres
def test_two_concurrent_resumes_of_one_approved_thread_execute_once(pg_url: str, tmp_path: Path) -> None:
    store = PostgresStore(pg_url, key=TEST_KEY, max_size=20)
    harness = Harness(store, handler_delay_s=0.5)
    model = ScriptedChatModel(
        responses=[
            ai(
                "",
                tool_call(
                    "issue_refund", {"order_id": "O-5512", "amount_cents": 4999, "reason": "damaged"}, "c1"
                ),
            ),
        ]
    )
    with open_checkpointer(pg_url, tmp_path) as saver:
        first = start(harness.graph(model, saver), REFUND_REQUEST, "cust-ada", "t-two")
        proposal_id = first["__interrupt__"][0].value["toolgate"]["proposals"][0]["proposal_id"]
    decide(harness.gateway(), proposal_id, principal("fiona"), "approve")
    barrier = threading.Barrier(2)

    def resume_in_own_graph(_: int) -> dict[str, Any]:
        with open_checkpointer(pg_url, tmp_path) as saver:
            graph = harness.graph(ScriptedChatModel(responses=[ai("done")]), saver)
            barrier.wait()
            result: dict[str, Any] = graph.invoke(
                Command(resume={"wake": True}), {"configurable": {"thread_id": "t-two"}}, context=Context()
            )
            return result

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(resume_in_own_graph, range(2)))
    assert harness.handler_calls["issue_refund"] == 1
    assert harness.payments() == 1 and harness.refunds() == 1
    assert [r["outcomes"]["c1"]["status"] for r in results] == ["completed", "completed"]
    store.close()


@pytest.mark.postgres
def test_twenty_concurrent_deliveries_one_execution_nineteen_stored_results(pg_url: str) -> None:
    store = PostgresStore(pg_url, key=TEST_KEY, max_size=25)
    harness = Harness(store, handler_delay_s=0.3)
    model = ScriptedChatModel(
        responses=[
            ai(
                "",
                tool_call(
                    "issue_refund", {"order_id": "O-5512", "amount_cents": 1000, "reason": "damaged"}, "c1"
                ),
            ),
        ]
    )
    first = start(harness.graph(model), REFUND_REQUEST, "cust-ada", "t-twenty")
    facts = first["__interrupt__"][0].value["toolgate"]["proposals"][0]
    decide(harness.gateway(), facts["proposal_id"], principal("fiona"), "approve")
    executor = harness.gateway().executor
    barrier = threading.Barrier(20)

    def deliver(i: int) -> Any:
        barrier.wait()
        return executor.deliver(facts["operation_key"], worker_id=f"w{i}", wait_s=30)

    with ThreadPoolExecutor(max_workers=20) as pool:
        deliveries = list(pool.map(deliver, range(20)))
    winners = [d for d in deliveries if d.claim == "ACQUIRED"]
    stored = [d for d in deliveries if d.duplicate]
    assert len(winners) == 1 and len(stored) == 19
    assert all(d.result == winners[0].result and d.status == "succeeded" for d in stored)
    assert harness.handler_calls["issue_refund"] == 1 and harness.payments() == 1
    store.close()


@pytest.mark.exclusive
@pytest.mark.postgres
@pytest.mark.slow
def test_twenty_worker_processes_deliver_one_operation_once(tmp_path: Path, pg_url: str) -> None:
    env, proposal_id = propose_refund_in_a_process(tmp_path, pg_url, "t-workers")
    toolgate(["approve", proposal_id, "--as", "fiona"], env)
    store, records = open_records(tmp_path, pg_url)
    try:
        proposal = store.proposals.get(proposal_id)
        assert proposal is not None
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "toolgate",
                    "worker",
                    "execute",
                    "--operation-key",
                    proposal.operation_key,
                    "--worker",
                    f"proc-{i}",
                ],
                env=env,
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(20)
        ]
        rows = []
        for proc in procs:
            stdout, stderr = proc.communicate(timeout=180)
            assert proc.returncode == 0, stderr
            rows.append(kv_lines(stdout)[0])
        assert sum(r["claim"] == "ACQUIRED" for r in rows) == 1
        assert sum(r["duplicate_delivery"] == "stored_result_returned" for r in rows) == 19
        assert {r["status"] for r in rows} == {"succeeded"}
        assert records.count("sor_payment_requests", order_id="O-5512") == 1
    finally:
        store.close()


@pytest.mark.postgres
def test_lab3_sequential_twice_and_twenty_with_asyncio_gather(pg_url: str) -> None:
    import asyncio

    store = PostgresStore(pg_url, key=TEST_KEY, max_size=25)
    harness = Harness(store, handler_delay_s=0.2)
    executor = harness.gateway().executor

    def approved(n: int) -> str:
        model = ScriptedChatModel(
            responses=[
                ai(
                    "",
                    tool_call(
                        "issue_refund",
                        {"order_id": "O-5512", "amount_cents": 100 + n, "reason": "damaged"},
                        f"c{n}",
                    ),
                )
            ]
        )
        facts = start(harness.graph(model), REFUND_REQUEST, "cust-ada", f"t-lab3-{n}")["__interrupt__"][
            0
        ].value
        proposal = facts["toolgate"]["proposals"][0]
        decide(harness.gateway(), proposal["proposal_id"], principal("fiona"), "approve")
        return str(proposal["operation_key"])

    sequential = approved(1)
    first = executor.deliver(sequential, worker_id="seq-1")
    second = executor.deliver(sequential, worker_id="seq-2")
    assert (first.claim, second.duplicate, second.result == first.result) == ("ACQUIRED", True, True)
    assert harness.handler_calls["issue_refund"] == 1

    concurrent = approved(2)

    async def deliver_all() -> list[Any]:
        return list(
            await asyncio.gather(
                *(
                    asyncio.to_thread(executor.deliver, concurrent, worker_id=f"async-{i}", wait_s=30)
                    for i in range(20)
                )
            )
        )

    deliveries = asyncio.run(deliver_all())
    assert sum(d.claim == "ACQUIRED" for d in deliveries) == 1 and sum(d.duplicate for d in deliveries) == 19
    assert (
        harness.handler_calls["issue_refund"] == 2 and harness.refunds() == 2
    )  # one effect per logical call
    store.close()
