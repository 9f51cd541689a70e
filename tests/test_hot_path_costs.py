"""Fixed costs out of the hot path, counted (not timed): a delivery reads its immutable proposal
once, and a tool's exported definition is built once per process, not once per model turn."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support import Harness, principal, start

from toolgate.graph.review.decisions import decide
from toolgate.graph.state import gateway_state
from toolgate.store import SQLiteStore
from toolgate.testing import ScriptedChatModel, ai, tool_call
from toolgate.tools import registry as registry_module


def test_an_approved_write_reads_its_proposal_once_per_delivery(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = Harness(SQLiteStore(tmp_path / "t.sqlite", key=b"k" * 32))
    model = ScriptedChatModel(
        responses=[
            ai(
                "",
                tool_call("issue_refund", {"order_id": "O-5512", "amount_cents": 4999, "reason": "damaged"}),
            )
        ]
    )
    proposal = start(harness.graph(model), "refund", "cust-ada", "t-reads")["__interrupt__"][0].value[
        "toolgate"
    ]["proposals"][0]
    gateway = harness.gateway()
    decide(gateway, proposal["proposal_id"], principal("fiona"), "approve")
    reads: list[str] = []
    real = harness.store.proposals.get

    def counted(proposal_id: str) -> Any:
        reads.append(proposal_id)
        return real(proposal_id)

    monkeypatch.setattr(harness.store.proposals, "get", counted)
    first = gateway.executor.deliver(proposal["operation_key"], worker_id="w1")
    again = gateway.executor.deliver(proposal["operation_key"], worker_id="w2")
    assert first.status == "succeeded" and again.duplicate
    assert len(reads) <= 1  # at most once for both deliveries (three reads per delivery before)
    assert harness.refunds() == 1


def test_a_tools_definition_is_built_once_per_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = Harness(SQLiteStore(tmp_path / "t.sqlite", key=b"k" * 32))
    specs = list(harness.registry.tools.values())
    builds: list[str] = []
    real = registry_module.openai_tool

    def counted(name: str, description: str, model: Any) -> Any:
        builds.append(name)
        return real(name, description, model)

    monkeypatch.setattr(registry_module, "openai_tool", counted)
    registry_module._openai_definition.cache_clear()
    first = harness.registry.openai_tools(specs)
    first[0]["function"]["name"] = "changed by a caller"  # the caller's copy, never the cached value
    second = harness.registry.openai_tools(specs)
    assert sorted(builds) == sorted(s.wire_name for s in specs)  # once each, not once per turn
    assert second[0]["function"]["name"] == specs[0].wire_name


def test_the_seal_check_reuses_a_mac_only_for_the_objects_it_sealed() -> None:
    """The next node of a run reuses the MACs of values made of the very objects the last node
    sealed; anything else (a client's change arrives as new objects) is MACed afresh."""
    from toolgate.graph.seals.recent import _same_objects

    record = {"call_id": "c1", "tool": "lookup_order", "phase": "done"}
    sealed = {"c1": record}
    assert _same_objects(sealed, sealed)
    assert _same_objects({"c1": record}, sealed)  # LangGraph's reducer: new dict, same values
    assert not _same_objects({"c1": dict(record)}, sealed)  # an equal copy is MACed again
    assert not _same_objects({"c1": record, "c2": record}, sealed)
    assert not _same_objects({**sealed, "c1": {**record, "phase": "read"}}, sealed)
    messages = [object(), object()]
    assert _same_objects(list(messages), messages)
    assert not _same_objects([messages[0], object()], messages)
    assert _same_objects("running", "running") and not _same_objects("done", "running")
    assert not _same_objects(True, 1) and not _same_objects(1.0, 1)  # equal, but not the same JSON
    assert not _same_objects(None, {}) and not _same_objects([], None)


def test_a_changed_budget_is_caught_after_the_seal_cache_was_filled(tmp_path: Path) -> None:
    """A thread's last node filled the process's seal cache; a client's ``update_state`` after it
    is still refused as tampering (the changed value arrives as new objects)."""
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from toolgate.graph.context import Context

    harness = Harness(SQLiteStore(tmp_path / "t.sqlite", key=b"k" * 32))
    model = ScriptedChatModel(
        responses=[
            ai("", tool_call("lookup_order", {"order_id": "O-5512"}, "c1")),
            ai("first"),
            ai("", tool_call("lookup_order", {"order_id": "O-5514"}, "c2")),
            ai("second"),
        ]
    )
    graph = harness.graph(model, checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t-cache"}}
    context = Context(principal=principal("cust-ada"))
    assert graph.invoke({"messages": [HumanMessage("one")]}, config, context=context)["status"] == "done"
    budget = dict(gateway_state(graph.get_state(config).values)["budget"])
    budget["max_tool_calls"] = 10_000
    graph.update_state(config, {"budget": budget})
    state = graph.invoke({"messages": [HumanMessage("two")]}, config, context=context)
    assert state["status"] == "refused"
    assert harness.handler_calls["lookup_order"] == 1
    tampered = [e for e in harness.store.audit.events() if e.event == "state.tampered"]
    assert tampered and tampered[0].detail["keys"] == ["budget"]


def test_a_state_this_process_just_sealed_is_checked_without_a_mac_and_a_change_is_still_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The next node of a run gets the very state the last node sealed: its check computes no MAC
    (nor tag, nor ``all``). A value changed after it, or another seal put on it, is judged in full
    and named as before."""
    import uuid

    from langchain_core.messages import HumanMessage

    from toolgate.graph.seals.seal import Sealer
    from toolgate.graph.seals.updates import apply_update
    from toolgate.store.keys import Keyring

    keys = Keyring(b"k" * 32)
    thread = f"t-exact-{uuid.uuid4()}"
    state: dict[str, Any] = {"messages": [HumanMessage("hi", id="h1")]}
    assert Sealer(keys, thread).tampered_keys(state) == []
    record = {"call_id": "c1", "tool": "lookup_order", "phase": "read"}
    update = Sealer(keys, thread).seal_update(
        state, {"status": "running", "calls": {"c1": record}, "state_version": 3}
    )
    sealed = apply_update(state, update)  # what LangGraph hands the next node: the same objects

    macs: list[str] = []
    real = Keyring.mac_text

    def counted(self: Keyring, purpose: Any, text: str) -> str:
        macs.append(text)
        return real(self, purpose, text)

    monkeypatch.setattr(Keyring, "mac_text", counted)
    checker = Sealer(keys, thread)
    assert checker.sealed_version(sealed) == 3 and checker.tampered_keys(sealed) == []
    assert macs == []
    assert Sealer(keys, thread).tampered_keys({**sealed, "status": "done"}) == ["status"]
    assert macs  # judged in full
    forged = {**sealed, "calls": {"c1": {**record, "phase": "done"}}}
    assert Sealer(keys, thread).tampered_keys(forged) == ["calls"]
    other = Sealer(keys, thread).seal_update(sealed, {"status": "done"})["seal"]
    assert Sealer(keys, thread).tampered_keys({**sealed, "seal": other}) == ["status"]


def test_a_seal_digests_only_the_messages_after_the_same_objects_it_digested_last() -> None:
    """The digests a seal lists for a thread's messages are reused only when the list it digested
    last is the leading part of the new one, made of the very same objects in order (a step
    appends); a message replaced by an equal copy makes the whole list digested again, and the
    list returned is always the full one."""
    from toolgate.graph.seals.recent import RecentDigests

    seen: list[str] = []

    def digest(message: Any) -> str | None:
        seen.append(message["id"])
        return None if message["type"] == "human" else "d-" + message["id"]

    recent = RecentDigests()
    key = ("t-digests", b"k")
    first = [{"id": "h1", "type": "human"}, {"id": "a1", "type": "ai"}]
    assert recent.digests(key, first, digest) == ["d-a1"] and seen == ["h1", "a1"]
    grown = [*first, {"id": "t1", "type": "tool"}]
    seen.clear()
    assert recent.digests(key, grown, digest) == ["d-a1", "d-t1"] and seen == ["t1"]
    copied = [grown[0], dict(grown[1]), grown[2]]  # equal, but not the same object
    seen.clear()
    assert recent.digests(key, copied, digest) == ["d-a1", "d-t1"] and seen == ["h1", "a1", "t1"]
    seen.clear()
    assert recent.digests(key, copied[:1], digest) == [] and seen == ["h1"]  # shorter: afresh
    seen.clear()
    assert recent.digests(("t-other", b"k"), grown, digest) == ["d-a1", "d-t1"] and seen == ["h1", "a1", "t1"]
