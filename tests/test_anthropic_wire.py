"""The real ``ChatAnthropic`` through the gateway, against the local Messages API replay.

No internet and no real key: tests/replay_anthropic.py answers ``POST /v1/messages`` with
responses built from the ``anthropic`` SDK's types and records every request, so the assertions are
about the bytes toolgate makes ``ChatAnthropic`` send: only the principal's tools, one tool use at a
time when the release writes, thinking blocks (with their signatures) and ``redacted_thinking``
blocks sent back unchanged, and each result as a ``tool_result`` for its exact ``tool_use`` id. Also
how the model is built (bounded, no client retries, thinking by setting) and how a provider that
cannot be used is refused at startup in one line.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import sys
from pathlib import Path

import pytest
from langchain_anthropic import ChatAnthropic
from langchain_core.messages import HumanMessage
from provider_flows import ANTHROPIC, local_harness, run_task
from replay_anthropic import (
    FAKE_KEY,
    MODEL,
    blocks_of,
    local_only_here,
    message,
    redacted_thinking_block,
    text_block,
    thinking_block,
    tool_use_block,
    usage,
)
from support import Harness, cli_env, files_holding, log_text, principal, toolgate

from toolgate.config import Settings
from toolgate.errors import ConfigurationError
from toolgate.models.selection import load_chat_model
from toolgate.policy.authorization import visible_tools
from toolgate.testing import open_test_app
from toolgate.tools.registry import Registry

TOOL_USE_ID = "toolu_01WireLookupQ7x2Rm5Kp9Tz"
SIGNATURE = "EqQBCkgIBxABGAIqQHdpcmUtdGVzdC1zaWduYXR1cmU" + "b3BhcXVlIHRvIHRoZSBnYXRld2F5" * 8 + "GAE="
CARD = "4111 1111 1111 1111"
THINKING = thinking_block(f"Look the order up first. The card {CARD} is not needed for that.", SIGNATURE)
"""Its words look like a secret; it is signed, so it goes back as it came (never redacted)."""
REDACTED_THINKING = redacted_thinking_block("EmwKAhgBEgy3va3pzix/LafPsn4aDFIT" + "d2lyZS1yZWRhY3RlZA" * 6)
LOOKUP = {"order_id": "O-5512"}
READ_TURN = message(
    "msg_01WireReadTurnA8s7d6f5",
    [THINKING, REDACTED_THINKING, text_block("Let me look that up."), tool_use_block(TOOL_USE_ID, "lookup_order", LOOKUP)],
    stop_reason="tool_use",
    tokens=usage(812, 143),
)  # fmt: skip
ANSWER = message(
    "msg_01WireAnswerB9t8e7g6",
    [text_block("Order O-5512 (Blender B-200) was delivered.")],
    stop_reason="end_turn",
    tokens=usage(1020, 15),
)
THREAD = "t-anthropic-wire"


harness = local_harness(ANTHROPIC)


# --------------------------------------------------------------------------- construction


def test_chat_anthropic_is_bounded_and_leaves_retries_to_toolgate(monkeypatch: pytest.MonkeyPatch) -> None:
    local_only_here(monkeypatch)
    monkeypatch.setenv("LC_OUTPUT_VERSION", "v1")  # would rebuild thinking blocks on the way back
    model = load_chat_model(ANTHROPIC.settings("http://127.0.0.1:9", model_thinking_tokens=2048))
    assert isinstance(model, ChatAnthropic)
    assert (model.model, model.max_tokens, model.max_retries, model.default_request_timeout) == (
        MODEL,
        800 + 2048,
        0,
        60.0,
    )
    assert model.thinking == {"type": "enabled", "budget_tokens": 2048}
    assert (model.anthropic_api_url, model.output_version) == ("http://127.0.0.1:9", "v0")
    assert FAKE_KEY not in repr(model) and FAKE_KEY not in str(model.model_dump())

    plain = load_chat_model(ANTHROPIC.settings(None, model_thinking_tokens=0))
    assert isinstance(plain, ChatAnthropic)
    assert (plain.max_tokens, plain.thinking) == (800, None)
    assert plain.anthropic_api_url == "https://api.anthropic.com"


# --------------------------------------------------------------------------- the wire


def test_thinking_blocks_go_back_unchanged_and_the_result_answers_its_tool_use_id(
    harness: Harness, tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, the anthropic and httpx debug output included
    final, replay = run_task(ANTHROPIC, harness, [READ_TURN, ANSWER], "where is my order O-5512?", THREAD)
    first, second = replay.bodies()

    # request 1: exactly this customer's tools, as Anthropic definitions, one tool use at a time
    specs = visible_tools(harness.registry, principal("cust-ada"))
    assert sorted(t["name"] for t in first["tools"]) == ["issue_refund", "lookup_order"]
    assert first["tools"] == harness.registry.anthropic_tools(specs)
    assert harness.registry.has_stateful_writes()
    assert first["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    assert (first["max_tokens"], first["thinking"]) == (1824, {"type": "enabled", "budget_tokens": 1024})

    # request 2: the thinking blocks byte for byte, the text, the call, then its result
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]
    (assistant,) = blocks_of(second, "assistant")
    assert json.dumps(assistant[0], sort_keys=True) == json.dumps(THINKING, sort_keys=True)
    assert assistant[0]["thinking"] == THINKING["thinking"]  # the card number in it is not redacted
    assert assistant[1] == REDACTED_THINKING
    assert assistant[2:] == [
        {"type": "text", "text": "Let me look that up."},
        {"type": "tool_use", "id": TOOL_USE_ID, "name": "lookup_order", "input": LOOKUP},
    ]
    (result,) = blocks_of(second, "user")[1]
    assert (result["type"], result["tool_use_id"], result["is_error"]) == ("tool_result", TOOL_USE_ID, False)
    assert json.loads(result["content"])["data"]["order_id"] == "O-5512"
    assert second["tools"] == first["tools"] and second["tool_choice"] == first["tool_choice"]

    assert harness.handler_calls == {"lookup_order": 1}
    assert final["status"] == "done" and final["outcomes"][TOOL_USE_ID]["status"] == "completed"
    assert "delivered" in final["messages"][-1].content

    assert any(r.name.startswith("anthropic") for r in caplog.records)  # the scan below reads client logs
    printed = capsys.readouterr()
    assert FAKE_KEY not in log_text(caplog) + printed.out + printed.err
    assert files_holding(tmp_path, FAKE_KEY) == []


def test_screening_keeps_thinking_and_drops_what_it_refused(harness: Harness) -> None:
    secret_args = {"order_id": "O-5512", "note": "api_key=sk-AbCdEf0123456789GhIjKlMn"}
    turn = message(
        "msg_01WireSecretTurnC1u2",
        [THINKING, text_block(f"Your card {CARD} is on file."), tool_use_block(TOOL_USE_ID, "lookup_order", secret_args)],
        stop_reason="tool_use",
        tokens=usage(700, 60),
    )  # fmt: skip
    final, replay = run_task(ANTHROPIC, harness, [turn, ANSWER], "where is my order O-5512?", THREAD)
    _, second = replay.bodies()
    (assistant,) = blocks_of(second, "assistant")
    assert json.dumps(assistant[0], sort_keys=True) == json.dumps(THINKING, sort_keys=True)
    assert assistant[1] == {"type": "text", "text": "Your card [REDACTED] is on file."}
    assert assistant[2] == {"type": "tool_use", "id": TOOL_USE_ID, "name": "lookup_order", "input": {}}
    (refusal,) = blocks_of(second, "user")[1]
    assert (refusal["type"], refusal["tool_use_id"], refusal["is_error"]) == (
        "tool_result",
        TOOL_USE_ID,
        True,
    )
    assert "secret_in_arguments" in refusal["content"]
    assert "sk-AbCdEf" not in json.dumps(second)
    assert harness.total_handler_calls() == 0 and final["status"] == "done"


def test_parallel_tool_use_stays_on_when_the_release_never_writes(harness: Harness) -> None:
    reads = [s for s in harness.registry.tools.values() if not s.is_write]
    registry = Registry.of(harness.registry.release, reads, harness.system)
    assert reads and not registry.has_stateful_writes()
    with ANTHROPIC.serve([ANSWER]) as replay:
        model = ANTHROPIC.model_on(replay)
        gateway = open_test_app(
            model=model, tools=registry, policy=harness.policy, store=harness.store, start=False
        ).gateway
        gateway.model_for(reads).invoke([HumanMessage("is the web service up?")])
    (body,) = replay.bodies()
    assert body["tool_choice"] == {"type": "auto"}
    assert sorted(t["name"] for t in body["tools"]) == sorted(s.wire_name for s in reads)


# --------------------------------------------------------------------------- refusals at startup


def test_without_langchain_anthropic_the_model_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "langchain_anthropic", None)  # as if the extra were not installed
    with pytest.raises(ConfigurationError) as refused:
        load_chat_model(ANTHROPIC.settings(None))
    assert str(refused.value) == (
        f"model 'anthropic:{MODEL}' needs the langchain-anthropic package: "
        "pip install 'langgraph-toolgate[anthropic]'"
    )


def test_another_provider_without_its_package_is_refused_in_one_line() -> None:
    assert importlib.util.find_spec("langchain_mistralai") is None  # the premise of this test
    settings = Settings(data_dir=Path("."), model="mistralai:mistral-large-latest", allow_model_requests=True)
    with pytest.raises(ConfigurationError) as refused:
        load_chat_model(settings)
    text = str(refused.value)
    assert "\n" not in text and text.startswith("model 'mistralai:mistral-large-latest' refused: ")
    assert "langchain-mistralai" in text


@pytest.mark.slow
def test_the_cli_refuses_an_unpinned_model_and_a_pinned_one_it_cannot_load(tmp_path: Path) -> None:
    model = "mistralai:mistral-large-latest"
    (tmp_path / "data").mkdir()
    toolgate(["init"], cli_env(tmp_path / "data"))  # commands other than init and demo create no store
    unpinned = toolgate(
        ["run", "hello", "--as", "cust-ada"],
        dict(cli_env(tmp_path / "data"), TOOLGATE_MODEL=model, TOOLGATE_RELEASE="ops-tools/1.0.0"),
        check=False,
    )
    assert unpinned.returncode == 2 and unpinned.stdout == ""
    (line,) = unpinned.stderr.splitlines()
    assert line.startswith('error=registry_invalid message="model ') and "is not pinned by release" in line
    assert "anthropic:claude-sonnet-4-5" in line  # the pins it names include the Anthropic one

    toolgate(["release", "init", "acme-tools"], dict(cli_env(tmp_path), TOOLGATE_DATA_DIR=str(tmp_path)))
    manifest_path = tmp_path / "acme-tools" / "acme_tools" / "manifest.json"
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    manifest["pinned_models"] = sorted([*manifest["pinned_models"], model])
    manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    release = f"{tmp_path / 'acme-tools' / 'acme_tools' / 'release.py'}:release"
    missing = toolgate(
        ["run", "hello", "--as", "cust-ada"],
        dict(cli_env(tmp_path / "data"), TOOLGATE_MODEL=model, TOOLGATE_RELEASE=release),
        check=False,
    )
    assert missing.returncode == 2 and missing.stdout == "", missing.stderr
    (line,) = missing.stderr.splitlines()
    assert line.startswith(f"error=configuration_error message=\"model '{model}' refused: "), line
    assert "langchain-mistralai" in line
