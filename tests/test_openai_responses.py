"""The Responses API across an approval, a checkpoint and a process restart, with the real client.

The real ``toolgate`` CLI runs in separate processes with the real ``ChatOpenAI`` (Responses API,
``store=False``) against the local replay server of tests/replay_openai.py. The model's first
response holds a reasoning item with encrypted content and a function call to the gated
``issue_refund``; the thread interrupts and that process exits. Another process approves as a
reviewer who is not the requester, and a third resumes. The request it sends carries the same
reasoning item and function call, byte for byte, then a ``function_call_output`` for the same
``call_id``; the refund ran once. The fake key reached the local server and nowhere else: not the
data directory, the checkpoints, the store's tables (audit included) nor any command's output.
The same on PostgreSQL. And the request options follow ``TOOLGATE_OPENAI_API`` and the model.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from provider_flows import OPENAI, Cli, check_refund_result, check_refunded_once
from replay_openai import (
    CHAT_PATH,
    FAKE_KEY,
    RESPONSES_PATH,
    ReplayServer,
    chat_completion,
    function_call_item,
    message_item,
    reasoning_item,
    response,
    usage,
)
from support import (
    REFUND_REQUEST,
    TEST_KEY,
    check_key_nowhere,
    log_text,
    open_test_store,
    principal,
    seed_people,
)

from toolgate.graph import Context
from toolgate.graph.bootstrap import initialize_store
from toolgate.models.selection import load_chat_model
from toolgate.releases.bundle import ReleaseEnv
from toolgate.store import SQLiteStore
from toolgate.testing import open_test_app
from toolgate.tools.demo.release import DEMO_RELEASES

MODEL = "gpt-5-mini"
"""Pinned by ops-tools/1.0.0 as ``openai:gpt-5-mini`` (its reviewed manifest)."""
SNAPSHOT = "gpt-5-mini-2025-08-07"
CALL_ID = "call_Rf8kQ2mZ7xYw3LbN"
ENCRYPTED = "gAAAAABoRf8kQ2mZ7xYw3LbN" + "Zm9yIHRoZSB0ZXN0IG9ubHk" * 12 + "=="
"""Opaque to the gateway: it must come back exactly as it went out."""
REFUND_ARGS = {"order_id": "O-5512", "amount_cents": 4999, "reason": "damaged"}
REASONING = reasoning_item("rs_0a1b2c3d4e5f60718293", ENCRYPTED, ["The order was damaged; propose a refund."])
CALL = function_call_item("fc_0a1b2c3d4e5f60718294", CALL_ID, "issue_refund", REFUND_ARGS)


def script() -> list[Any]:
    """Turn 1: reasoning, then the gated write. Turn 2 (after approval): a final answer."""
    return [
        response("resp_0a1b2c3d4e5f6071829a", [REASONING, CALL], model=SNAPSHOT, tokens=usage(912, 188, 128)),
        response(
            "resp_0a1b2c3d4e5f6071829b",
            [
                reasoning_item("rs_0a1b2c3d4e5f60718295", ENCRYPTED[::-1]),
                message_item("msg_0a1b2c3d4e5f60718296", "The refund of 49.99 USD for O-5512 went through."),
            ],
            model=SNAPSHOT,
            tokens=usage(1204, 41, 16),
        ),
    ]


@pytest.mark.parametrize(
    ("model", "api", "path", "options"),
    [
        (
            "gpt-5-mini",
            "responses",
            RESPONSES_PATH,
            {"store": False, "include": ["reasoning.encrypted_content"]},
        ),
        ("gpt-4.1-mini", "responses", RESPONSES_PATH, {"store": False}),  # no reasoning: not asked for it
        ("gpt-4.1-mini", "chat", CHAT_PATH, {}),
    ],
)
def test_the_api_and_its_options_follow_the_setting_and_the_model(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    model: str,
    api: str,
    path: str,
    options: dict[str, Any],
) -> None:
    OPENAI.local_only_here(monkeypatch)
    caplog.set_level(logging.DEBUG)  # every logger, the client's and httpx's debug output included
    if path == CHAT_PATH:
        reply = chat_completion(
            {"role": "assistant", "content": "hi"}, "stop", prompt_tokens=3, completion_tokens=1, suffix="9"
        )
    else:
        reply = response("resp_options", [message_item("msg_options", "hi")], model=model, tokens=usage(3, 1))
    with ReplayServer([reply], path=path) as replay:
        settings = OPENAI.settings(
            replay.base_url, data_dir=tmp_path, model=f"openai:{model}", openai_api=api
        )
        assert load_chat_model(settings).invoke("hello").text == "hi"
    [body] = replay.bodies()
    assert {k: body[k] for k in ("store", "include") if k in body} == options
    assert body["model"] == model and "previous_response_id" not in body
    assert replay.requests[0].headers["authorization"] == f"Bearer {FAKE_KEY}"
    assert caplog.records, "no client log records at DEBUG: the check below would be vacuous"
    assert FAKE_KEY not in log_text(caplog)


@pytest.mark.parametrize(
    ("api", "path", "store", "metadata"),
    [
        ("responses", RESPONSES_PATH, False, {"tool_release": "ops-tools/1.0.0"}),
        # Chat Completions refuses metadata without store (the replay server answers 400 like the
        # provider), and toolgate stores nothing at the provider: no metadata there
        ("chat", CHAT_PATH, None, None),
    ],
)
def test_every_request_through_the_gateway_names_its_release_in_metadata(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    api: str,
    path: str,
    store: bool | None,
    metadata: dict[str, str] | None,
) -> None:
    OPENAI.local_only_here(monkeypatch)
    if path == CHAT_PATH:
        reply = chat_completion(
            {"role": "assistant", "content": "hi"}, "stop", prompt_tokens=3, completion_tokens=1, suffix="8"
        )
    else:
        reply = response(
            "resp_release", [message_item("msg_release", "hi")], model="gpt-4.1-mini", tokens=usage(3, 1)
        )
    release = DEMO_RELEASES["ops-tools/1.0.0"]
    with ReplayServer([reply], path=path) as replay:
        settings = OPENAI.settings(
            replay.base_url, data_dir=tmp_path, model="openai:gpt-4.1-mini", openai_api=api
        )
        db = SQLiteStore(tmp_path / "t.sqlite", key=TEST_KEY)
        initialize_store(db, release)
        try:
            graph = open_test_app(
                model=load_chat_model(settings),
                tools=release.registry(ReleaseEnv(db, secret=b"test-secret")),
                policy=release.policy,
                store=db,
                start=False,
                checkpointer=InMemorySaver(),
            ).compiled()
            final = graph.invoke(
                {"messages": [HumanMessage("hello")]},
                {"configurable": {"thread_id": "t-release"}},
                context=Context(principal=principal("cust-ada")),
            )
        finally:
            db.close()
    assert final["status"] == "done"
    [body] = replay.bodies()
    assert body.get("store") is store and body.get("metadata") == metadata
    assert body["tools"]  # bound with the principal's tools (the metadata rides on the bound model)


@pytest.mark.slow
def test_reasoning_and_call_survive_approval_and_restart(tmp_path: Path, database_url: str | None) -> None:
    seed_people(tmp_path, database_url)
    with ReplayServer(script()) as replay:
        cli = Cli(OPENAI.cli_env(tmp_path, database_url, replay))
        proposal, _, _ = cli.refund_approved_and_resumed(replay, "t-responses", CALL_ID)
        cli.trace(proposal)
        assert "tamper_check=PASS" in cli("audit", "verify", "--as", "otto").stdout

    # ---- exactly two requests, both to the Responses API, with the fake key as the bearer token
    assert [(r.method, r.path) for r in replay.requests] == [("POST", RESPONSES_PATH)] * 2
    assert {r.headers["authorization"] for r in replay.requests} == {f"Bearer {FAKE_KEY}"}
    first, second = replay.bodies()

    # ---- request 1: stateless, reasoning asked for, strict tools of this customer, one call at a time
    assert (first["model"], first["store"], first["include"]) == (
        MODEL,
        False,
        ["reasoning.encrypted_content"],
    )
    assert first["parallel_tool_calls"] is False and first["tool_choice"] == "auto"
    assert first["metadata"] == second["metadata"] == {"tool_release": "ops-tools/1.0.0"}
    assert first["max_output_tokens"] == 800 and not first.get("stream")
    assert "previous_response_id" not in first
    assert sorted(t["name"] for t in first["tools"]) == ["issue_refund", "lookup_order"]
    for tool in first["tools"]:
        assert (tool["type"], tool["strict"], tool["parameters"]["additionalProperties"]) == (
            "function",
            True,
            False,
        )
    assert first["input"][-1] == {"content": REFUND_REQUEST, "role": "user", "type": "message"}

    # ---- request 2 (another process, after approval): the items back in order, then the result
    items = second["input"]
    assert items[: len(first["input"])] == first["input"]
    replayed = items[len(first["input"]) :]
    assert [i.get("type") for i in replayed] == ["reasoning", "function_call", "function_call_output"]
    assert json.dumps(replayed[0]) == json.dumps(REASONING)  # byte for byte, key order included
    assert json.dumps(replayed[1]) == json.dumps(CALL)
    output = replayed[2]
    assert set(output) == {"type", "call_id", "output"} and output["call_id"] == CALL_ID
    check_refund_result(output["output"])
    assert second["store"] is False and second["parallel_tool_calls"] is False

    # ---- the refund ran once
    with open_test_store(tmp_path, database_url) as store:
        check_refunded_once(store)

    # ---- the key is nowhere: data directory (checkpoints, store), database tables, command output
    check_key_nowhere(tmp_path, database_url, cli.printed(), key=FAKE_KEY, prefix="sk-test", kept=ENCRYPTED)
