"""A local stand-in for OpenAI's HTTP API, for tests of the real ``langchain-openai`` client.

A stdlib HTTP server on 127.0.0.1 (port 0) replays a script of replies, in order, to POSTs on one
path (``/v1/responses`` or ``/v1/chat/completions``) and records every request it receives
(method, path, headers, parsed JSON body), so tests assert the exact bodies the client sends. No
network and no real key. A request past the end of the script is answered 400 (never retried by
the gateway, so an unexpected extra request shows as a failure, not a hang); any other path is
answered 404. Like the provider, Chat Completions refuses ``metadata`` unless ``store`` is on (400).

Responses API payloads are built from the ``openai`` SDK's own response types
(``ResponseReasoningItem``, ``ResponseFunctionToolCall``, ``ResponseOutputMessage``,
``ResponseUsage``, ``Response``): an item is that type dumped without its ``None`` fields, as the
API sends it, and a whole response is validated by ``Response`` before it is served.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from openai.types.responses import (
    Response,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
    ResponseUsage,
)

FAKE_KEY = "sk-test-not-a-real-key-0000000000"
"""The only key the clients are given: it may reach the local server, and nothing else."""
RESPONSES_PATH = "/v1/responses"
CHAT_PATH = "/v1/chat/completions"
PROXY_VARIABLES = (
    *("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"),
    *("OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID", "OPENAI_ORGANIZATION", "OPENAI_API_KEY"),
)
"""Variables that could send a client anywhere but the local server, or with another key."""


def local_only(env: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """``env`` without proxies or other OpenAI settings, with the fake key and 127.0.0.1 unproxied."""
    for name in PROXY_VARIABLES:
        env.pop(name, None)
    env.update({"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"})
    env["OPENAI_API_KEY"] = FAKE_KEY
    return env


def local_only_here(monkeypatch: Any) -> None:
    """This process's environment made `local_only` (``monkeypatch`` undoes it after the test)."""
    wanted = local_only(dict(os.environ))
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name in ("NO_PROXY", "no_proxy", "OPENAI_API_KEY"):
        monkeypatch.setenv(name, wanted[name])


# --------------------------------------------------------------------------- replies


@dataclass(frozen=True)
class Reply:
    """One scripted answer: an HTTP status and its JSON body."""

    status: int
    body: Mapping[str, Any]
    text: str | None = None
    """The body exactly as sent, when set: JSON no encoder here can write (nested past the
    recursion limit); ``body`` then only names it for the test."""


def error_reply(status: int, message: str, type_: str, code: str | None) -> Reply:
    """An error in OpenAI's shape (``{"error": {message, type, param, code}}``)."""
    return Reply(status, {"error": {"message": message, "type": type_, "param": None, "code": code}})


RATE_LIMITED = error_reply(
    429, "Rate limit reached for gpt-5-mini on requests per min (RPM): Limit 3, Used 3, Requested 1.",
    "requests", "rate_limit_exceeded",
)  # fmt: skip
SERVER_ERROR = error_reply(
    500, "The server had an error while processing your request.", "server_error", None
)
UNAVAILABLE = error_reply(
    503, "The engine is currently overloaded, please try again later.", "server_error", None
)
BAD_REQUEST = error_reply(400, "Invalid value for 'input'.", "invalid_request_error", "invalid_value")
UNAUTHORIZED = error_reply(
    401, "Incorrect API key provided: sk-test-********************0000.", "invalid_request_error", "invalid_api_key"
)  # fmt: skip


def reasoning_item(item_id: str, encrypted_content: str, summary: Sequence[str] = ()) -> dict[str, Any]:
    """A reasoning output item with its encrypted content (what ``store=False`` replays)."""
    item = ResponseReasoningItem(
        id=item_id,
        type="reasoning",
        summary=[{"type": "summary_text", "text": text} for text in summary],  # type: ignore[misc]
        encrypted_content=encrypted_content,
    )
    return item.model_dump(mode="json", exclude_none=True)


def function_call_item(item_id: str, call_id: str, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """A completed function call output item (``arguments`` is sent as compact JSON text)."""
    item = ResponseFunctionToolCall(
        id=item_id,
        type="function_call",
        call_id=call_id,
        name=name,
        arguments=json.dumps(arguments, separators=(",", ":")),
        status="completed",
    )
    return item.model_dump(mode="json", exclude_none=True)


def message_item(item_id: str, text: str) -> dict[str, Any]:
    """An assistant message output item holding one ``output_text`` part."""
    item = ResponseOutputMessage(
        id=item_id,
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )
    return item.model_dump(mode="json", exclude_none=True)


def usage(input_tokens: int, output_tokens: int, reasoning_tokens: int = 0) -> dict[str, Any]:
    """A response's token usage, reasoning tokens counted inside the output tokens."""
    figures = ResponseUsage.model_validate(
        {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
            "total_tokens": input_tokens + output_tokens,
        }
    )
    return figures.model_dump(mode="json", exclude_none=True)


def response(
    response_id: str, output: Sequence[Mapping[str, Any]], *, model: str, tokens: Mapping[str, Any]
) -> Reply:
    """A completed, non-streamed Responses API response, validated by the SDK's ``Response``."""
    body = {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "max_output_tokens": None,
        "model": model,
        "output": [dict(item) for item in output],
        "parallel_tool_calls": False,
        "previous_response_id": None,
        "reasoning": {"effort": "medium", "summary": None},
        "store": False,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": dict(tokens),
        "user": None,
        "metadata": {},
    }
    Response.model_validate(body)
    return Reply(200, body)


def chat_completion(
    message: Mapping[str, Any], finish_reason: str, *, prompt_tokens: int, completion_tokens: int, suffix: str
) -> Reply:
    """A Chat Completions response with one choice."""
    return Reply(
        200,
        {
            "id": f"chatcmpl-toolgatewire{suffix}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": "gpt-4.1-mini-2025-04-14",
            "system_fingerprint": "fp_toolgate_wire",
            "service_tier": "default",
            "choices": [
                {"index": 0, "message": dict(message), "logprobs": None, "finish_reason": finish_reason}
            ],
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
        },
    )


# --------------------------------------------------------------------------- the server


@dataclass
class Recorded:
    """One request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class ReplayServer:
    """The scripted endpoint; ``base_url`` ends in ``/v1`` like the real one. Use as a context
    manager (it serves between enter and exit)."""

    script: list[Reply]
    path: str = RESPONSES_PATH
    base_url: str = ""
    requests: list[Recorded] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    def bodies(self) -> list[dict[str, Any]]:
        """The JSON bodies received on the scripted path, in order."""
        with self.lock:
            return [r.body for r in self.requests if r.path == self.path]

    def __enter__(self) -> ReplayServer:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        self._thread = threading.Thread(target=server.serve_forever, name="replay-openai", daemon=True)
        self._server = server
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def answer(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> Reply:
        """Record one request and pick its reply."""
        with self.lock:
            self.requests.append(Recorded("POST", path, headers, body))
            if path != self.path:
                return error_reply(404, f"unexpected path {path}", "invalid_request_error", None)
            if body.get("stream"):
                return error_reply(400, "streaming is not scripted", "invalid_request_error", None)
            if path == CHAT_PATH and "metadata" in body and body.get("store") is not True:
                # the provider's own rule for Chat Completions (the Responses API has no such rule)
                message = "The 'metadata' parameter is only allowed when 'store' is enabled."
                return error_reply(400, message, "invalid_request_error", None)
            if not self.script:
                return error_reply(400, "unscripted request", "invalid_request_error", None)
            return self.script.pop(0)


def _handler(replay: ReplayServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
            return

        def _send(self, reply: Reply) -> None:
            data = (reply.text if reply.text is not None else json.dumps(reply.body)).encode("utf-8")
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("x-request-id", f"req_replay_{len(replay.requests)}")
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = {"_unparseable": raw.decode("utf-8", "replace")}
            headers = {k.lower(): v for k, v in self.headers.items()}
            self._send(replay.answer(self.path, headers, body))

        def do_GET(self) -> None:
            self._send(error_reply(404, f"unexpected GET {self.path}", "invalid_request_error", None))

    return Handler
