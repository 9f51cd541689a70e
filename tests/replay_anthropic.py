"""Anthropic's Messages API on the local replay server, for tests of the real ``ChatAnthropic``.

The server is `replay_openai.ReplayServer` (stdlib HTTP on 127.0.0.1, port 0, scripted replies in
order, every request recorded) serving ``POST /v1/messages``; this module adds what is Anthropic's
own: the replies, the error bodies and the environment. Payloads are built from the ``anthropic``
SDK's own types: a content block is ``ThinkingBlock`` / ``RedactedThinkingBlock`` / ``TextBlock`` /
``ToolUseBlock`` dumped without its ``None`` fields, as the API sends it; a whole response is
validated by ``Message`` and an error by ``ErrorResponse`` before they are served.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

from anthropic.types import (
    ErrorResponse,
    Message,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    Usage,
)
from replay_openai import ReplayServer, Reply

FAKE_KEY = "sk-ant-api03-test-not-a-real-key-000000000000"
"""The only key ``ChatAnthropic`` is given: it may reach the local server, and nothing else."""
MESSAGES_PATH = "/v1/messages"
MODEL = "claude-sonnet-4-5"
"""The model the demo releases pin (``anthropic:claude-sonnet-4-5``)."""
SERVED_MODEL = "claude-sonnet-4-5-20250929"
"""What the API names in its responses (the dated snapshot behind the alias)."""


def local_only(env: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """``env`` without proxies or any other Anthropic or gateway setting, with the fake key and
    127.0.0.1 unproxied (for a subprocess)."""
    for name in list(env):
        if name.startswith(("ANTHROPIC_", "LANGSMITH_GATEWAY")) or name.lower().endswith("_proxy"):
            env.pop(name)
    env.update({"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"})
    env["ANTHROPIC_API_KEY"] = FAKE_KEY
    return env


def local_only_here(monkeypatch: Any) -> None:
    """This process's environment made `local_only` (``monkeypatch`` undoes it after the test)."""
    wanted = local_only(dict(os.environ))
    for name in set(os.environ) - set(wanted):
        monkeypatch.delenv(name, raising=False)
    for name in ("NO_PROXY", "no_proxy", "ANTHROPIC_API_KEY"):
        monkeypatch.setenv(name, wanted[name])


def messages_server(script: Sequence[Reply]) -> ReplayServer:
    """The replay server answering ``POST /v1/messages`` with ``script`` (enter it to serve)."""
    return ReplayServer(list(script), path=MESSAGES_PATH)


def root_url(server: ReplayServer) -> str:
    """The server's base URL as the Anthropic client takes it (the client adds ``/v1/messages``)."""
    return server.base_url.removesuffix("/v1")


# --------------------------------------------------------------------------- content blocks


def _dumped(block: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = block.model_dump(mode="json", exclude_none=True)
    return dumped


def thinking_block(thinking: str, signature: str) -> dict[str, Any]:
    """A ``thinking`` block with its signature (what the next request must carry back as it is)."""
    return _dumped(ThinkingBlock(type="thinking", thinking=thinking, signature=signature))


def redacted_thinking_block(data: str) -> dict[str, Any]:
    """A ``redacted_thinking`` block: opaque, encrypted ``data`` only."""
    return _dumped(RedactedThinkingBlock(type="redacted_thinking", data=data))


def text_block(text: str) -> dict[str, Any]:
    """A ``text`` block without citations."""
    return _dumped(TextBlock(type="text", text=text))


def tool_use_block(tool_use_id: str, name: str, tool_input: Mapping[str, Any]) -> dict[str, Any]:
    """A ``tool_use`` block (``input`` is a JSON object, not text)."""
    return _dumped(ToolUseBlock(type="tool_use", id=tool_use_id, name=name, input=dict(tool_input)))


def usage(input_tokens: int, output_tokens: int) -> dict[str, Any]:
    """A response's token usage (thinking tokens are counted inside ``output_tokens``)."""
    figures = Usage.model_validate(
        {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
            "service_tier": "standard",
        }
    )
    return _dumped(figures)


def message(
    message_id: str,
    content: Sequence[Mapping[str, Any]],
    *,
    stop_reason: str,
    tokens: Mapping[str, Any],
    model: str = SERVED_MODEL,
) -> Reply:
    """A complete, non-streamed Messages API response, validated by the SDK's ``Message``."""
    body = {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [dict(block) for block in content],
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": dict(tokens),
    }
    Message.model_validate(body)
    return Reply(200, body)


# --------------------------------------------------------------------------- errors


def error_reply(status: int, type_: str, text: str) -> Reply:
    """An error in Anthropic's shape (``{"type": "error", "error": {type, message}, request_id}``)."""
    body = {"type": "error", "error": {"type": type_, "message": text}, "request_id": f"req_replay_{status}"}
    ErrorResponse.model_validate(body)
    return Reply(status, body)


RATE_LIMITED = error_reply(
    429, "rate_limit_error", "This request would exceed the rate limit for your organization of 50 requests per minute."
)  # fmt: skip
OVERLOADED = error_reply(529, "overloaded_error", "Overloaded")
API_ERROR = error_reply(500, "api_error", "Internal server error")
INVALID_REQUEST = error_reply(
    400, "invalid_request_error", "messages.1.content.0.thinking.signature: Invalid `signature` in `thinking` block"
)  # fmt: skip
UNAUTHORIZED = error_reply(401, "authentication_error", "invalid x-api-key")


# --------------------------------------------------------------------------- reading requests


def blocks_of(body: Mapping[str, Any], role: str) -> list[list[dict[str, Any]]]:
    """The content blocks of every ``role`` message in a request body (a string as one text block)."""
    out: list[list[dict[str, Any]]] = []
    for item in body["messages"]:
        if item["role"] == role:
            content = item["content"]
            out.append([{"type": "text", "text": content}] if isinstance(content, str) else list(content))
    return out


__all__ = [
    "API_ERROR",
    "FAKE_KEY",
    "INVALID_REQUEST",
    "MESSAGES_PATH",
    "MODEL",
    "OVERLOADED",
    "RATE_LIMITED",
    "SERVED_MODEL",
    "UNAUTHORIZED",
    "blocks_of",
    "error_reply",
    "local_only",
    "local_only_here",
    "message",
    "messages_server",
    "redacted_thinking_block",
    "root_url",
    "text_block",
    "thinking_block",
    "tool_use_block",
    "usage",
]
