"""Relevant tools per request (`toolgate.policy.tool_selection`): at most N of the principal's
visible tools, never a hidden one, stable order; measured on the 40-tool catalog; an offer is no
permission (dispatch judges a visible tool that was not offered like any other)."""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from provider_flows import OPENAI
from replay_openai import message_item, response, usage
from support import TEST_KEY, audit_events, principal, start, tool_messages

from toolgate.evals.catalog_wide import DISTRACTORS, wide_catalog
from toolgate.evals.selection_measure import measure, selection_cases
from toolgate.graph.bootstrap import initialize_store
from toolgate.graph.nodes.prompt_cache import prefix_digest
from toolgate.graph.nodes.tool_offer import conversation_of
from toolgate.policy.authorization import visible_tools
from toolgate.policy.identities import IdentityDirectory
from toolgate.policy.principal import Principal
from toolgate.policy.tool_selection import Conversation, select_tools
from toolgate.releases.bundle import ReleaseEnv
from toolgate.store import SQLiteStore
from toolgate.testing import ScriptedChatModel, ai, open_test_app, tool_call
from toolgate.tools.demo.identities import demo_principals, seed_demo_identities
from toolgate.tools.demo.release import DEMO_RELEASES
from toolgate.tools.registry import Registry

REPO = Path(__file__).resolve().parents[1]
WIDE = DEMO_RELEASES["ops-tools/1.1.0"]


@pytest.fixture
def sqlite(tmp_path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "toolgate.sqlite", key=TEST_KEY)
    try:
        initialize_store(store, WIDE)
        seed_demo_identities(IdentityDirectory(store))
        yield store
    finally:
        store.close()


@pytest.fixture
def catalog(sqlite: SQLiteStore) -> Registry:
    return wide_catalog(ReleaseEnv(store=sqlite, secret=TEST_KEY))


def test_the_catalog_holds_the_demo_tools_and_28_distractors(sqlite: SQLiteStore, catalog: Registry) -> None:
    demo = set(WIDE.registry(ReleaseEnv(store=sqlite, secret=TEST_KEY)).tools)
    assert len(catalog.tools) == 40 and len(DISTRACTORS) == 28 and len(demo) == 12
    assert demo < set(catalog.tools)


def _principals() -> list[Principal]:
    """Every demo identity, and principals with random scope subsets, roles and tenants."""
    people = list(demo_principals().values())
    rng = random.Random(16)
    scopes = sorted({s for p in people for s in p.scopes} | {"orders:read", "ops:read", "crm:read"})
    for i in range(40):
        people.append(
            Principal.from_dict(
                {
                    "user_id": f"u{i}",
                    "tenant_id": rng.choice(["acme", "globex"]),
                    "roles": rng.sample(["customer", "support", "operator", "finance"], rng.randint(0, 2)),
                    "scopes": rng.sample(scopes, rng.randint(0, len(scopes))),
                }
            )
        )
    return people


def _requests(registry: Registry) -> list[Conversation]:
    """Dataset inputs, random word salads of tool names, and states that name hidden tools."""
    rng = random.Random(1616)
    texts = [case.input for case in selection_cases()][:40]
    names = sorted(registry.tools)
    texts += [" ".join(rng.sample(names, 3)).replace("_", " ") + " O-5512 SKU-7 V-100" for _ in range(10)]
    out = [Conversation(request=t) for t in texts]
    out += [
        Conversation(
            request=rng.choice(texts),
            called=frozenset(rng.sample(names, 4)),
            result_keys=frozenset({"job_id", "order_id"}),
            pending=frozenset(rng.sample(names, 2)),
        )
        for _ in range(15)
    ]
    return out


def test_never_a_hidden_tool_at_most_n_sorted_and_deterministic(catalog: Registry) -> None:
    """Property-style over principals and requests: the offer is a subset of the visible tools,
    of size min(N, visible), sorted by name, the same for the same input; a catalog of at most N
    visible tools is offered whole. Conversation state naming hidden tools changes nothing."""
    checked = 0
    for person in _principals():
        visible = {s.name for s in visible_tools(catalog, person)}
        for conversation in _requests(catalog):
            for limit in (1, 3, 8):
                seen, offered = select_tools(catalog, person, conversation, limit, now=None)
                names = [s.name for s in offered]
                assert {s.name for s in seen} == visible
                assert set(names) <= visible, (person.user_id, conversation)
                assert len(names) == min(limit, len(visible))
                assert names == sorted(names)
                assert names == [
                    s.name for s in select_tools(catalog, person, conversation, limit, now=None)[1]
                ]
                if len(visible) <= limit:
                    assert set(names) == visible
                checked += 1
    assert checked > 5000


def test_intent_and_conversation_state_pick_the_tools(catalog: Registry) -> None:
    lee = principal("lee")

    def offered(conversation: Conversation, limit: int = 3) -> list[str]:
        return [s.name for s in select_tools(catalog, lee, conversation, limit, now=None)[1]]

    assert "lookup_order" in offered(Conversation(request="Where is order O-5512?"))  # argument pattern
    assert "get_inventory" in offered(Conversation(request="How many SKU-7 are in stock?"))
    vague = Conversation(request="and then?")
    assert offered(vague, 1) == ["check_job_status"]  # no signal: the first by name
    # a natural follow-up: a result of this task returned the argument create_purchase_order takes
    after_preview = Conversation(request="and then?", result_keys=frozenset({"preview_token"}))
    assert offered(after_preview, 1) == ["create_purchase_order"]
    # a pending proposal's tool, and a tool already called in this task
    assert offered(Conversation(request="and then?", pending=frozenset({"submit_filing"})), 1) == [
        "submit_filing"
    ]
    assert offered(Conversation(request="?", called=frozenset({"update_inventory"})), 1) == [
        "update_inventory"
    ]


def test_the_conversation_is_read_from_the_current_task_only() -> None:
    state = {
        "messages": [
            HumanMessage("first task"),
            AIMessage("", tool_calls=[tool_call("lookup_order", {"order_id": "O-5512"}, "c0")]),
            HumanMessage("Run the Q1 sales summary."),
            AIMessage("", tool_calls=[tool_call("submit_report_job", {}, "c1")]),
            ToolMessage(json.dumps({"status": "completed", "data": {"job_id": "JOB-1"}}), tool_call_id="c1"),
        ],
        "calls": {"c9": {"tool": "issue_refund", "phase": "proposed"}, "c8": {"tool": "x", "phase": "done"}},
    }
    conversation = conversation_of(state)  # type: ignore[arg-type]
    assert conversation.request == "Run the Q1 sales summary."
    assert conversation.called == {"submit_report_job"}
    assert {"job_id", "status", "data"} <= conversation.result_keys
    assert conversation.pending == {"issue_refund"}


def test_on_the_40_tool_catalog_every_case_offers_at_most_8_and_keeps_its_tool(catalog: Registry) -> None:
    """The measurement the bench reports. Recall with selection is 71/72: the one miss is
    ``args-retry-sku-missing-prefix``, whose whole request is "Please check it." (no intent, no
    earlier call: nothing says inventory). With the full catalog every expected tool is offered,
    at up to 32 tools a request."""
    cases = selection_cases()
    full = measure(catalog, cases, catalog="full", limit=None)
    selected = measure(catalog, cases, catalog="selected", limit=8)
    assert full.cases == selected.cases == len(cases) == 72
    assert selected.offered_max == 8 and full.offered_max == 32
    assert (full.recall_hits, full.recall_cases) == (72, 72)
    assert (selected.recall_hits, selected.recall_cases) == (71, 72)
    assert selected.missed == ["args-retry-sku-missing-prefix"]
    assert selected.chooser_hits >= full.chooser_hits


def test_the_bench_writes_its_results_and_prints_one_line_per_catalog(tmp_path: Path) -> None:
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import tool_selection as bench
    finally:
        sys.path.remove(str(REPO / "bench"))
    full, selected = bench.run()
    assert full.line().startswith("catalog=full tools=40 cases=72 offered_max=32 ")
    assert selected.line().startswith(
        "catalog=selected_max8 tools=40 cases=72 offered_max=8 offered_mean=8.0 "
    )
    assert "recall=98.6% (71/72) chooser=lexical" in selected.line()


def test_a_visible_tool_not_offered_is_still_judged_normally_and_the_offer_is_audited(
    sqlite: SQLiteStore,
) -> None:
    """lee sees nine tools; with one offered per request, a call to get_inventory (visible, not
    offered) is accepted and runs; a call to a tool lee may not see is refused as before."""
    registry = WIDE.registry(ReleaseEnv(store=sqlite, secret=TEST_KEY))
    model = ScriptedChatModel(
        responses=[
            ai(
                "",
                tool_call("get_inventory", {"sku": "SKU-7"}, "c_stock"),
                tool_call("get_service_status", {"service_alias": "web"}, "c_hidden"),
            ),
            ai("Done."),
        ]
    )
    app = open_test_app(model=model, tools=registry, policy=WIDE.policy, store=sqlite, start=False)
    graph = app.compiled(checkpointer=InMemorySaver())
    final = start(graph, "Where is order O-5512?", "lee", "t-offer", max_tools_per_request=1)
    assert model.requests[0].tool_names == ["lookup_order"]
    results = {m.tool_call_id: json.loads(str(m.content)) for m in tool_messages(final)}
    assert results["c_stock"]["status"] == "completed"
    assert results["c_hidden"]["status"] == "rejected" and results["c_hidden"]["error"] == "unauthorized"
    accepted = [e.call_id for e in audit_events(sqlite, "call.accepted")]
    assert "c_stock" in accepted
    responses = audit_events(sqlite, "model.response")
    assert responses[0].detail["tools_offered"] == ["lookup_order"]
    assert [len(e.detail["tools_offered"]) for e in responses] == [1, 1]
    assert all(e.detail["tools_exposed"] == 9 for e in responses)


def test_the_wire_carries_only_the_offer_and_the_cache_key_is_over_it(
    sqlite: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real OpenAI client against the replay: the request's tools are exactly the offer (in
    name order) and its ``prompt_cache_key`` digests those tools, not the nine lee may see."""
    OPENAI.local_only_here(monkeypatch)
    registry = WIDE.registry(ReleaseEnv(store=sqlite, secret=TEST_KEY))
    answer = response("resp_sel", [message_item("msg_sel", "ok")], model="gpt-5-mini", tokens=usage(3, 1))
    with OPENAI.serve([answer]) as replay:
        app = open_test_app(
            model=OPENAI.model_on(replay), tools=registry, policy=WIDE.policy, store=sqlite, start=False
        )
        gateway = app.gateway
        start(
            app.compiled(checkpointer=InMemorySaver()),
            "Stock of SKU-7?",
            "lee",
            "t-w",
            max_tools_per_request=2,
        )
    (body,) = replay.bodies()
    names = [t["name"] for t in body["tools"]]
    (event,) = audit_events(sqlite, "model.response")
    assert names == event.detail["tools_offered"] and len(names) == 2 and "get_inventory" in names
    assert body["prompt_cache_key"] == f"toolgate:{WIDE.id}:{prefix_digest(gateway.instructions, names)}"
