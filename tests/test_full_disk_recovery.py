"""A full disk during an approved delivery, on embedded SQLite with the real CLI (issue 29): once
space returns, recovery ends with the operation executed exactly once and its thread answered
from the store.

Before, the thread's run ended while its write was left ``executing`` under a claim's lease;
recovery later settled the operation, but the thread kept saying ``in_progress`` and
``toolgate resume`` answered "not waiting". Now the worker answers the threads of what it settled
(`toolgate.graph.worker.answers`), and ``resume`` of a finished thread whose writes settled since
answers it again from the store.

The disk is filled for real: the resuming process runs under ``ulimit -f`` (RLIMIT_FSIZE) below
the store file's size with SIGXFSZ ignored, so SQLite's writes fail in the kernel
(``disk I/O error``/``database or disk is full``), exactly where a full disk fails them.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support import REFUND_REQUEST, cli_env, kv_lines, open_test_store, toolgate

from toolgate.canonical import idempotency_key_for
from toolgate.clock import parse_iso
from toolgate.tools.demo import DemoSystem
from toolgate.tools.demo.identities import demo_token

pytestmark = pytest.mark.slow


def thread_values(data_dir: Path, thread_id: str) -> dict[str, Any]:
    """The thread's latest checkpointed values, read as any client of the checkpointer reads them:
    through LangGraph, with the state's schema (``messages`` is a delta channel, whose checkpoints
    hold the writes that rebuild it rather than the list)."""
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import START, StateGraph

    from toolgate.graph.state import GatewayState

    reader: StateGraph[Any, Any, Any, Any] = StateGraph(GatewayState)
    reader.add_node("read", lambda state: {})
    reader.add_edge(START, "read")
    with sqlite3.connect(data_dir / "checkpoints.sqlite", check_same_thread=False) as conn:
        snapshot = reader.compile(checkpointer=SqliteSaver(conn)).get_state(
            {"configurable": {"thread_id": thread_id}}
        )
    assert snapshot.created_at is not None  # the thread was saved
    return dict(snapshot.values)


def test_a_full_disk_mid_delivery_ends_executed_once_with_the_thread_answered_from_the_store(
    tmp_path: Path,
) -> None:
    env = cli_env(tmp_path, TOOLGATE_CLAIM_LEASE_S="1")
    toolgate(["init"], env)
    toolgate(["identities", "seed-demo"], env)
    ran = toolgate(["run", "--as", "cust-ada", "--thread", "t-disk", REFUND_REQUEST],
                   {**env, "TOOLGATE_TOKEN": demo_token("cust-ada")})  # fmt: skip
    (proposal,) = [line for line in kv_lines(ran.stdout) if "proposal" in line]
    toolgate(["approve", proposal["proposal"], "--as", "fiona"], {**env, "TOOLGATE_TOKEN": demo_token("fiona")})
    store = open_test_store(tmp_path)
    op = store.operations.get(store.proposals.get(proposal["proposal"]).operation_key)  # type: ignore[union-attr]
    assert op is not None and op.status == "approved"

    # the disk fills: every write past the smallest file's size fails in the kernel
    limit_kb = min(p.stat().st_size for p in tmp_path.glob("*.sqlite")) // 1024
    full = subprocess.run(
        ["bash", "-c", f"trap '' XFSZ; ulimit -f {limit_kb}; exec \"$0\" -m toolgate resume t-disk", sys.executable],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    said = full.stdout + full.stderr
    assert "disk I/O error" in said or "disk is full" in said, said
    left = store.operations.get(op.operation_key)
    assert left is not None and left.status in ("approved", "executing"), left
    payments = DemoSystem(store).count("sor_payment_requests", idempotency_key=idempotency_key_for(op.operation_key))
    assert payments <= 1

    # space returns: the abandoned claim's lease ends (on the store's clock), recovery settles it
    if left.status == "executing":
        deadline = time.monotonic() + 60
        while (claim := store.operations.get(op.operation_key)) and claim.lease_expires_at and \
                parse_iso(claim.lease_expires_at) > store.now():  # fmt: skip
            assert time.monotonic() < deadline, "the claim's 1 s lease never ended"
            time.sleep(0.05)
    recovered = toolgate(["worker", "recover", "--grace", "0"], env)
    drained = toolgate(["worker", "run", "--once"], env)
    final = store.operations.get(op.operation_key)
    assert final is not None and final.status == "succeeded", (recovered.stdout, drained.stdout)
    assert DemoSystem(store).count(
        "sor_payment_requests", idempotency_key=idempotency_key_for(op.operation_key)
    ) == 1  # exactly once, whatever the full disk interrupted
    answered = [line for line in kv_lines(recovered.stdout + drained.stdout) if "answered" in line]
    assert answered == [{"thread": "t-disk", "answered": answered[0]["answered"]}], answered
    assert answered[0]["answered"] in ("answered", "resumed")

    # the thread says what the store says, to every reader of its state
    values = thread_values(tmp_path, "t-disk")
    assert values["status"] == "done"
    refund = next(o for o in values["outcomes"].values() if o.get("operation_key") == op.operation_key)
    assert refund["status"] == "completed"
    last = values["messages"][-1]
    assert f"issue_refund [{refund['call_id']}]: completed" in last.content
    assert "in_progress" not in last.content and "executing" not in last.content
    # and it is current now: nothing more to resume, nothing more to answer
    again = toolgate(["resume", "t-disk"], env, check=False)
    assert again.returncode != 0 and "matches the store" in again.stderr
    assert not [line for line in kv_lines(toolgate(["worker", "recover"], env).stdout) if "answered" in line]
    store.close()
