"""What cannot be judged is refused, never crashes, and every call id gets its answer.

Arguments that are JSON but not an object, integers beyond 64 bits, NaN and Infinity, NUL
characters (in arguments and in call ids, on the PostgreSQL checkpointer and store too), and a
turn of 10,000 calls: each refused with its stable code and a `ToolMessage` per call id, with a
bounded number of audit events. A turn that crosses the task budget answers every one of its calls.
Secret-looking arguments are never rewritten: refused, or (for a tool that declares it) proposed
as they are and executed exactly as approved.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.types import Command
from support import Harness, principal, start, tool_messages

from toolgate.graph import Context
from toolgate.graph.review.decisions import decide
from toolgate.graph.state import gateway_state
from toolgate.graph.worker.answers import answer_thread
from toolgate.policy import PolicyRules
from toolgate.releases.bundle import NoResources
from toolgate.store import PostgresStore, open_checkpointer
from toolgate.testing import ScriptedChatModel, ai, open_test_app, tool_call
from toolgate.tools import Registry
from toolgate.tools.shapes.definitions import from_openai
from toolgate.tools.shapes.operator_policy import OperatorPolicy

REFUND = {"order_id": "O-5512", "amount_cents": 4999, "reason": "damaged"}


def answers(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m.tool_call_id: json.loads(str(m.content)) for m in tool_messages(state)}


def rejected_events(harness: Harness) -> list[Any]:
    return [e for e in harness.store.audit.events() if e.event == "call.rejected"]


def raw_call(name: str, args: Any, call_id: str) -> dict[str, Any]:
    """A tool call exactly as a provider integration may hand it over (no validation)."""
    return {"type": "tool_call", "name": name, "args": args, "id": call_id}


def run_turn(
    harness: Harness,
    calls: list[dict[str, Any]],
    thread: str,
    checkpointer: Any = None,
    context: Context | None = None,
) -> dict[str, Any]:
    message = AIMessage(content="", tool_calls=[])
    message.tool_calls = calls  # type: ignore[assignment]  # as parsed upstream, unvalidated
    model = ScriptedChatModel(responses=[message, ai("done")])
    graph = harness.graph(model, checkpointer)
    if context is None:
        return start(graph, "hostile", "cust-ada", thread)
    result: dict[str, Any] = graph.invoke(
        {"messages": [HumanMessage("hostile")]}, {"configurable": {"thread_id": thread}}, context=context
    )
    return result


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (5, "malformed_arguments"),
        ("x", "malformed_arguments"),
        ([1], "malformed_arguments"),
        (None, "malformed_arguments"),
        ({"order_id": "O-5512", "amount_cents": 2**64 + 1, "reason": "damaged"}, "number_out_of_range"),
        ({"order_id": "O-5512", "amount_cents": -(2**63) - 1, "reason": "damaged"}, "number_out_of_range"),
        ({"order_id": "O-5512", "amount_cents": float("nan"), "reason": "damaged"}, "non_finite_number"),
        ({"order_id": "O-5512", "amount_cents": float("inf"), "reason": "damaged"}, "non_finite_number"),
        ({"order_id": "O-55\x0012", "amount_cents": 10, "reason": "damaged"}, "nul_character"),
        ({"order_id\x00": "O-5512", "amount_cents": 10, "reason": "damaged"}, "nul_character"),
    ],
    ids=[
        "int",
        "str",
        "list",
        "null",
        "int_above_64_bits",
        "int_below_64_bits",
        "nan",
        "inf",
        "nul",
        "nul_key",
    ],
)
def test_arguments_that_cannot_be_judged_are_refused_with_their_code(
    harness: Harness, args: Any, code: str
) -> None:
    state = run_turn(harness, [raw_call("issue_refund", args, "c1")], f"t-{code}-{id(args)}")
    assert answers(state)["c1"]["error"] == code
    assert harness.total_handler_calls() == 0 and harness.store.proposals.list() == []
    assert [e.code for e in rejected_events(harness)] == [code]


def test_nul_in_a_call_id_is_refused_on_the_postgres_checkpointer_and_store(
    harness: Harness, tmp_path: Path
) -> None:
    pg_url = harness.store._conninfo if isinstance(harness.store, PostgresStore) else None  # type: ignore[attr-defined]
    with open_checkpointer(pg_url, tmp_path) as saver:
        state = run_turn(
            harness, [raw_call("lookup_order", {"order_id": "O-5512"}, "call\x00evil")], "t-nul-id", saver
        )
    assert answers(state)["call\x00evil"]["error"] == "nul_character"  # answered with the exact id
    [event] = rejected_events(harness)
    assert event.code == "nul_character" and event.call_id is not None and "\x00" not in event.call_id
    assert harness.total_handler_calls() == 0


def test_ten_thousand_calls_in_one_turn_cost_a_bounded_number_of_audit_events(harness: Harness) -> None:
    calls = [raw_call("lookup_order", {"order_id": "O-5512"}, f"c{i}") for i in range(10_000)]
    state = run_turn(harness, calls, "t-flood")
    answered = answers(state)
    assert set(answered) == {f"c{i}" for i in range(10_000)}  # every call id has its answer
    codes = [answered[f"c{i}"]["error"] for i in range(32, 10_000)]
    assert set(codes) == {"too_many_calls"}
    rejected = rejected_events(harness)
    batch = [e for e in rejected if e.code == "too_many_calls"]
    assert len(batch) == 1 and batch[0].detail["calls"] == 10_000 - 32
    assert len(harness.store.audit.events()) <= 32 * 2 + 10  # the judged 32 at most, plus the batch
    # the task budget (6 calls) judged the first calls; the turn crossed it, so nothing ran
    assert harness.total_handler_calls() == 0 and state["status"] == "needs_review"


def test_a_turn_that_crosses_the_budget_answers_every_call(harness: Harness) -> None:
    calls = [raw_call("lookup_order", {"order_id": f"O-55{12 + i % 3}"}, f"c{i}") for i in range(8)]
    state = run_turn(
        harness, calls, "t-budget", context=Context(principal=principal("rita"), max_tool_calls=6)
    )
    answered = answers(state)
    assert set(answered) == {f"c{i}" for i in range(8)}
    assert [answered[f"c{i}"]["error"] for i in range(6)] == ["task_stopped"] * 6
    assert [answered[f"c{i}"]["error"] for i in (6, 7)] == ["budget_exhausted"] * 2
    assert harness.total_handler_calls() == 0 and state["status"] == "needs_review"


def test_a_secret_in_arguments_is_refused_and_never_stored(harness: Harness) -> None:
    key = "sk-live-" + "Zq9" * 10
    state = run_turn(
        harness, [raw_call("issue_refund", {**REFUND, "reason": "damaged", "order_id": key}, "c1")], "t-sec"
    )
    assert answers(state)["c1"]["error"] == "secret_in_arguments"
    assert key not in repr(state["messages"]) and key not in repr(state["calls"])
    assert all(key not in json.dumps(e.detail) for e in harness.store.audit.events())
    assert harness.store.proposals.list() == []


def test_calls_that_share_a_call_id_in_one_turn_are_all_refused_and_none_runs(harness: Harness) -> None:
    """One id names one call: a turn with two calls under the same id cannot be answered call by
    call (the state keeps one record per id, so one accepted call vanished unanswered while the
    other went on to a proposal). Every call under the shared id is refused; the others run."""
    state = run_turn(
        harness,
        [
            raw_call("lookup_order", {"order_id": "O-5512"}, "c1"),
            raw_call("issue_refund", REFUND, "c1"),
            raw_call("lookup_order", {"order_id": "O-5512"}, "c2"),
        ],
        "t-shared-id",
    )
    messages = [(m.tool_call_id, json.loads(str(m.content))) for m in tool_messages(state)]
    assert [(i, a.get("error")) for i, a in messages] == [
        ("c1", "malformed_arguments"),
        ("c1", "malformed_arguments"),
        ("c2", None),
    ]
    assert messages[2][1]["status"] == "completed"
    assert harness.store.proposals.list() == []
    assert [e.code for e in rejected_events(harness)] == ["malformed_arguments", "malformed_arguments"]
    assert "__interrupt__" not in state


def test_a_call_id_a_later_model_turn_uses_again_keeps_both_calls(harness: Harness) -> None:
    """Some providers number call ids per response (``call_0`` in every turn). The lookup of turn 1
    and the refund of turn 2 share ``c1``: each is answered, proposed and reported as itself; the
    earlier call's record and outcome move to ``c1#1``, never read as the new call's."""
    model = ScriptedChatModel(
        responses=[
            ai("", tool_call("lookup_order", {"order_id": "O-5512"}, "c1")),
            ai("", tool_call("issue_refund", REFUND, "c1")),
            ai("done"),
        ]
    )
    graph = harness.graph(model)
    paused = start(graph, "refund", "cust-ada", "t-reused-id")
    assert paused["status"] == "awaiting_approval"
    assert {k: (c["call_id"], c["tool"], c["phase"]) for k, c in paused["calls"].items()} == {
        "c1#1": ("c1", "lookup_order", "done"),
        "c1": ("c1", "issue_refund", "proposed"),
    }
    # before the fix, clients read the lookup's "completed" as the pending refund's outcome
    assert set(paused["outcomes"]) == {"c1#1"} and paused["outcomes"]["c1#1"]["tool"] == "lookup_order"
    assert paused["awaiting"] == ["c1"]
    proposal = paused["__interrupt__"][0].value["toolgate"]["proposals"][0]
    decide(harness.gateway(), proposal["proposal_id"], principal("fiona"), "approve")
    config: Any = {"configurable": {"thread_id": "t-reused-id"}}
    final = gateway_state(graph.invoke(Command(resume={"wake": True}), config, context=Context()))
    outcomes = {k: (o["call_id"], o["tool"], o["status"]) for k, o in final["outcomes"].items()}
    assert outcomes == {"c1#1": ("c1", "lookup_order", "completed"), "c1": ("c1", "issue_refund", "completed")}
    answer = final["messages"][-1].content
    assert "lookup_order [c1]: completed" in answer and "issue_refund [c1]: completed" in answer
    assert [m.tool_call_id for m in tool_messages(final)] == ["c1", "c1"]
    assert dict(harness.handler_calls) == {"lookup_order": 1, "issue_refund": 1} and harness.refunds() == 1
    model.assert_complete()


def test_new_input_whose_call_reuses_a_pending_writes_id_leaves_that_write_answerable(harness: Harness) -> None:
    """A thread left awaiting approval gets new input, and the new turn's lookup reuses the pending
    refund's call id. The refund's record stays in the thread (as ``c1#1``), so the final answer
    reports it pending, and once a worker delivers it the thread is answered with its outcome
    (before the fix its record was replaced: the thread said ``done`` and never learned of it)."""
    model = ScriptedChatModel(
        responses=[
            ai("", tool_call("issue_refund", REFUND, "c1")),
            ai("", tool_call("lookup_order", {"order_id": "O-5512"}, "c1")),
            ai("looked"),
        ]
    )
    graph = harness.graph(model)
    config: Any = {"configurable": {"thread_id": "t-reused-pending"}}
    first = start(graph, "refund", "cust-ada", "t-reused-pending")
    proposal = first["__interrupt__"][0].value["toolgate"]["proposals"][0]
    second = start(graph, "and look it up", "cust-ada", "t-reused-pending")
    assert second["status"] == "awaiting_approval"
    assert second["calls"]["c1#1"]["proposal_id"] == proposal["proposal_id"]
    assert second["outcomes"]["c1#1"]["status"] == "pending_approval"
    assert "issue_refund [c1]: pending_approval" in second["messages"][-1].content
    gw = harness.gateway()
    decide(gw, proposal["proposal_id"], principal("fiona"), "approve")
    assert gw.executor.deliver(proposal["operation_key"], worker_id="w-elsewhere").status == "succeeded"
    assert answer_thread(graph, harness.store, "t-reused-pending") == "answered"
    now = gateway_state(dict(graph.get_state(config).values))
    assert (now["status"], now["outcomes"]["c1#1"]["status"]) == ("done", "completed")
    assert "issue_refund [c1]: completed" in now["messages"][-1].content
    assert dict(harness.handler_calls) == {"lookup_order": 1, "issue_refund": 1} and harness.refunds() == 1


def test_a_call_id_used_in_every_turn_moves_each_earlier_call_to_its_own_key(harness: Harness) -> None:
    """A model that names every call ``c1`` (and one that sends no id at all, named by its place)
    across four turns: each earlier call gets the first free ``#n`` key, none is lost."""
    lookup = {"order_id": "O-5512"}
    unnamed = [AIMessage(content="", tool_calls=[]) for _ in range(2)]
    for message in unnamed:
        message.tool_calls = [raw_call("lookup_order", lookup, None)]  # type: ignore[list-item]
    model = ScriptedChatModel(
        responses=[
            *[ai("", tool_call("lookup_order", lookup, "c1")) for _ in range(3)],
            ai("", tool_call("lookup_order", lookup, "c1#1")),  # a model id that is an aside key
            *unnamed,
            ai("done"),
        ]
    )
    state = start(harness.graph(model), "look", "cust-ada", "t-reused-often", max_identical_calls=6)
    assert sorted(state["outcomes"]) == [
        "c1", "c1#1", "c1#1#1", "c1#2", "call_missing_0", "call_missing_0#1"
    ]  # fmt: skip
    assert sorted(o["call_id"] for o in state["outcomes"].values()) == [
        "c1", "c1", "c1", "c1#1", "call_missing_0", "call_missing_0"
    ]  # fmt: skip
    assert state["outcomes"]["c1#1"]["call_id"] == "c1#1"  # the newest call keeps its own id as key
    assert {o["status"] for o in state["outcomes"].values()} == {"completed"}
    assert harness.handler_calls["lookup_order"] == 6
    assert state["messages"][-1].content.count("lookup_order [") == 6


def test_a_secret_as_an_argument_name_is_refused_and_never_stored(harness: Harness) -> None:
    """An argument's name is the model's text as much as its value is (a key the schema refuses
    would otherwise sit in the checkpointed messages)."""
    key = "sk-live-" + "Zq9" * 10
    state = run_turn(harness, [raw_call("issue_refund", {**REFUND, "reason": "damaged", key: 1}, "c1")], "t-sec-key")
    assert answers(state)["c1"]["error"] == "secret_in_arguments"
    assert key not in repr(state["messages"]) and key not in repr(state["calls"])
    assert all(key not in json.dumps(e.detail) for e in harness.store.audit.events())
    assert harness.store.proposals.list() == []


def test_a_secret_as_a_tool_name_is_refused_and_never_stored_or_sent_back(harness: Harness) -> None:
    """A tool name is the model's text too: one holding a secret-looking value (a key it read in
    the conversation) was refused ``unknown_tool`` but kept in the checkpointed message, streamed
    to clients and sent back to the provider on every later turn. Parsed or not, such a call is
    screened like a secret in its arguments."""
    key = "sk-live-" + "Zq9" * 10
    unparsed = AIMessage(content="", tool_calls=[])
    unparsed.tool_calls = [raw_call(key, {"order_id": "O-5512"}, "c1")]  # type: ignore[list-item]
    unparsed.invalid_tool_calls = [
        {"type": "invalid_tool_call", "name": key, "args": "{not json", "id": "c2", "error": "bad JSON"}
    ]
    model = ScriptedChatModel(responses=[unparsed, ai("done")])
    state = start(harness.graph(model), "hostile", "cust-ada", "t-sec-name")
    assert {call_id: answer["error"] for call_id, answer in answers(state).items()} == {
        "c1": "secret_in_arguments",
        "c2": "secret_in_arguments",
    }
    assert key not in repr(state["messages"]) and key not in repr(model.requests[1].messages)
    assert all(key not in json.dumps(e.detail) for e in harness.store.audit.events())
    assert harness.total_handler_calls() == 0


def test_a_tool_that_takes_secrets_proposes_them_as_they_are_and_runs_what_was_approved(
    harness: Harness,
) -> None:
    restart = harness.registry.tools["restart_service"]
    seen: list[dict[str, Any]] = []

    def recording(args: Any, ctx: Any) -> Any:
        seen.append(args.model_dump())
        return restart.handler(args, ctx)

    reviewed = replace(restart, secret_arguments="review", handler=recording)
    harness.registry = replace(harness.registry, tools={**harness.registry.tools, restart.name: reviewed})
    arguments = {"service_alias": "web", "reason": "card 4111 1111 1111 1111 was charged twice"}
    model = ScriptedChatModel(responses=[ai("", tool_call("restart_service", arguments, "c1")), ai("done")])
    graph = harness.graph(model)
    first = start(graph, "restart web", "sam", "t-card")
    payload = first["__interrupt__"][0].value
    assert payload["action_requests"][0]["args"] == arguments  # the reviewer sees the real value
    proposal = payload["toolgate"]["proposals"][0]
    stored = harness.store.proposals.get(proposal["proposal_id"])
    assert stored is not None and stored.arguments == arguments
    decide(harness.gateway(), proposal["proposal_id"], principal("omar"), "approve")
    graph.invoke(Command(resume={"wake": True}), {"configurable": {"thread_id": "t-card"}}, context=Context())
    assert seen == [arguments]  # what ran is exactly what was approved
    # the card as written or as digits; "4111" alone turns up in hex digests by chance
    details = [json.dumps(e.detail) for e in harness.store.audit.events()]
    assert not [d for d in details if "4111 1111" in d or "41111111" in d]


def test_a_review_tool_keeps_a_secret_looking_argument_verbatim(harness: Harness) -> None:
    from toolgate.graph.nodes._bounds import screen_response

    refund = harness.registry.tools["issue_refund"]
    card = "4111111111111111"
    message = ai("", tool_call("issue_refund", {**REFUND, "order_id": card}, "c1"))
    _, screened = screen_response(message, harness.registry, max_calls=32)
    assert screened == {"c1": "secret_in_arguments"}  # refused by default
    reviewed = replace(refund, secret_arguments="review")
    harness.registry = replace(harness.registry, tools={**harness.registry.tools, refund.name: reviewed})
    kept, screened = screen_response(message, harness.registry, max_calls=32)
    assert screened == {} and kept.tool_calls[0]["args"]["order_id"] == card  # never rewritten


def test_ordinary_numbers_in_results_reach_the_model_unchanged(harness: Harness) -> None:
    model = ScriptedChatModel(
        responses=[ai("", tool_call("lookup_order", {"order_id": "O-5512"}, "c1")), ai("ok")]
    )
    state = start(harness.graph(model), "status", "cust-ada", "t-numbers")
    data = answers(state)["c1"]["data"]
    assert "REDACTED" not in json.dumps({k: v for k, v in data.items() if k != "card_number"})
    assert isinstance(data["amount_cents"], int)


def test_tool_messages_answer_screened_calls_in_model_order(harness: Harness) -> None:
    calls = [
        raw_call("lookup_order", {"order_id": "O-5512"}, "a"),
        raw_call("lookup_order", {"order_id": float("nan")}, "b"),
        raw_call("lookup_order", 7, "c"),
    ]
    state = run_turn(harness, calls, "t-order")
    ids = [m.tool_call_id for m in state["messages"] if isinstance(m, ToolMessage)]
    assert sorted(ids) == ["a", "b", "c"] and answers(state)["a"]["status"] == "completed"


COUNT_ITEMS = {
    "type": "function",
    "function": {
        "name": "count_items",
        "description": "Count the items of a shelf.",
        "parameters": {
            "type": "object",
            "properties": {"n": {"type": "integer"}, "weight": {"type": "number"}},
            "required": ["n"],
            "additionalProperties": False,
        },
    },
}
"""A published definition with an integer bounded by nothing (as most are)."""


@pytest.mark.parametrize("n", [1e300, 1e19, -1e19], ids=["1e300", "1e19", "-1e19"])
def test_an_integral_float_past_64_bits_for_a_declared_integer_is_refused_never_a_crash(
    harness: Harness, tmp_path: Path, n: float
) -> None:
    """JSON Schema counts ``1e300`` as an integer and a declared tool keeps an integral number
    where only ``integer`` is allowed as an integer: a 301-digit one that screening (which saw a
    finite float) never judged. Writing the turn's checkpoint raised (``Integer exceeds 64-bit
    range``) and the run crashed; it is one refused call now, on the real checkpointer."""
    seen: list[dict[str, Any]] = []

    def count_items(**arguments: Any) -> str:
        seen.append(arguments)
        return "ok"

    policy = OperatorPolicy(risk="read-only", owner="shelves", scopes=frozenset({"ops:read"}))
    registry = Registry.of("shelves/1.0.0", [from_openai(COUNT_ITEMS, count_items, policy)], NoResources())
    rules = PolicyRules(policy_version="t", sha256="0" * 64, approval_minutes=15, rules=())
    model = ScriptedChatModel(
        responses=[
            ai("", tool_call("count_items", {"n": n}, "c1"), tool_call("count_items", {"n": 7}, "c2")),
            ai("done"),
        ]
    )
    pg_url = harness.store._conninfo if isinstance(harness.store, PostgresStore) else None  # type: ignore[attr-defined]
    with open_checkpointer(pg_url, tmp_path) as saver:
        graph = open_test_app(model=model, tools=registry, policy=rules, store=harness.store, start=False)
        state = start(graph.compiled(checkpointer=saver), "count", "sam", "t-wide-int")
    assert answers(state)["c1"]["error"] == "schema_invalid"
    assert answers(state)["c2"]["status"] == "completed" and seen == [{"n": 7}]
    assert state["status"] == "done"
    assert [e.code for e in rejected_events(harness)] == ["schema_invalid"]


@pytest.mark.parametrize(
    ("args", "field"),
    [({"weight": "nan"}, "weight"), ({"weight": "-inf"}, "weight"), ({"count": "1" + "0" * 30}, "count")],
    ids=["nan", "-inf", "int_of_31_digits"],
)
def test_a_number_a_lax_argument_model_makes_of_text_is_refused_never_a_crash(
    harness: Harness, args: dict[str, Any], field: str
) -> None:
    """A tool registered with a plain (lax) Pydantic model turns the text ``"nan"`` into NaN and
    a 31-digit text into a 31-digit int: the model sent strings, which screening lets through.
    NaN crashed dispatch itself (the digest's canonical JSON has no form for it) and the wide int
    the checkpoint; each is one refused call now, naming the field."""
    from pydantic import BaseModel, ConfigDict

    class LaxStatusArgs(BaseModel):
        model_config = ConfigDict(extra="forbid")
        service_alias: Literal["web", "worker", "scheduler"]
        weight: float = 1.0
        count: int = 1

    status = harness.registry.tools["get_service_status"]
    lax = replace(status, args_model=LaxStatusArgs)
    harness.registry = replace(harness.registry, tools={**harness.registry.tools, status.name: lax})
    state = run_turn(
        harness,
        [raw_call("get_service_status", {"service_alias": "web", **args}, "c1")],
        f"t-lax-{field}",
        context=Context(principal=principal("omar")),
    )
    answer = answers(state)["c1"]
    assert answer["error"] == "schema_invalid" and field in answer["message"]
    assert harness.total_handler_calls() == 0 and state["status"] == "done"
    [event] = rejected_events(harness)
    assert event.code == "schema_invalid" and event.tool == "get_service_status"



@pytest.mark.parametrize(
    "args",
    [
        {"order_id": "O-5512", "amount_cents": float("nan"), "reason": "damaged"},
        {"order_id": "O-5512", "amount_cents": 2**64, "reason": "damaged"},
        {"order_id": "O-55\x0012", "amount_cents": 10, "reason": "damaged"},
        {"order_id": "sk-live-" + "Zq9" * 10, "amount_cents": 10, "reason": "damaged"},
    ],
    ids=["nan", "int_above_64_bits", "nul", "secret"],
)
def test_arguments_screened_out_count_against_the_validation_retry_cap(
    harness: Harness, args: dict[str, Any]
) -> None:
    """Invalid arguments may be retried twice (``max_validation_retries``), then the task stops
    for review. Arguments screening refuses (NaN, a 65-bit integer, a NUL, a secret) are invalid
    arguments too, but did not count: a model sending them again ran on until the turn budget
    (24 turns), where a schema-invalid one stops at its third attempt."""
    turns = [ai("", tool_call("issue_refund", {"order_id": "O-5512"}, f"c{i}")) for i in range(6)]
    for message in turns:
        message.tool_calls[0]["args"] = args  # as parsed upstream, unvalidated
    model = ScriptedChatModel(responses=[*turns, ai("done")])
    state = start(harness.graph(model), "refund", "cust-ada", "t-cap")
    assert state["status"] == "needs_review"
    assert state["status_reason"] == "arguments for issue_refund stayed invalid after retries"
    assert state["budget"]["model_turns"] == 3 and len(tool_messages(state)) == 3
    assert harness.total_handler_calls() == 0 and harness.store.proposals.list() == []


def test_calls_without_an_id_are_answered_under_the_id_the_provider_is_sent_back(harness: Harness) -> None:
    """A provider (an OpenAI-compatible server) that sends calls without ids: each is named by
    its place (``call_missing_<n>``) and answered under that name, but the assistant message kept
    in the thread, and sent back on the next request, still carried no id, so no answer matched
    its call there (OpenAI refuses such a history with a 400). The name is given to the call in
    the kept message too, for a parsed call and for one that could not be judged."""
    unnamed = AIMessage(content="", tool_calls=[])
    unnamed.tool_calls = [  # type: ignore[list-item]
        raw_call("lookup_order", {"order_id": "O-5512"}, None),  # runs
        raw_call("lookup_order", {"order_id": float("nan")}, ""),  # screened
        raw_call("lookup_order", {"order_id": "O-5513"}, None),  # refused (not hers)
    ]
    model = ScriptedChatModel(responses=[unnamed, ai("done")])
    state = start(harness.graph(model), "hostile", "cust-ada", "t-no-ids")
    sent = model.requests[1].messages
    [assistant] = [m for m in sent if isinstance(m, AIMessage)]
    asked = sorted(str(c["id"]) for c in [*assistant.tool_calls, *assistant.invalid_tool_calls])
    answered = sorted(m.tool_call_id for m in sent if isinstance(m, ToolMessage))
    assert asked == answered == ["call_missing_0", "call_missing_1", "call_missing_2"]
    assert sorted(answers(state)) == answered
    assert harness.handler_calls == {"lookup_order": 1}


@pytest.mark.parametrize("odd", ["resp_\x00evil", "resp_" + "r" * 1_000_000, "resp\nforged"], ids=["nul", "1mb", "newline"])
def test_a_provider_response_id_is_audited_bounded_and_never_ends_the_run(harness: Harness, odd: str) -> None:
    """The provider's response id (or a proxy's, or a compatible server's) went into every
    ``model.response`` event as it came: a NUL in it made the audit append fail on PostgreSQL and
    the run crash, and a megabyte of it was stored once per turn. An id that is not a short
    printable word is audited as its digest; an ordinary one stays as it is."""
    first = ai("", tool_call("lookup_order", {"order_id": "O-5512"}, "c1"))
    first.response_metadata = {"id": odd}
    last = ai("done")
    last.response_metadata = {"id": "chatcmpl-ordinary01"}
    state = start(harness.graph(ScriptedChatModel(responses=[first, last])), "x", "cust-ada", "t-odd-response-id")
    assert state["status"] == "done" and answers(state)["c1"]["status"] == "completed"
    ids = [e.response_id for e in harness.store.audit.events() if e.event == "model.response"]
    assert ids[-1] == "chatcmpl-ordinary01"
    assert ids[0] is not None and ids[0].startswith("sha256:") and len(ids[0]) <= 256 and ids[0].isprintable()


def test_provider_numbers_past_64_bits_in_a_response_never_end_the_run(harness: Harness, tmp_path: Path) -> None:
    """Token counts, metadata and opaque items are the provider's (or a proxy's) numbers, kept in
    the checkpointed message: a prompt_tokens of 2**70 (``langchain-openai`` passes it through as
    the message's usage) made the checkpoint write raise and the run crash. Such a number is kept
    as its decimal text (usage the model node has already counted is dropped); an ordinary
    item stays the very same object."""
    wide = 2**70
    first = ai("", tool_call("lookup_order", {"order_id": "O-5512"}, "c1"))
    first.usage_metadata = {"input_tokens": wide, "output_tokens": 5, "total_tokens": wide + 5}
    first.response_metadata = {"id": "resp_wide", "created": wide, "nested": {"values": [1, -wide]}}
    item = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"}
    first.content = [item, {"type": "reasoning", "id": "rs_2", "summary": [], "index": wide}]
    model = ScriptedChatModel(responses=[first, ai("done")])
    pg_url = harness.store._conninfo if isinstance(harness.store, PostgresStore) else None  # type: ignore[attr-defined]
    with open_checkpointer(pg_url, tmp_path) as saver:
        state = start(harness.graph(model, saver), "x", "cust-ada", "t-wide-usage")
    assert state["status"] == "done" and answers(state)["c1"]["status"] == "completed"
    [kept] = [m for m in state["messages"] if isinstance(m, AIMessage) and m.tool_calls]
    assert kept.usage_metadata is None
    assert kept.response_metadata["created"] == str(wide)
    assert kept.response_metadata["nested"] == {"values": [1, str(-wide)]}
    assert kept.content == [item, {"type": "reasoning", "id": "rs_2", "summary": [], "index": str(wide)}]


def test_a_tool_name_longer_than_any_tool_is_refused_and_never_stored_whole(harness: Harness) -> None:
    """No tool is named in more than 128 characters (`MAX_NAME_LENGTH`), but a call's name was
    kept whole in the checkpointed message (arguments are bounded to 64 KB, names were not) and
    sent back to the provider on every later turn. Such a call is screened ``unknown_tool``, its
    name kept as a short preview."""
    name = "lookup_order_" + "x" * 1_000_000
    model = ScriptedChatModel(responses=[ai("", tool_call(name, {"order_id": "O-5512"}, "c1")), ai("done")])
    state = start(harness.graph(model), "x", "cust-ada", "t-long-name")
    assert answers(state)["c1"]["error"] == "unknown_tool"
    assert len(repr(state["messages"])) < 20_000 and len(repr(model.requests[1].messages)) < 20_000
    [event] = rejected_events(harness)
    assert event.code == "unknown_tool" and len(event.detail["requested_name"]) <= 64
