"""The real ``langchain-openai`` client against a local server speaking the Chat Completions wire format.

Chat Completions is the API ``TOOLGATE_OPENAI_API=chat`` selects (the Responses API is the
default: tests/test_openai_responses.py). No internet and no real key: the local replay server of
tests/replay_openai.py answers with scripted OpenAI responses and records every request, so the
assertions are about the exact bytes toolgate's model node makes ``ChatOpenAI`` send (strict
tools, only the principal's tools, no parallel calls) and about the tool result it feeds back on
the next turn.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from replay_openai import CHAT_PATH, FAKE_KEY, ReplayServer, Reply, chat_completion, local_only_here
from support import TEST_KEY, log_text

from toolgate.config import Settings
from toolgate.graph import Context
from toolgate.graph.bootstrap import initialize_store
from toolgate.graph.state import gateway_state
from toolgate.models.selection import load_chat_model
from toolgate.policy import Principal
from toolgate.releases.bundle import ReleaseEnv
from toolgate.store import SQLiteStore
from toolgate.testing import open_test_app
from toolgate.tools.demo.release import DEMO_RELEASES

RELEASE = "ops-tools/1.0.0"
CALL_ID = "call_wire_lookup_7Qx2"


def scripted_responses() -> list[Reply]:
    """Turn 1: one ``lookup_order`` call. Turn 2: a plain answer."""
    tool_turn = chat_completion(
        {
            "role": "assistant",
            "content": None,
            "refusal": None,
            "annotations": [],
            "tool_calls": [
                {
                    "id": CALL_ID,
                    "type": "function",
                    "function": {"name": "lookup_order", "arguments": json.dumps({"order_id": "O-5512"})},
                }
            ],
        },
        "tool_calls",
        prompt_tokens=412,
        completion_tokens=19,
        suffix="0001",
    )
    text_turn = chat_completion(
        {
            "role": "assistant",
            "content": "Order O-5512 (Blender B-200) was delivered.",
            "refusal": None,
            "annotations": [],
        },
        "stop",
        prompt_tokens=530,
        completion_tokens=14,
        suffix="0002",
    )
    return [tool_turn, text_turn]


@pytest.fixture
def fake_openai() -> Iterator[ReplayServer]:
    """A local Chat Completions endpoint replaying :func:`scripted_responses`."""
    with ReplayServer(scripted_responses(), path=CHAT_PATH) as server:
        yield server


# --------------------------------------------------------------------------- the test


def _principal() -> Principal:
    return Principal(
        user_id="cust-ada",
        tenant_id="acme",
        roles=frozenset({"customer"}),
        scopes=frozenset({"orders:read", "refunds:request"}),
    )


def test_langchain_openai_round_trip_through_gateway(
    fake_openai: ReplayServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    local_only_here(monkeypatch)  # only the local server may be reached, with an obviously fake key
    caplog.set_level(logging.DEBUG)  # every logger, including openai/httpx/httpcore debug output

    settings = Settings(
        data_dir=tmp_path,
        model="openai:gpt-4.1-mini",
        model_base_url=fake_openai.base_url,
        allow_model_requests=True,
        openai_api="chat",
    )
    model = load_chat_model(settings)
    assert type(model).__name__ == "ChatOpenAI"

    store = SQLiteStore(tmp_path / "t.sqlite", key=TEST_KEY)
    initialize_store(store, DEMO_RELEASES["ops-tools/1.1.0"])
    try:
        registry = DEMO_RELEASES[RELEASE].registry(ReleaseEnv(store, secret=b"test-secret"))
        graph = open_test_app(
            model=model,
            tools=registry,
            policy=DEMO_RELEASES[RELEASE].policy,
            store=store,
            start=False,
            checkpointer=InMemorySaver(),
        ).compiled()
        final = graph.invoke(
            {"messages": [HumanMessage("where is my order O-5512?")]},
            {"configurable": {"thread_id": "t1"}},
            context=Context(principal=_principal()),
        )
    finally:
        store.close()

    # ---- exactly two Chat Completions requests, nothing else
    reqs = fake_openai.requests
    assert [(r.method, r.path) for r in reqs] == [("POST", "/v1/chat/completions")] * 2, [
        r.path for r in reqs
    ]
    assert fake_openai.script == []

    # ---- request 1: only this principal's tools, strict, no parallel calls
    first = reqs[0].body
    assert first["model"] == "gpt-4.1-mini"
    assert first.get("stream") in (None, False)
    tools = first["tools"]
    names = sorted(t["function"]["name"] for t in tools)
    assert names == ["issue_refund", "lookup_order"]
    assert "get_service_status" not in names and "restart_service" not in names
    for tool in tools:
        assert tool["type"] == "function"
        fn = tool["function"]
        assert fn["strict"] is True, fn
        params = fn["parameters"]
        assert params["type"] == "object"
        assert params["additionalProperties"] is False, fn["name"]
        assert params["properties"], fn["name"]
        assert sorted(params["required"]) == sorted(params["properties"]), fn["name"]
    assert first["parallel_tool_calls"] is False
    assert first["tool_choice"] == "auto"
    assert first["messages"][0]["role"] in ("system", "developer")
    assert first["messages"][-1] == {"role": "user", "content": "where is my order O-5512?"}
    # the fake key reached the local server (and only it) as the bearer token
    assert reqs[0].headers["authorization"] == f"Bearer {FAKE_KEY}"
    assert reqs[1].headers["authorization"] == f"Bearer {FAKE_KEY}"

    # ---- request 2: the assistant's call echoed back, then the tool result for the same call id
    second = reqs[1].body
    roles = [m["role"] for m in second["messages"]]
    assistant = [m for m in second["messages"] if m["role"] == "assistant"]
    assert len(assistant) == 1
    assert [c["id"] for c in assistant[0]["tool_calls"]] == [CALL_ID]
    assert assistant[0]["tool_calls"][0]["function"]["name"] == "lookup_order"
    assert json.loads(assistant[0]["tool_calls"][0]["function"]["arguments"]) == {"order_id": "O-5512"}
    tool_msgs = [m for m in second["messages"] if m["role"] == "tool"]
    assert len(tool_msgs) == 1, roles
    assert tool_msgs[0]["tool_call_id"] == CALL_ID
    assert roles.index("tool") == roles.index("assistant") + 1
    result = json.loads(tool_msgs[0]["content"])
    assert result["status"] == "completed"
    assert result["data"]["order_id"] == "O-5512"
    assert second["parallel_tool_calls"] is False  # still bound with the same tools
    assert sorted(t["function"]["name"] for t in second["tools"]) == ["issue_refund", "lookup_order"]

    # ---- the graph's final state
    assert final["status"] == "done"
    outcomes = final["outcomes"]
    assert outcomes[CALL_ID]["tool"] == "lookup_order"
    assert outcomes[CALL_ID]["status"] == "completed"
    assert final["calls"][CALL_ID]["arguments"] == {"order_id": "O-5512"}
    assert gateway_state(final)["budget"]["model_turns"] == 2
    ai_with_call = next(m for m in final["messages"] if getattr(m, "tool_calls", None))
    assert ai_with_call.response_metadata.get("id") == "chatcmpl-toolgatewire0001"
    assert any(isinstance(m, ToolMessage) and m.tool_call_id == CALL_ID for m in final["messages"])

    # ---- the key was never logged or printed (only sent to the local server)
    captured = capsys.readouterr()
    assert caplog.records, "expected client log records at DEBUG (the check below would be vacuous)"
    assert FAKE_KEY not in log_text(caplog)
    assert FAKE_KEY not in captured.out
    assert FAKE_KEY not in captured.err
    assert FAKE_KEY not in repr(model)
    for db_file in tmp_path.glob("t.sqlite*"):
        assert FAKE_KEY.encode() not in db_file.read_bytes(), db_file
