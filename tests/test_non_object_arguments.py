"""A function call whose arguments are JSON but not an object (``[1,2,3]``, ``"x"``, ``3``,
``null``), from the real ``langchain-openai`` client on both OpenAI wire formats (issue 29): the
README promises ``malformed_arguments``, but the client's own parsing of a non-streamed reply
refused the whole message, and the run crashed before dispatch saw the call. Now the reply is
screened before the client parses it (`toolgate.models.argument_screen`): that call is refused
``malformed_arguments``, no handler runs, the honest call beside it is answered, the run ends.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from replay_openai import (
    CHAT_PATH,
    RESPONSES_PATH,
    ReplayServer,
    Reply,
    chat_completion,
    function_call_item,
    local_only_here,
    message_item,
    response,
    usage,
)
from support import TEST_KEY, Harness, principal

from toolgate.config import Settings
from toolgate.graph import Context
from toolgate.models.argument_screen import NOT_AN_OBJECT, REPEATED_KEY, screened_arguments
from toolgate.models.selection import load_chat_model
from toolgate.store import SQLiteStore
from toolgate.testing import open_test_app

NOT_OBJECTS = ["[1,2,3]", '"O-5512"', "3", "null", "true"]


def _run_openai(
    harness: Harness, script: list[Reply], tmp_path: Path, thread: str, *, api: str = "chat", text: str = "where is O-5512?"
) -> tuple[dict[str, Any], Any]:
    """cust-ada's ``text``, with the real OpenAI client on ``api`` (``chat`` or ``responses``) and
    the replay of ``script``: the thread's final state, and the replay (what of it is left)."""
    with ReplayServer(script, path=CHAT_PATH if api == "chat" else RESPONSES_PATH) as replay:
        settings = Settings(
            data_dir=tmp_path,
            model="openai:gpt-4.1-mini",
            model_base_url=replay.base_url,
            allow_model_requests=True,
            openai_api=api,
        )
        app = open_test_app(
            model=load_chat_model(settings),
            tools=harness.registry,
            policy=harness.policy,
            store=harness.store,
            start=False,
            checkpointer=InMemorySaver(),
        )
        state: dict[str, Any] = app.compiled().invoke(
            {"messages": [HumanMessage(text)]},
            {"configurable": {"thread_id": thread}},
            context=Context(principal=principal("cust-ada")),
        )
    return state, replay


@pytest.mark.parametrize("text", NOT_OBJECTS)
def test_arguments_that_are_not_an_object_no_longer_parse(text: str) -> None:
    screened = screened_arguments(text)
    assert screened == NOT_AN_OBJECT + text
    with pytest.raises(ValueError):
        json.loads(screened)


@pytest.mark.parametrize("text", ['{"order_id": "O-5512"}', "{}", "", "{not json", '  {"a": [1]} '])
def test_objects_empty_and_unparseable_arguments_pass_as_sent(text: str) -> None:
    assert screened_arguments(text) is text  # the client itself files unparseable text as invalid


def _chat_turns(arguments: str) -> list[Reply]:
    calls = [
        {"id": "call_bad", "type": "function", "function": {"name": "lookup_order", "arguments": arguments}},
        {
            "id": "call_good",
            "type": "function",
            "function": {"name": "lookup_order", "arguments": json.dumps({"order_id": "O-5512"})},
        },
    ]
    message = {"role": "assistant", "content": None, "refusal": None, "annotations": [], "tool_calls": calls}
    done = {"role": "assistant", "content": "done", "refusal": None, "annotations": []}
    return [
        chat_completion(message, "tool_calls", prompt_tokens=10, completion_tokens=5, suffix="n1"),
        chat_completion(done, "stop", prompt_tokens=20, completion_tokens=1, suffix="n2"),
    ]


def _responses_turns(arguments: str) -> list[Reply]:
    bad = function_call_item("fc_bad", "call_bad", "lookup_order", {})
    bad["arguments"] = arguments
    good = function_call_item("fc_good", "call_good", "lookup_order", {"order_id": "O-5512"})
    model = "gpt-4.1-mini-2025-04-14"
    return [
        response("resp_n1", [bad, good], model=model, tokens=usage(10, 5)),
        response("resp_n2", [message_item("msg_n2", "done")], model=model, tokens=usage(20, 1)),
    ]


@pytest.mark.parametrize("text", NOT_OBJECTS)
@pytest.mark.parametrize("api", ["chat", "responses"])
def test_a_non_object_call_is_refused_malformed_and_the_run_goes_on(
    api: str, text: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local_only_here(monkeypatch)
    script = _chat_turns(text) if api == "chat" else _responses_turns(text)
    harness = Harness(SQLiteStore(tmp_path / "t.sqlite", key=TEST_KEY))
    state, replay = _run_openai(harness, script, tmp_path, f"t-{api}", api=api)
    assert replay.script == []  # both turns were asked for: the run went on past the bad call

    answers = {m.tool_call_id: json.loads(str(m.content)) for m in state["messages"] if isinstance(m, ToolMessage)}
    assert answers["call_bad"]["error"] == "malformed_arguments"
    assert answers["call_good"]["status"] == "completed"
    assert harness.counter.calls.get("lookup_order", 0) == 1  # only the honest call ran
    rejected = [(e.call_id, e.code) for e in harness.store.audit.events() if e.event == "call.rejected"]
    assert [code for _, code in rejected] == ["malformed_arguments"]
    assert state["status"] == "done"


REFUND_TWICE = '{"order_id":"O-5512","amount_cents":1,"reason":"damaged","amount_cents":4999}'


@pytest.mark.parametrize(
    "text", [REFUND_TWICE, '{"a": {"x": 1, "x": 2}}', '{"items": [{"sku": "S-1", "sku": "S-2"}]}']
)
def test_arguments_that_repeat_a_key_no_longer_parse(text: str) -> None:
    screened = screened_arguments(text)
    assert screened == REPEATED_KEY + text
    with pytest.raises(ValueError):
        json.loads(screened)


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_a_call_that_repeats_a_key_is_refused_malformed_never_proposed(
    api: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """JSON leaves a repeated key's meaning open (RFC 8259 4): Python's parser kept the last
    ``amount_cents``, so ``{"amount_cents":1,...,"amount_cents":4999}`` became a proposal to
    refund 4999 while the provider's copy of the call (the Responses item kept verbatim in the
    thread, what a transcript shows) and any parser that keeps the first say 1. Such a call has no
    one meaning to judge: it is refused ``malformed_arguments``, nothing is proposed, the run goes on."""
    local_only_here(monkeypatch)
    script = _chat_turns(REFUND_TWICE) if api == "chat" else _responses_turns(REFUND_TWICE)
    for reply in script[:1]:  # the bad call names the refund tool
        body: Any = reply.body
        calls = body["choices"][0]["message"]["tool_calls"] if api == "chat" else body["output"]
        (calls[0]["function"] if api == "chat" else calls[0])["name"] = "issue_refund"
    harness = Harness(SQLiteStore(tmp_path / "t.sqlite", key=TEST_KEY))
    state, replay = _run_openai(harness, script, tmp_path, f"t-{api}", api=api, text="refund O-5512")
    assert replay.script == []
    answers = {m.tool_call_id: json.loads(str(m.content)) for m in state["messages"] if isinstance(m, ToolMessage)}
    assert answers["call_bad"]["error"] == "malformed_arguments"
    assert answers["call_good"]["status"] == "completed"
    assert harness.store.proposals.list() == [] and "__interrupt__" not in state
    assert harness.counter.calls.get("issue_refund", 0) == 0
    assert state["status"] == "done"


def test_arguments_nested_past_the_parser_are_screened_not_a_crash() -> None:
    """A 9,000-deep arguments text made the client's own parser raise RecursionError; screened
    first, it is an invalid call (refused ``malformed_arguments``) like any other."""
    deep = '{"order_id": ' + "[" * 9000 + "]" * 9000 + "}"
    assert screened_arguments(deep) == NOT_AN_OBJECT + deep


def test_the_offline_models_call_lines_refuse_a_deep_json_instead_of_crashing() -> None:
    from toolgate.models.offline import direct_calls

    assert direct_calls('call lookup_order {"order_id": "O-5512"}') == [("lookup_order", {"order_id": "O-5512"})]
    assert direct_calls("call lookup_order {\"order_id\": " + "[" * 9000 + "]" * 9000 + "}") is None


def test_unparseable_arguments_leave_no_copy_of_themselves_in_the_parsers_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``langchain-openai`` files unparseable arguments under ``invalid_tool_calls`` with an
    ``error`` that repeats them whole ("Function lookup_order arguments: ... are not valid
    JSON"). Screening bounded and redacted the call's ``args`` but kept that error as it came: a
    secret in the arguments stayed in the checkpointed message (and what clients stream), and
    300 KB of arguments were kept whole there. The error is bounded and redacted like the args."""
    key = "sk-live-" + "Zq9" * 10
    local_only_here(monkeypatch)
    script = _chat_turns('{"order_id": "' + key + '", "note": "' + "x" * 300_000 + '", oops')
    harness = Harness(SQLiteStore(tmp_path / "t.sqlite", key=TEST_KEY))
    state, replay = _run_openai(harness, script, tmp_path, "t-unparseable")
    assert replay.script == []
    answers = {m.tool_call_id: json.loads(str(m.content)) for m in state["messages"] if isinstance(m, ToolMessage)}
    assert answers["call_bad"]["error"] == "malformed_arguments"
    [invalid] = [c for m in state["messages"] for c in getattr(m, "invalid_tool_calls", None) or []]
    assert "not valid JSON" in invalid["error"] and len(invalid["error"]) <= 200
    assert key not in repr(state["messages"])


@pytest.mark.parametrize("tool_input", [[1, 2, 3], "O-5512", 3, None, True], ids=["list", "str", "int", "null", "true"])
def test_an_anthropic_tool_use_whose_input_is_not_an_object_is_refused_and_the_run_goes_on(
    tool_input: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same promise on the Messages API: ``langchain-anthropic`` takes a ``tool_use`` block's
    ``input`` as the call's arguments, and one that is not an object failed the ``AIMessage``'s
    own validation, so the run crashed before dispatch saw the call."""
    from provider_flows import ANTHROPIC, run_task
    from replay_anthropic import message, text_block, tool_use_block, usage

    bad = {**tool_use_block("toolu_bad", "lookup_order", {}), "input": tool_input}
    good = tool_use_block("toolu_good", "lookup_order", {"order_id": "O-5512"})
    turn = message("msg_n1", [text_block("Looking."), good], stop_reason="tool_use", tokens=usage(10, 5))
    turn = Reply(turn.status, {**turn.body, "content": [turn.body["content"][0], bad, good]})
    done = message("msg_n2", [text_block("done")], stop_reason="end_turn", tokens=usage(20, 1))
    ANTHROPIC.local_only_here(monkeypatch)
    harness = Harness(SQLiteStore(tmp_path / "t.sqlite", key=TEST_KEY))
    state, replay = run_task(ANTHROPIC, harness, [turn, done], "where is O-5512?", "t-anthropic-not-object")
    assert replay.script == []  # both turns were asked for: the run went on past the bad call
    answers = {m.tool_call_id: json.loads(str(m.content)) for m in state["messages"] if isinstance(m, ToolMessage)}
    assert answers["toolu_bad"]["error"] == "malformed_arguments"
    assert answers["toolu_good"]["status"] == "completed"
    assert harness.counter.calls.get("lookup_order", 0) == 1
    assert state["status"] == "done"
    (assistant,) = [m for m in replay.bodies()[1]["messages"] if m["role"] == "assistant"]
    assert [b["id"] for b in assistant["content"] if b["type"] == "tool_use"] == ["toolu_bad", "toolu_good"]


ODD_CALLS = {
    "arguments_as_json": ({"name": "lookup_order", "arguments": {"order_id": "O-5512"}}, "c1", "completed"),
    "arguments_as_list": ({"name": "lookup_order", "arguments": ["O-5512"]}, "c1", "malformed_arguments"),
    "id_as_number": ({"name": "lookup_order", "arguments": '{"order_id": "O-5512"}'}, 7, "completed"),
    "no_function": (None, "c1", "unknown_tool"),
}
"""What OpenAI-compatible servers send in a Chat Completions ``tool_calls`` entry: arguments as
JSON itself instead of its text, an id that is a number, an entry with no ``function``."""


@pytest.mark.parametrize("odd", sorted(ODD_CALLS))
def test_a_chat_call_of_an_odd_shape_is_judged_and_the_run_goes_on(
    odd: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each shape crashed the client's own message building (``Input should be a valid
    string``, a ``None`` call) before dispatch saw it. Screened with the reply: JSON arguments are
    their text (judged as any), a number id its text, an entry with no function an invalid call."""
    function, call_id, expected = ODD_CALLS[odd]
    script = _chat_turns("{}")
    entry: dict[str, Any] = {"id": call_id, "type": "function"}
    if function is not None:
        entry["function"] = function
    body: Any = script[0].body
    body["choices"][0]["message"]["tool_calls"][0] = entry
    local_only_here(monkeypatch)
    harness = Harness(SQLiteStore(tmp_path / "t.sqlite", key=TEST_KEY))
    state, replay = _run_openai(harness, script, tmp_path, f"t-{odd}")
    assert replay.script == []
    answers = {m.tool_call_id: json.loads(str(m.content)) for m in state["messages"] if isinstance(m, ToolMessage)}
    odd_answer = answers[str(call_id)]
    assert odd_answer.get("error", odd_answer["status"]) == expected
    assert answers["call_good"]["status"] == "completed" and state["status"] == "done"


@pytest.mark.parametrize(("field", "value", "expected"), [("id", 7, "completed"), ("name", None, "unknown_tool")])
def test_an_anthropic_tool_use_whose_id_or_name_is_not_text_is_judged_and_the_run_goes_on(
    field: str, value: Any, expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``tool_use`` id that is a number, or a null name (a compatible server's), failed the
    ``AIMessage``'s own validation and crashed the run; each is text now, and the call judged."""
    from provider_flows import ANTHROPIC, run_task
    from replay_anthropic import message, text_block, tool_use_block, usage

    odd = {**tool_use_block("toolu_odd", "lookup_order", {"order_id": "O-5512"}), field: value}
    good = tool_use_block("toolu_good", "lookup_order", {"order_id": "O-5512"})
    turn = message("msg_n1", [good], stop_reason="tool_use", tokens=usage(10, 5))
    turn = Reply(turn.status, {**turn.body, "content": [odd, good]})
    done = message("msg_n2", [text_block("done")], stop_reason="end_turn", tokens=usage(20, 1))
    ANTHROPIC.local_only_here(monkeypatch)
    harness = Harness(SQLiteStore(tmp_path / "t.sqlite", key=TEST_KEY))
    state, replay = run_task(ANTHROPIC, harness, [turn, done], "where is O-5512?", "t-anthropic-odd")
    assert replay.script == []
    answers = {m.tool_call_id: json.loads(str(m.content)) for m in state["messages"] if isinstance(m, ToolMessage)}
    odd_answer = answers["7" if field == "id" else "toolu_odd"]
    assert odd_answer.get("error", odd_answer["status"]) == expected
    assert answers["toolu_good"]["status"] == "completed" and state["status"] == "done"


@pytest.mark.parametrize("shape", ["content_number", "no_choices", "tool_calls_not_a_list"])
def test_a_chat_reply_the_client_cannot_read_ends_the_turn_for_review(
    shape: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = _chat_turns("{}")
    body: Any = script[0].body
    if shape == "content_number":
        body["choices"][0]["message"]["content"] = 5
    elif shape == "no_choices":
        body["choices"] = []
    else:
        body["choices"][0]["message"]["tool_calls"] = {"id": "call_bad"}
    local_only_here(monkeypatch)
    harness = Harness(SQLiteStore(tmp_path / "t.sqlite", key=TEST_KEY))
    state, _ = _run_openai(harness, script, tmp_path, f"t-{shape}")
    # the client raised while building the message (a TypeError, an IndexError...), which crashed
    # the run; now the reply is a failed request, not retried (`toolgate.models.malformed_reply`)
    assert state["status"] == "needs_review" and harness.counter.total() == 0
    failed = [e for e in harness.store.audit.events() if e.event == "model.failed"]
    assert [e.code for e in failed] == ["malformed_reply"] and failed[0].detail is not None
    assert [e for e in harness.store.audit.events() if e.event == "model.retry"] == []
