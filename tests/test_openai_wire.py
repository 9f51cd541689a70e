"""The real ``langchain-openai`` client against a local server speaking the Chat Completions wire format.

No internet and no real key: a stdlib HTTP server on 127.0.0.1 replays scripted OpenAI responses
and records every request, so the assertions are about the exact bytes toolgate's model node makes
``ChatOpenAI`` send (strict tools, only the principal's tools, no parallel calls) and about the
tool result it feeds back on the next turn.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from support import TEST_KEY

from toolgate.config import Settings
from toolgate.graph import Context, build_gateway, build_graph
from toolgate.graph.bootstrap import initialize_store
from toolgate.models import load_chat_model
from toolgate.policy import Principal
from toolgate.release import ReleaseEnv
from toolgate.store import SQLiteStore
from toolgate.tools.demo.release import DEMO_RELEASES

FAKE_KEY = "sk-test-not-a-real-key-0000000000"
RELEASE = "ops-tools/1.0.0"
CALL_ID = "call_wire_lookup_7Qx2"


# --------------------------------------------------------------------------- local OpenAI stand-in


@dataclass
class Recorded:
    """One request the fake server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class FakeOpenAI:
    """A scripted Chat Completions endpoint; ``base_url`` ends in ``/v1`` like the real one."""

    base_url: str
    responses: list[dict[str, Any]]
    requests: list[Recorded] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _completion(
    message: dict[str, Any], finish_reason: str, *, prompt_tokens: int, completion_tokens: int, suffix: str
) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-toolgatewire{suffix}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "gpt-4.1-mini-2025-04-14",
        "system_fingerprint": "fp_toolgate_wire",
        "service_tier": "default",
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        },
    }


def scripted_responses() -> list[dict[str, Any]]:
    """Turn 1: one ``lookup_order`` call. Turn 2: a plain answer."""
    tool_turn = _completion(
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
    text_turn = _completion(
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


def _error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}}


def _make_handler(fake: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
            return

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("x-request-id", f"req_wire_{len(fake.requests)}")
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = {"_unparseable": raw.decode("utf-8", "replace")}
            with fake.lock:
                headers = {k.lower(): v for k, v in self.headers.items()}
                fake.requests.append(Recorded("POST", self.path, headers, body))
                scripted = self.path == "/v1/chat/completions" and fake.responses
                reply = fake.responses.pop(0) if scripted else None
            if reply is None:
                status = 404 if self.path != "/v1/chat/completions" else 500
                self._send(status, _error(f"unscripted {self.path}"))
                return
            self._send(200, reply)

        def do_GET(self) -> None:
            self._send(404, _error(f"unexpected GET {self.path}"))

    return Handler


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    """A local threaded HTTP server replaying :func:`scripted_responses`."""
    fake = FakeOpenAI(base_url="", responses=scripted_responses())
    server = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(fake))
    server.daemon_threads = True
    port = server.server_address[1]
    fake.base_url = f"http://127.0.0.1:{port}/v1"
    thread = threading.Thread(target=server.serve_forever, name="fake-openai", daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


# --------------------------------------------------------------------------- the test


def _principal() -> Principal:
    return Principal(
        user_id="cust-ada",
        tenant_id="acme",
        roles=frozenset({"customer"}),
        scopes=frozenset({"orders:read", "refunds:request"}),
    )


def test_langchain_openai_round_trip_through_gateway(
    fake_openai: FakeOpenAI,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Only the local server may be reached, with an obviously fake key.
    for var in (
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "OPENAI_BASE_URL",
        "OPENAI_ORG_ID",
        "OPENAI_PROJECT_ID",
        "OPENAI_ORGANIZATION",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    caplog.set_level(logging.DEBUG)  # every logger, including openai/httpx/httpcore debug output

    settings = Settings(
        data_dir=tmp_path,
        model="openai:gpt-4.1-mini",
        model_base_url=fake_openai.base_url,
        allow_model_requests=True,
    )
    model = load_chat_model(settings)
    assert type(model).__name__ == "ChatOpenAI"

    store = SQLiteStore(tmp_path / "t.sqlite", key=TEST_KEY)
    initialize_store(store, DEMO_RELEASES["ops-tools/1.1.0"])
    try:
        registry = DEMO_RELEASES[RELEASE].registry(ReleaseEnv(store, secret=b"test-secret"))
        graph = build_graph(
            gateway=build_gateway(
                model=model, registry=registry, policy=DEMO_RELEASES[RELEASE].policy, store=store
            ),
            checkpointer=InMemorySaver(),
        )
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
    assert fake_openai.responses == []

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
    assert final["budget"]["model_turns"] == 2
    ai_with_call = next(m for m in final["messages"] if getattr(m, "tool_calls", None))
    assert ai_with_call.response_metadata.get("id") == "chatcmpl-toolgatewire0001"
    assert any(isinstance(m, ToolMessage) and m.tool_call_id == CALL_ID for m in final["messages"])

    # ---- the key was never logged or printed (only sent to the local server)
    captured = capsys.readouterr()
    assert caplog.records, "expected client log records at DEBUG (the check below would be vacuous)"
    log_text = "\n".join(f"{r.name} {r.getMessage()} {r.__dict__!r}" for r in caplog.records) + caplog.text
    assert FAKE_KEY not in log_text
    assert FAKE_KEY not in captured.out
    assert FAKE_KEY not in captured.err
    assert FAKE_KEY not in repr(model)
    for db_file in tmp_path.glob("t.sqlite*"):
        assert FAKE_KEY.encode() not in db_file.read_bytes(), db_file
