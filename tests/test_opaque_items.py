"""Screening a model response leaves the provider's opaque items exactly as they came.

A Responses API answer (``output_version="responses/v1"``) holds the provider's items as content
blocks: a reasoning item with encrypted content, function calls, messages. The next request must
carry the reasoning and call items back as they were, so screening never touches them, even when
encrypted content happens to match a secret pattern; the model's words are still redacted, and
the provider's copy of a call that screening moved aside loses the arguments screening removed,
and still gets its ``function_call_output`` on the next request.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from provider_flows import OPENAI, local_harness, run_task
from replay_openai import function_call_item, message_item, reasoning_item, response, usage
from support import TEST_KEY, Harness

from toolgate.graph.bootstrap import initialize_store
from toolgate.graph.nodes._bounds import screen_response
from toolgate.policy.output import count_secrets
from toolgate.releases.bundle import ReleaseEnv
from toolgate.store import SQLiteStore
from toolgate.tools.demo.release import DEMO_RELEASES
from toolgate.tools.registry import Registry

SECRET_LOOKING = "gAAAAABo9x sk-AbCdEf0123456789GhIjKlMn token=Zm9vYmFyYmF6cXV4 4111 1111 1111 1111"
"""Encrypted content that matches the key, ``token=`` and card patterns (it is still opaque)."""
CARD = "4111 1111 1111 1111"
LOOKUP = {"order_id": "O-5512"}

harness = local_harness(OPENAI)


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    store = SQLiteStore(tmp_path_factory.mktemp("opaque") / "toolgate.sqlite", key=TEST_KEY)
    initialize_store(store, DEMO_RELEASES["ops-tools/1.1.0"])
    try:
        yield DEMO_RELEASES["ops-tools/1.0.0"].registry(ReleaseEnv(store, secret=b"opaque-items"))
    finally:
        store.close()


def text_block(item_id: str, text: str) -> dict[str, Any]:
    """A message item's text as ``langchain-openai`` keeps it (``responses/v1``)."""
    return {"type": "text", "text": text, "annotations": [], "id": item_id}


def answer(blocks: list[dict[str, Any]], calls: list[tuple[str, str, Any]]) -> AIMessage:
    """An ``AIMessage`` as ``ChatOpenAI`` builds it from a Responses API answer."""
    return AIMessage(
        content=blocks,
        id="resp_opaque",
        response_metadata={"id": "resp_opaque", "model_provider": "openai"},
        tool_calls=[
            {"type": "tool_call", "id": cid, "name": name, "args": args} for cid, name, args in calls
        ],
    )


def test_a_reasoning_item_is_kept_byte_for_byte_even_when_it_looks_like_a_secret(registry: Registry) -> None:
    assert count_secrets(SECRET_LOOKING) >= 3  # the patterns do match: only opacity keeps it intact
    reasoning = reasoning_item("rs_opaque_1", SECRET_LOOKING, [f"card {CARD} on file"])
    call = function_call_item("fc_opaque_1", "call_opaque_1", "lookup_order", LOOKUP)
    message = answer(
        [reasoning, call, text_block("msg_opaque_1", f"Your card {CARD} is on file.")],
        [("call_opaque_1", "lookup_order", LOOKUP)],
    )
    before = json.dumps(message.content)
    original = copy.deepcopy(message.content)

    screened, codes = screen_response(message, registry, max_calls=32)

    assert codes == {}
    assert json.dumps(screened.content[0]) == json.dumps(original[0])  # the reasoning item, byte for byte
    assert screened.content[0]["encrypted_content"] == SECRET_LOOKING
    assert json.dumps(screened.content[1]) == json.dumps(original[1])  # the kept call, byte for byte
    assert screened.content[2] == {**original[2], "text": "Your card [REDACTED] is on file."}
    assert [c["id"] for c in screened.tool_calls] == ["call_opaque_1"]
    assert json.dumps(message.content) == before  # the response itself is not modified in place


def test_signed_and_unknown_items_are_never_rewritten(registry: Registry) -> None:
    blocks = [
        {
            "type": "thinking",
            "thinking": f"the card is {CARD}",
            "signature": "EqQBCkYIARgCIkD" + "sk-" + "x" * 30,
        },
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr"},
        {
            "type": "web_search_call",
            "id": "ws_1",
            "status": "completed",
            "action": {"query": f"token={CARD}"},
        },
        message_item("msg_opaque_2", "an output item in its raw form"),
    ]
    message = answer(copy.deepcopy(blocks), [])
    screened, _ = screen_response(message, registry, max_calls=32)
    assert json.dumps(screened.content) == json.dumps(blocks)


def test_a_screened_call_keeps_its_ids_and_loses_its_arguments(registry: Registry) -> None:
    secret_args = {"order_id": "O-5512", "note": "api_key=sk-AbCdEf0123456789GhIjKlMn"}
    kept = function_call_item("fc_ok", "call_ok", "lookup_order", LOOKUP)
    secret = function_call_item("fc_secret", "call_secret", "lookup_order", secret_args)
    extra = function_call_item("fc_extra", "call_extra", "lookup_order", {"order_id": "O-5513"})
    message = answer(
        [reasoning_item("rs_opaque_3", "gAAAAABo3"), kept, secret, extra],
        [
            ("call_ok", "lookup_order", LOOKUP),
            ("call_secret", "lookup_order", secret_args),
            ("call_extra", "lookup_order", {"order_id": "O-5513"}),
        ],
    )
    screened, codes = screen_response(message, registry, max_calls=2)

    assert codes == {"call_secret": "secret_in_arguments", "call_extra": "too_many_calls"}
    assert json.dumps(screened.content[:2]) == json.dumps(message.content[:2])
    for block, original in zip(screened.content[2:], message.content[2:], strict=True):
        assert block == {**original, "arguments": "{}"}  # ids, call id, name and status stay
    assert "sk-AbCdEf" not in json.dumps(screened.content) + json.dumps(screened.invalid_tool_calls)
    assert [c["id"] for c in screened.invalid_tool_calls] == ["call_secret", "call_extra"]


def test_unparseable_arguments_keep_only_their_safe_preview(registry: Registry) -> None:
    raw = '{"order_id": "O-5512", "pin": "password=hunter2hunter2"'  # cut short: not JSON
    call = {
        "arguments": raw,
        "call_id": "call_bad",
        "name": "lookup_order",
        "type": "function_call",
        "id": "fc_bad",
        "status": "completed",
    }
    message = AIMessage(
        content=[call],
        id="resp_bad",
        invalid_tool_calls=[
            {
                "type": "invalid_tool_call",
                "id": "call_bad",
                "name": "lookup_order",
                "args": raw,
                "error": "EOF",
            }
        ],
    )
    screened, _ = screen_response(message, registry, max_calls=32)
    preview = screened.invalid_tool_calls[0]["args"]
    assert "hunter2" not in preview and "[REDACTED]" in preview
    assert screened.content == [{**call, "arguments": preview}]


def test_a_screened_call_is_answered_on_the_wire_and_its_secret_never_goes_back(harness: Harness) -> None:
    secret_args = {"order_id": "O-5512 api_key=sk-ZyXwVu9876543210TsRqPo"}
    reasoning = reasoning_item("rs_wire_1", SECRET_LOOKING, ["look the order up"])
    call = function_call_item("fc_wire_1", "call_wire_1", "lookup_order", secret_args)
    script = [
        response("resp_wire_1", [reasoning, call], model="gpt-5-mini", tokens=usage(300, 60, 40)),
        response("resp_wire_2", [message_item("msg_wire_2", "Please do not share keys.")], model="gpt-5-mini",
                 tokens=usage(420, 9)),
    ]  # fmt: skip
    final, replay = run_task(OPENAI, harness, script, "where is O-5512?", "t-wire")
    assert final["status"] == "done" and harness.total_handler_calls() == 0
    first, second = replay.bodies()
    replayed = second["input"][len(first["input"]) :]
    assert json.dumps(replayed[0]) == json.dumps(reasoning)  # opaque, though it matches secret patterns
    assert replayed[1] == {**call, "arguments": "{}"}  # same item and call ids, the secret gone
    assert (replayed[2]["type"], replayed[2]["call_id"]) == ("function_call_output", "call_wire_1")
    assert json.loads(replayed[2]["output"])["error"] == "secret_in_arguments"
    assert "sk-ZyXwVu" not in json.dumps(second)
