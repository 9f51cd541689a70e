"""Anthropic thinking blocks across an approval, a checkpoint and a process restart, with the real client.

The real ``toolgate`` CLI runs in separate processes with the real ``ChatAnthropic`` (extended
thinking on) against the local Messages API replay of tests/replay_anthropic.py. The model's first
response holds a signed ``thinking`` block, a ``redacted_thinking`` block, some text and a
``tool_use`` of the gated ``issue_refund``; the thread interrupts and that process exits. Another
process approves as a reviewer who is not the requester, and a third resumes: the refund runs, the
next model request is rate limited (429) once and sent again. That request carries the same
blocks, the thinking block and its signature byte for byte, then a ``tool_result`` for the same
``tool_use`` id; the refund ran once. The fake key reached the local server and nowhere else: not
the data directory, the checkpoints, the store's tables (audit included) nor any command's output.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from provider_flows import ANTHROPIC, Cli, check_refund_result, check_refunded_once
from replay_anthropic import (
    FAKE_KEY,
    MESSAGES_PATH,
    MODEL,
    RATE_LIMITED,
    blocks_of,
    message,
    redacted_thinking_block,
    text_block,
    thinking_block,
    tool_use_block,
    usage,
)
from support import REFUND_REQUEST, audit_events, check_key_nowhere, open_test_store, seed_people

from toolgate.releases.bundle import INSTRUCTIONS

pytestmark = pytest.mark.slow

TOOL_USE_ID = "toolu_01KxQ7bWm3RfZ9pLdT2sYvNa"
SIGNATURE = "EqQBCkgIBxABGAIqQG5vdC1hLXJlYWwtc2lnbmF0dXJl" + "dGhpbmtpbmcgYmxvY2sgc2lnbmF0dXJl" * 10 + "GAE="
"""Opaque to the gateway: it must come back exactly as it went out."""
REDACTED = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT" + "cmVkYWN0ZWQgdGhpbmtpbmcgZGF0YQ" * 8 + "=="
THINKING = thinking_block(
    "The customer says order O-5512 arrived broken. Refund the full 4999 cents as damaged; "
    "the gateway will hold it for a reviewer.",
    SIGNATURE,
)
REDACTED_THINKING = redacted_thinking_block(REDACTED)
TEXT = text_block("I'll request a refund of 49.99 USD for order O-5512.")
REFUND_ARGS = {"order_id": "O-5512", "amount_cents": 4999, "reason": "damaged"}
TOOL_USE = tool_use_block(TOOL_USE_ID, "issue_refund", REFUND_ARGS)
THINKING_TOKENS = ANTHROPIC.thinking_tokens


def script() -> list[Any]:
    """Turn 1: thinking, then the gated write. After approval: one 429, then a final answer."""
    return [
        message(
            "msg_01Hq5TfWzV3kE8yXo2LnMcRd",
            [THINKING, REDACTED_THINKING, TEXT, TOOL_USE],
            stop_reason="tool_use",
            tokens=usage(1342, 211),
        ),
        RATE_LIMITED,
        message(
            "msg_01Zc4NvB8sPq6JtYr1XgWhKe",
            [text_block("The refund of 49.99 USD for O-5512 went through.")],
            stop_reason="end_turn",
            tokens=usage(1618, 19),
        ),
    ]


def test_thinking_and_tool_use_survive_approval_and_restart(tmp_path: Path, database_url: str | None) -> None:
    seed_people(tmp_path, database_url)
    with ANTHROPIC.serve(script()) as replay:
        cli = Cli(ANTHROPIC.cli_env(tmp_path, database_url, replay))
        proposal, _, _ = cli.refund_approved_and_resumed(replay, "t-anthropic", TOOL_USE_ID)
        cli.trace(proposal)
        assert "tamper_check=PASS" in cli("audit", "verify", "--as", "otto").stdout

    # ---- three requests to the Messages API: turn 1, then the 429 and its one retry
    assert [(r.method, r.path) for r in replay.requests] == [("POST", MESSAGES_PATH)] * 3
    assert {r.headers.get("x-api-key") or r.headers["authorization"] for r in replay.requests} <= {
        FAKE_KEY,
        f"Bearer {FAKE_KEY}",
    }
    first, limited, second = replay.bodies()
    assert limited == second  # the retry sends the same request again, nothing more

    # ---- request 1: bounded, thinking on, only this customer's tools, one tool use at a time
    assert (first["model"], first["max_tokens"]) == (MODEL, 800 + THINKING_TOKENS)
    assert first["thinking"] == {"type": "enabled", "budget_tokens": THINKING_TOKENS}
    assert first["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    assert not first.get("stream")
    assert sorted(t["name"] for t in first["tools"]) == ["issue_refund", "lookup_order"]
    assert all(set(t) == {"name", "description", "input_schema"} for t in first["tools"])
    assert first["system"] == INSTRUCTIONS
    assert first["messages"] == [{"role": "user", "content": REFUND_REQUEST}]

    # ---- request 2 (another process, after approval): the blocks back in order, then the result
    assert second["messages"][0] == first["messages"][0]
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]
    (assistant,) = blocks_of(second, "assistant")
    assert [b["type"] for b in assistant] == ["thinking", "redacted_thinking", "text", "tool_use"]
    assert json.dumps(assistant[0], sort_keys=True) == json.dumps(THINKING, sort_keys=True)
    assert assistant[0]["signature"] == SIGNATURE
    assert assistant[1] == REDACTED_THINKING and assistant[1]["data"] == REDACTED
    assert assistant[2] == TEXT
    assert assistant[3] == TOOL_USE
    (result_block,) = blocks_of(second, "user")[1]
    assert (result_block["type"], result_block["tool_use_id"], result_block["is_error"]) == (
        "tool_result",
        TOOL_USE_ID,
        False,
    )
    check_refund_result(result_block["content"])
    assert (second["thinking"], second["tool_choice"]) == (first["thinking"], first["tool_choice"])

    # ---- the refund ran once; the 429 is in the audit log, as one retry of the model request
    with open_test_store(tmp_path, database_url) as store:
        check_refunded_once(store)
        retries = audit_events(store, "model.retry")
        assert [(e.code, e.thread_id) for e in retries] == [("http_429", "t-anthropic")]

    # ---- the key is nowhere: data directory (checkpoints, store), database tables, command output
    check_key_nowhere(tmp_path, database_url, cli.printed(), key=FAKE_KEY, prefix="sk-ant", kept=SIGNATURE)
