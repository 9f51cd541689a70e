"""``toolgate worker execute`` (the operator's one-shot delivery) takes the same tool-execution
slot as every other delivery: with the tenant's cluster-wide share held elsewhere it claims
nothing, prints ``status=overloaded ... scope=cluster``, exits 75 and leaves the operation
approved; once the share is free the same command delivers it once."""

from __future__ import annotations

from pathlib import Path

from support import TEST_KEY, kv_lines, toolgate
from test_cli_doors import audit_seq, audit_since, build_world, operation_status, payments

from toolgate.store import SQLiteStore


def test_worker_execute_waits_for_the_tenants_cluster_share(tmp_path: Path) -> None:
    world = build_world(tmp_path)
    toolgate(["approve", world.pending, "--as", "rita"], world.env)
    assert "status=approved" in toolgate(["approve", world.pending, "--as", "sam"], world.env).stdout
    env = {**world.env, "TOOLGATE_CLUSTER_TOOL_EXECUTIONS_PER_TENANT": "1"}
    store = SQLiteStore(world.db, key=TEST_KEY)
    try:
        held = store.slots.take("tool:acme", "another-process", 1, 300)  # acme's share, held elsewhere
        assert held == 0
        seq = audit_seq(world.db)
        refused = toolgate(["worker", "execute", "--operation-key", world.pending_key], env, check=False)
        assert refused.returncode == 75, refused.stderr
        facts = kv_lines(refused.stdout)[0]
        assert (facts["claim"], facts["status"], facts["scope"], facts["kind"]) == (
            "NOT_ATTEMPTED",
            "overloaded",
            "cluster",
            "tool",
        )
        assert operation_status(world.db, world.pending_key) == "approved" and payments(world.db) == 0
        assert audit_since(world.db, seq) == [("admission.overloaded", "overloaded")]

        assert store.slots.release("tool:acme", 0, "another-process")
        done = toolgate(["worker", "execute", "--operation-key", world.pending_key], env)
        assert kv_lines(done.stdout)[0]["status"] == "succeeded"
        assert payments(world.db) == 1 and store.slots.held("tool:acme") == []  # given back
    finally:
        store.close()
