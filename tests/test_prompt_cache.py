"""Prompt caching with the real clients (issue 16, item 4): every request of one release and tool
set starts with the same bytes (instructions, then the tools in a fixed order), and each provider
is given its cache control: OpenAI a ``prompt_cache_key`` that names the release and the tool set
but never a tenant or a person, Anthropic the top-level ``cache_control`` breakpoint. Against the
local replays of both wire formats (tests/replay_openai.py, tests/replay_anthropic.py)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import replay_anthropic
from provider_flows import ANTHROPIC, OPENAI, Provider
from replay_openai import Reply, function_call_item, message_item, response, usage
from support import TEST_KEY, Harness, start

from toolgate.graph.nodes.prompt_cache import prefix_digest
from toolgate.store import SQLiteStore


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    store = SQLiteStore(tmp_path / "toolgate.sqlite", key=TEST_KEY)
    try:
        yield Harness(store)
    finally:
        store.close()


def _openai_script() -> list[Reply]:
    lookup = function_call_item("fc_cache_1", "call_cache_1", "lookup_order", {"order_id": "O-5512"})
    return [
        response("resp_cache_1", [lookup], model="gpt-5-mini", tokens=usage(900, 20)),
        *(
            response(
                f"resp_cache_{n}",
                [message_item(f"msg_cache_{n}", "Done.")],
                model="gpt-5-mini",
                tokens=usage(950, 5),
            )
            for n in range(2, 5)
        ),
    ]


def _anthropic_script() -> list[Reply]:
    tokens = replay_anthropic.usage(900, 20)
    lookup = replay_anthropic.tool_use_block("toolu_cache_1", "lookup_order", {"order_id": "O-5512"})
    done = [replay_anthropic.text_block("Done.")]
    return [
        replay_anthropic.message("msg_cache_1", [lookup], stop_reason="tool_use", tokens=tokens),
        *(
            replay_anthropic.message(f"msg_cache_{n}", done, stop_reason="end_turn", tokens=tokens)
            for n in range(2, 5)
        ),
    ]


def _prefix(provider: Provider, body: dict[str, Any]) -> tuple[Any, list[str]]:
    """What a request starts with: its instructions and its tools' names, in order."""
    if provider is OPENAI:
        return body["input"][0], [t["name"] for t in body["tools"]]
    return body["system"], [t["name"] for t in body["tools"]]


@pytest.mark.parametrize(("provider", "script"), [(OPENAI, _openai_script), (ANTHROPIC, _anthropic_script)])
def test_requests_share_a_stable_prefix_and_carry_the_providers_cache_control(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, provider: Provider, script: Any
) -> None:
    provider.local_only_here(monkeypatch)
    with provider.serve(script()) as replay:
        graph = provider.graph(harness, replay)
        start(graph, "where is my order O-5512?", "cust-ada", "t-cache-ada")  # two rounds
        start(graph, "where is my order O-7001?", "cust-gina", "t-cache-gina")  # another tenant, same tools
        start(graph, "is the web service up?", "omar", "t-cache-omar")  # other tools
    ada_1, ada_2, gina, omar = replay.bodies()

    # one tool set: the same instructions and tools, in the same order, in every request
    assert _prefix(provider, ada_1) == _prefix(provider, ada_2) == _prefix(provider, gina)
    instructions, customer_tools = _prefix(provider, ada_1)
    assert customer_tools == ["issue_refund", "lookup_order"]  # sorted by name, whatever order they came in
    assert _prefix(provider, omar)[0] == instructions and _prefix(provider, omar)[1] != customer_tools
    for body in (ada_1, ada_2, gina, omar):
        text = str(_prefix(provider, body))
        assert not any(who in text for who in ("cust-ada", "cust-gina", "omar", "acme", "globex"))

    if provider is OPENAI:
        keys = [body["prompt_cache_key"] for body in (ada_1, ada_2, gina, omar)]
        assert keys[0] == keys[1] == keys[2] != keys[3]
        assert re.fullmatch(r"toolgate:ops-tools/1\.0\.0:[0-9a-f]{16}", keys[0]), keys[
            0
        ]  # the harness's release
        assert not any(who in key for key in keys for who in ("ada", "gina", "omar", "acme", "globex"))
        assert "cache_control" not in ada_1
    else:
        for body in (ada_1, ada_2, gina, omar):
            assert body["cache_control"] == {"type": "ephemeral"} and "prompt_cache_key" not in body


def test_the_key_changes_with_the_instructions_and_the_tool_set_only() -> None:
    base = prefix_digest("Be careful.", ["lookup_order", "issue_refund"])
    assert base == prefix_digest("Be careful.", ["lookup_order", "issue_refund"])
    assert base != prefix_digest("Be careful!", ["lookup_order", "issue_refund"])
    assert base != prefix_digest("Be careful.", ["issue_refund", "lookup_order"])
    assert base != prefix_digest("Be careful.", ["lookup_order"])
