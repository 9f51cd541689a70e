"""Smoke test of the REAL ``langgraph dev`` server, offline, driven through ``langgraph-sdk``.

The server (`server_support.langgraph_dev`) runs as a subprocess in its own process group with a
temporary working directory (it writes ``.langgraph_api/`` there, never into the repo) and a copy
of the repo's ``langgraph.json`` whose ``dependencies`` point at the repo by absolute path. It uses
the offline demo model and a SQLite store in a temporary ``TOOLGATE_DATA_DIR`` holding the demo
people; the client authenticates with cust-ada's bearer token (the server's auth handler makes
her the thread's principal: nobody names a principal in ``context``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from server_support import Server, client_as, interrupts_of, people_server

REQUEST = "My blender arrived broken, order O-5512. Please refund it."

pytestmark = [pytest.mark.server, pytest.mark.slow]


@pytest.fixture
def langgraph_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A running ``langgraph dev`` on a free port; the process group is always terminated."""
    with people_server(tmp_path_factory.mktemp("lgdev")) as server:
        yield server


def test_langgraph_dev_run_stops_at_approval_interrupt(
    langgraph_server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    started = time.monotonic()
    with client_as(langgraph_server, "cust-ada") as client:
        assistants = client.assistants.search(graph_id="toolgate")
        assert [a["graph_id"] for a in assistants] == ["toolgate"]

        thread = client.threads.create()
        thread_id = thread["thread_id"]
        run_input: Any = {"messages": [{"role": "user", "content": REQUEST}]}
        result = client.runs.wait(thread_id, "toolgate", input=run_input)
        assert isinstance(result, dict), result
        assert result.get("status") == "awaiting_approval", result
        assert result["bookkeeping"]["principal"]["user_id"] == "cust-ada"  # a grouped key

        state: dict[str, Any] = dict(client.threads.get_state(thread_id))
        thread_info: dict[str, Any] = dict(client.threads.get(thread_id))

    assert list(state["next"]) == ["approval"]
    assert thread_info["status"] == "interrupted"

    interrupts = interrupts_of(state)
    assert len(interrupts) == 1, state
    payload = interrupts[0]["value"]
    assert set(payload) >= {"action_requests", "review_configs", "toolgate"}

    action = payload["action_requests"][0]
    assert action["name"] == "issue_refund"
    assert action["args"] == {"order_id": "O-5512", "amount_cents": 4999, "reason": "damaged"}
    assert payload["review_configs"][0]["action_name"] == "issue_refund"

    proposal = payload["toolgate"]["proposals"][0]
    assert proposal["status"] == "pending_approval"
    assert proposal["execution_started"] is False
    assert re.fullmatch(r"[0-9a-f]{64}", proposal["digest"]), proposal["digest"]
    assert proposal["risk"] == "danger"
    assert proposal["tool"] == "issue_refund"

    # the lookup ran before the pause; the refund did not
    lookups = [o for o in state["values"]["outcomes"].values() if o["tool"] == "lookup_order"]
    assert [o["status"] for o in lookups] == ["completed"]
    assert state["values"]["status"] == "awaiting_approval"
    # the same interrupt is visible on the thread object (keyed by task id)
    by_task = [i for items in (thread_info.get("interrupts") or {}).values() for i in items]
    assert [i["value"] for i in by_task] == [payload]

    # the server used the temporary data dir and working dir, not the repo
    assert (langgraph_server.data_dir / "toolgate.sqlite").exists()
    assert (langgraph_server.workdir / ".langgraph_api").is_dir()
    assert time.monotonic() - started < 45
