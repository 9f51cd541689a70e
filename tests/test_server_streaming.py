"""A streaming client sees exactly what the stored state keeps: no secret the gateway redacts.

The REAL ``langgraph dev`` runs the REAL ``langchain-openai`` client against a local HTTP server
that speaks the Chat Completions wire format (no internet, no key). The scripted model answers with
text holding an API key and a card number. The gateway screens the response before it is stored,
so the state shows ``[REDACTED]``. Every stream mode the server offers is then read by a client:
no planted value arrives in any of them, the redacted message does arrive (so the test sees the
model's text at all), and the model endpoint only ever received non-streaming requests (the raw
response never reached a token-streaming callback).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from server_support import LOCAL_HOSTS, Server, client_as, people_server

pytestmark = [pytest.mark.server, pytest.mark.slow]

API_KEY = "sk-live-PLANTEDkey0123456789abcdef"
CARD = "4111 1111 1111 1111"
PLANTED = (API_KEY, CARD, CARD.replace(" ", ""), "PLANTEDkey")
TEXT = f"Your support key is {API_KEY} and the card on file is {CARD}."
STREAM_MODES = [
    "values",
    "updates",
    "messages",
    "messages-tuple",
    "events",
    "debug",
    "tasks",
    "checkpoints",
    "custom",
]


@dataclass
class FakeOpenAI:
    """Answers every chat completion with ``TEXT`` (JSON, or SSE chunks if asked to stream)."""

    base_url: str = ""
    streamed_requests: int = 0
    requests: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def _handler(fake: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            with fake.lock:
                fake.requests += 1
                fake.streamed_requests += bool(body.get("stream"))
            created = int(time.time())
            if body.get("stream"):  # served too, so a leak shows as a leak rather than an error
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for piece in (TEXT[:20], TEXT[20:]):
                    chunk = {
                        "id": "chatcmpl-stream",
                        "object": "chat.completion.chunk",
                        "created": created,
                        "model": "gpt-4.1-mini",
                        "choices": [
                            {
                                "index": 0,
                                "delta": {"role": "assistant", "content": piece},
                                "finish_reason": None,
                            }
                        ],
                    }
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                return
            payload = {
                "id": "chatcmpl-secret",
                "object": "chat.completion",
                "created": created,
                "model": "gpt-4.1-mini",
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": TEXT}, "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 50, "completion_tokens": 20, "total_tokens": 70},
            }
            data = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


@pytest.fixture(scope="module")
def openai_endpoint() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    httpd.daemon_threads = True
    fake.base_url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, openai_endpoint: FakeOpenAI) -> Iterator[Server]:
    env = {
        "TOOLGATE_MODEL": "openai:gpt-4.1-mini",
        "TOOLGATE_OPENAI_API": "chat",  # the stand-in speaks Chat Completions
        "TOOLGATE_MODEL_BASE_URL": openai_endpoint.base_url,
        "OPENAI_API_KEY": "sk-test-not-a-real-key-000000000000",
    }
    with (
        pytest.MonkeyPatch.context() as mp,
        people_server(tmp_path_factory.mktemp("lgdev-stream"), env) as srv,
    ):
        mp.setenv("NO_PROXY", LOCAL_HOSTS)
        mp.setenv("no_proxy", LOCAL_HOSTS)
        yield srv


@pytest.mark.parametrize("mode", STREAM_MODES)
def test_no_stream_mode_carries_a_secret_the_state_redacts(
    server: Server, openai_endpoint: FakeOpenAI, mode: str
) -> None:
    with client_as(server, "cust-ada") as client:
        thread_id = client.threads.create()["thread_id"]
        parts = [
            json.dumps({"event": part.event, "data": part.data}, default=str)
            for part in client.runs.stream(
                thread_id,
                "toolgate",
                input={"messages": [{"role": "user", "content": "What is on file for me?"}]},
                stream_mode=mode,
            )
        ]
        state = client.threads.get_state(thread_id)
    streamed = "\n".join(parts)
    assert not [p for p in PLANTED if p in streamed], f"{mode} leaked a planted secret"
    stored = json.dumps(state["values"])
    assert not [p for p in PLANTED if p in stored] and "[REDACTED]" in stored
    assert not any(p.get("event") == "error" for p in map(json.loads, parts)), streamed[:2000]
    if mode in ("values", "updates", "messages", "messages-tuple", "debug", "tasks", "checkpoints", "events"):
        assert "[REDACTED]" in streamed, f"{mode} never showed the model's (redacted) answer"
    assert openai_endpoint.requests > 0 and openai_endpoint.streamed_requests == 0
