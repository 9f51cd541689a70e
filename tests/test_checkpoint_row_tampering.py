"""Checkpointed state is untrusted down to the database row (redteam5): a checkpoint changed in
the checkpointer's own tables, between the approval interrupt and the resume, by someone with
database access and no store secret, is refused like a rewrite through ``update_state``.

On each backend's real saver (LangGraph's `SqliteSaver` file; `PostgresSaver` on the store's
PostgreSQL database, where a dict channel lives in ``checkpoint_blobs`` and a string inline in
the checkpoint's JSON): the refund a finance reviewer approved is paused at the interrupt, one
channel of its latest checkpoint is rewritten in place, and the wake-up runs nothing: zero handler
calls and payments, one ``state.tampered`` audit event (code ``state_tampered``) naming the key,
a refused thread, and the operation still ``approved`` in the store (its own record)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.types import Command
from support import REFUND_REQUEST, Harness, principal, start

from toolgate.graph import Context
from toolgate.graph.review.decisions import decide
from toolgate.store import SQLiteStore, Store
from toolgate.store.factory import open_checkpointer
from toolgate.testing import ScriptedChatModel, ai, tool_call

REFUND = {"order_id": "O-5512", "amount_cents": 4999, "reason": "damaged"}


@pytest.fixture
def saver(store: Store, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseCheckpointSaver[Any]]:
    """The checkpointer of ``store``'s backend, as the CLI opens it."""
    url = None if isinstance(store, SQLiteStore) else str(request.getfixturevalue("pg_migrated_url"))
    with open_checkpointer(url, tmp_path) as opened:
        yield opened


def cheaper(calls: dict[str, Any]) -> dict[str, Any]:
    return {cid: {**call, "arguments": {**call["arguments"], "amount_cents": 1}} for cid, call in calls.items()}


REWRITES: dict[str, Callable[[Any], Any]] = {
    "calls": cheaper,  # a dict: a blob of its own on PostgreSQL
    "status": lambda _: "done",  # a string: inline in the checkpoint on PostgreSQL
}


def rewrite_row(saver: BaseCheckpointSaver[Any], thread: str, channel: str, change: Callable[[Any], Any]) -> None:
    """Change ``channel`` of ``thread``'s latest checkpoint in the saver's own tables (no saver API)."""
    latest = saver.get_tuple({"configurable": {"thread_id": thread}})
    assert latest is not None
    checkpoint = latest.checkpoint
    version = checkpoint["channel_versions"][channel]
    value = change(checkpoint["channel_values"][channel])
    conn: Any = saver.conn
    if saver.__class__.__name__ == "SqliteSaver":
        checkpoint["channel_values"][channel] = value
        kind, blob = saver.serde.dumps_typed(checkpoint)
        done = conn.execute(
            "UPDATE checkpoints SET type = ?, checkpoint = ? WHERE thread_id = ? AND checkpoint_id = ?",
            (kind, blob, thread, checkpoint["id"]),
        ).rowcount
        conn.commit()
    elif isinstance(value, str):
        done = conn.execute(
            "UPDATE checkpoints SET checkpoint = jsonb_set(checkpoint, %s, to_jsonb(%s::text))"
            " WHERE thread_id = %s AND checkpoint_id = %s",
            (["channel_values", channel], value, thread, checkpoint["id"]),
        ).rowcount
    else:
        kind, blob = saver.serde.dumps_typed(value)
        done = conn.execute(
            "UPDATE checkpoint_blobs SET type = %s, blob = %s"
            " WHERE thread_id = %s AND checkpoint_ns = '' AND channel = %s AND version = %s",
            (kind, blob, thread, channel, str(version)),
        ).rowcount
    assert done == 1, f"{channel} of {thread} not found where the saver keeps it"
    reread = saver.get_tuple({"configurable": {"thread_id": thread}})
    assert reread is not None and reread.checkpoint["channel_values"][channel] == value


@pytest.mark.parametrize("channel", sorted(REWRITES))
def test_a_checkpoint_row_changed_in_the_database_at_the_interrupt_runs_nothing(
    harness: Harness, saver: BaseCheckpointSaver[Any], channel: str
) -> None:
    thread = f"t-row-{channel}"
    model = ScriptedChatModel(responses=[ai("", tool_call("issue_refund", REFUND, "c1")), ai("done")])
    graph = harness.graph(model, checkpointer=saver)
    facts = start(graph, REFUND_REQUEST, "cust-ada", thread)["__interrupt__"][0].value["toolgate"]["proposals"][0]
    decide(harness.gateway(), facts["proposal_id"], principal("fiona"), "approve")
    rewrite_row(saver, thread, channel, REWRITES[channel])

    final = graph.invoke(Command(resume={"wake": True}), {"configurable": {"thread_id": thread}}, context=Context())
    assert harness.handler_calls["issue_refund"] == 0 and harness.payments() == 0
    assert final["status"] == "refused"
    events = [e for e in harness.store.audit.events() if e.event == "state.tampered" and e.thread_id == thread]
    assert len(events) == 1 and events[0].code == "state_tampered" and channel in events[0].detail["keys"]
    op = harness.store.operations.get(facts["operation_key"])
    assert op is not None and op.status == "approved"  # the store's record: a clean delivery may run it once
