"""Red team: a thread's seal is one seal. Each key's MAC is valid on its own, so a value and its
MAC copied from another checkpoint of the same thread must still be noticed: otherwise a refused
thread is un-refused by copying back its old ``status`` and runs on the values it was refused for,
and a spent budget is reset by copying back an old ``budget``."""

from __future__ import annotations

import base64
import math
from typing import Any

from langchain_core.messages import HumanMessage
from langgraph.types import Command
from support import REFUND_REQUEST, Harness, principal, start

from toolgate.graph import Context
from toolgate.graph.review.decisions import decide
from toolgate.graph.seals.seal import (
    FORM_4_TAG_CHARS,
    FULL_MACS_SEAL_VERSION,
    HEX_SEAL_VERSION,
    PREVIOUS_SEAL_VERSION,
    SEAL_VERSION,
    TAG_CHARS,
    TAGGED_SEAL_VERSION,
    Sealer,
    seal_tags,
    seal_text,
    sealed_keys,
    tagged_seal,
)
from toolgate.graph.state import gateway_state
from toolgate.testing import ScriptedChatModel, ai, tool_call

LOOKUP = {"order_id": "O-5512"}


def cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def tampered(harness: Harness, thread: str) -> list[Any]:
    return [e for e in harness.store.audit.events() if e.event == "state.tampered" and e.thread_id == thread]


def splice(graph: Any, thread: str, old: dict[str, Any], keys: tuple[str, ...]) -> None:
    """Copy ``keys`` and their MACs from the older values ``old`` into the thread's current state."""
    now = gateway_state(graph.get_state(cfg(thread)).values)
    tags = {**seal_tags(now["seal"]), **{k: seal_tags(old["seal"])[k] for k in keys}}
    seal = tagged_seal(tags, now["seal"]["all"])
    graph.update_state(cfg(thread), {**{k: old.get(k) for k in keys}, "seal": seal})


def test_a_refused_thread_cannot_be_unrefused_with_its_own_old_status(harness: Harness) -> None:
    refund = {**LOOKUP, "amount_cents": 1000, "reason": "damaged"}
    model = ScriptedChatModel(responses=[ai("", tool_call("issue_refund", refund, "c1")), ai("unreachable")])
    graph = harness.graph(model)
    start(graph, REFUND_REQUEST, "cust-ada", "t-unrefuse")
    before = gateway_state(graph.get_state(cfg("t-unrefuse")).values)
    assert before["status"] == "awaiting_approval"
    # raise the thread's own limits: noticed, refused, and the refusal is sealed
    graph.update_state(
        cfg("t-unrefuse"),
        {
            "budget": {**before["budget"], "max_model_turns": 10**6},
            "deadline_at": "2999-01-01T00:00:00.000000Z",
        },
    )
    refused = graph.invoke(Command(resume={"wake": True}), cfg("t-unrefuse"), context=Context())
    assert refused["status"] == "refused" and len(tampered(harness, "t-unrefuse")) == 1
    # copy back the status (and its reason) sealed before the tampering, with their MACs
    splice(graph, "t-unrefuse", before, ("status", "status_reason"))
    again = graph.invoke(
        {"messages": [HumanMessage("go on")]},
        cfg("t-unrefuse"),
        context=Context(principal=principal("cust-ada")),
    )
    assert again["status"] == "refused"
    assert model._position == 1  # the model never ran again
    assert [e.detail["keys"] for e in tampered(harness, "t-unrefuse")][1:] == [["seal"]]


def test_a_spent_budget_cannot_be_reset_with_an_older_budget_of_the_thread(harness: Harness) -> None:
    model = ScriptedChatModel(
        responses=[ai("", tool_call("lookup_order", LOOKUP, "c1")), ai("one"), ai("two"), ai("three")]
    )
    graph = harness.graph(model)
    start(graph, "status of O-5512", "cust-ada", "t-budget", max_model_turns=2)
    spent = gateway_state(graph.get_state(cfg("t-budget")).values)
    assert spent["budget"]["model_turns"] == 2
    early = next(
        v
        for v in (gateway_state(s.values) for s in graph.get_state_history(cfg("t-budget")))
        if (v.get("budget") or {}).get("model_turns") == 1 and v.get("seal")
    )
    splice(graph, "t-budget", early, ("budget",))
    again = graph.invoke(
        {"messages": [HumanMessage("and now?")]},
        cfg("t-budget"),
        context=Context(principal=principal("cust-ada")),
    )
    assert again["status"] == "refused"
    assert model._position == 2  # no third model turn
    assert [e.detail["keys"] for e in tampered(harness, "t-budget")] == [["seal"]]


def _form_2(harness: Harness, thread: str, values: dict[str, Any]) -> dict[str, str]:
    """The seal a thread saved before form 3 carries: MACs naming form 2, no ``all``."""
    sealer = Sealer(harness.store.keys, thread)
    return {
        "v": PREVIOUS_SEAL_VERSION,
        **{k: sealer._mac(k, values, PREVIOUS_SEAL_VERSION) for k in sealed_keys()},
    }


def test_a_thread_sealed_before_form_3_resumes_and_is_sealed_again_in_the_current_form(
    harness: Harness,
) -> None:
    refund = {**LOOKUP, "amount_cents": 1000, "reason": "damaged"}
    model = ScriptedChatModel(responses=[ai("", tool_call("issue_refund", refund, "c1")), ai("done")])
    graph = harness.graph(model)
    facts = start(graph, REFUND_REQUEST, "cust-ada", "t-form2")["__interrupt__"][0].value["toolgate"][
        "proposals"
    ][0]
    values = gateway_state(graph.get_state(cfg("t-form2")).values)
    graph.update_state(cfg("t-form2"), {"seal": _form_2(harness, "t-form2", values)})
    decide(harness.gateway(), facts["proposal_id"], principal("fiona"), "approve")
    final = graph.invoke(Command(resume={"wake": True}), cfg("t-form2"), context=Context())
    assert final["status"] == "done" and harness.refunds() == 1 and not tampered(harness, "t-form2")
    assert gateway_state(final)["seal"]["v"] == SEAL_VERSION and "all" in gateway_state(final)["seal"]


def test_a_current_seal_cannot_pass_for_form_2_to_shed_its_all(harness: Harness) -> None:
    model = ScriptedChatModel(
        responses=[ai("", tool_call("lookup_order", LOOKUP, "c1")), ai("one"), ai("two")]
    )
    graph = harness.graph(model)
    start(graph, "status of O-5512", "cust-ada", "t-shed")
    seal = dict(gateway_state(graph.get_state(cfg("t-shed")).values)["seal"])
    del seal["all"]
    graph.update_state(cfg("t-shed"), {"seal": {**seal, "v": PREVIOUS_SEAL_VERSION}})
    again = graph.invoke(
        {"messages": [HumanMessage("and now?")]},
        cfg("t-shed"),
        context=Context(principal=principal("cust-ada")),
    )
    assert again["status"] == "refused" and model._position == 2
    assert len(tampered(harness, "t-shed")) == 1


def _form_3(harness: Harness, thread: str, values: dict[str, Any]) -> dict[str, str]:
    """The seal a thread saved before form 4 carries: full MACs naming form 3, ``all`` over them."""
    sealer = Sealer(harness.store.keys, thread)
    seal = {
        "v": FULL_MACS_SEAL_VERSION,
        **{k: sealer._mac(k, values, FULL_MACS_SEAL_VERSION) for k in sealed_keys()},
    }
    return {**seal, "all": sealer._all(seal, FULL_MACS_SEAL_VERSION)}


def test_a_thread_sealed_in_form_3_resumes_and_is_sealed_again_in_the_short_form(harness: Harness) -> None:
    refund = {**LOOKUP, "amount_cents": 1000, "reason": "damaged"}
    model = ScriptedChatModel(responses=[ai("", tool_call("issue_refund", refund, "c1")), ai("done")])
    graph = harness.graph(model)
    facts = start(graph, REFUND_REQUEST, "cust-ada", "t-form3")["__interrupt__"][0].value["toolgate"][
        "proposals"
    ][0]
    values = gateway_state(graph.get_state(cfg("t-form3")).values)
    assert values["seal"]["v"] == SEAL_VERSION == "6"
    # tags, not MACs: two bytes a key, and the 32 bytes of ``all``, as unpadded base64
    assert len(values["seal"]["tags"]) == math.ceil(TAG_CHARS // 2 * len(sealed_keys()) * 4 / 3)
    assert list(seal_tags(values["seal"])) == list(sealed_keys())
    assert all(len(tag) == TAG_CHARS for tag in seal_tags(values["seal"]).values())
    assert len(values["seal"]["all"]) == 43 and values["seal"]["all"] == seal_text(
        Sealer(harness.store.keys, "t-form3")._all(
            {k: Sealer(harness.store.keys, "t-form3")._mac(k, values) for k in sealed_keys()}
        )
    )
    graph.update_state(cfg("t-form3"), {"seal": _form_3(harness, "t-form3", values)})
    decide(harness.gateway(), facts["proposal_id"], principal("fiona"), "approve")
    final = graph.invoke(Command(resume={"wake": True}), cfg("t-form3"), context=Context())
    assert final["status"] == "done" and harness.refunds() == 1 and not tampered(harness, "t-form3")
    assert gateway_state(final)["seal"]["v"] == SEAL_VERSION and all(
        len(tag) == TAG_CHARS for tag in seal_tags(gateway_state(final)["seal"]).values()
    )


def test_a_short_seal_cannot_pass_for_form_3_and_a_form_3_seal_must_bind_its_macs(harness: Harness) -> None:
    model = ScriptedChatModel(
        responses=[ai("", tool_call("lookup_order", LOOKUP, "c1")), ai("one"), ai("two"), ai("three")]
    )
    graph = harness.graph(model)
    start(graph, "status of O-5512", "cust-ada", "t-relabel3")
    seal = dict(gateway_state(graph.get_state(cfg("t-relabel3")).values)["seal"])
    graph.update_state(cfg("t-relabel3"), {"seal": {**seal, "v": FULL_MACS_SEAL_VERSION}})
    again = graph.invoke(
        {"messages": [HumanMessage("and now?")]},
        cfg("t-relabel3"),
        context=Context(principal=principal("cust-ada")),
    )
    assert again["status"] == "refused" and model._position == 2
    assert len(tampered(harness, "t-relabel3")) == 1

    sealer = Sealer(harness.store.keys, "t-form3-all")
    values = {**gateway_state(graph.get_state(cfg("t-relabel3")).values)}
    unbound = {**_form_3(harness, "t-form3-all", values), "all": "0" * 64}
    assert sealer.tampered_keys({**values, "seal": unbound}) == ["seal"]
    assert sealer.tampered_keys({**values, "seal": _form_3(harness, "t-form3-all", values)}) == []


def test_a_short_seal_refuses_a_changed_value_even_when_every_tag_is_kept(harness: Harness) -> None:
    model = ScriptedChatModel(responses=[ai("", tool_call("lookup_order", LOOKUP, "c1")), ai("one")])
    graph = harness.graph(model)
    start(graph, "status of O-5512", "cust-ada", "t-tags")
    values = gateway_state(graph.get_state(cfg("t-tags")).values)
    sealer = Sealer(harness.store.keys, "t-tags")
    assert sealer.tampered_keys(values) == []
    # the tags name the key; a tag that happened to match would still leave `all` unequal
    changed = {**values, "release": "ops-tools/9.9.9"}
    assert Sealer(harness.store.keys, "t-tags").tampered_keys(changed) == ["release"]
    forged_tags = {
        **seal_tags(values["seal"]),
        "release": Sealer(harness.store.keys, "t-tags")._mac("release", changed)[:TAG_CHARS],
    }
    forged_tag = {**changed, "seal": tagged_seal(forged_tags, values["seal"]["all"])}
    assert Sealer(harness.store.keys, "t-tags").tampered_keys(forged_tag) == ["seal"]


def _form_4(harness: Harness, thread: str, values: dict[str, Any]) -> dict[str, str]:
    """The seal a thread saved before form 5 carries: an 8-character tag per key, by name, and
    ``all`` over the full MACs, both naming form 4."""
    sealer = Sealer(harness.store.keys, thread)
    macs = {k: sealer._mac(k, values, TAGGED_SEAL_VERSION) for k in sealed_keys()}
    tags = {k: mac[:FORM_4_TAG_CHARS] for k, mac in macs.items()}
    return {"v": TAGGED_SEAL_VERSION, **tags, "all": sealer._all(macs, TAGGED_SEAL_VERSION)}


def test_a_thread_sealed_in_form_4_resumes_and_is_sealed_again_in_form_5(harness: Harness) -> None:
    refund = {**LOOKUP, "amount_cents": 1000, "reason": "damaged"}
    model = ScriptedChatModel(responses=[ai("", tool_call("issue_refund", refund, "c1")), ai("done")])
    graph = harness.graph(model)
    facts = start(graph, REFUND_REQUEST, "cust-ada", "t-form4")["__interrupt__"][0].value["toolgate"][
        "proposals"
    ][0]
    values = gateway_state(graph.get_state(cfg("t-form4")).values)
    graph.update_state(cfg("t-form4"), {"seal": _form_4(harness, "t-form4", values)})
    decide(harness.gateway(), facts["proposal_id"], principal("fiona"), "approve")
    final = graph.invoke(Command(resume={"wake": True}), cfg("t-form4"), context=Context())
    assert final["status"] == "done" and harness.refunds() == 1 and not tampered(harness, "t-form4")
    assert gateway_state(final)["seal"]["v"] == SEAL_VERSION and set(gateway_state(final)["seal"]) == {"v", "tags", "all"}


def test_a_form_5_seal_cannot_pass_for_form_4_nor_a_form_4_seal_for_form_5(harness: Harness) -> None:
    model = ScriptedChatModel(responses=[ai("", tool_call("lookup_order", LOOKUP, "c1")), ai("one")])
    graph = harness.graph(model)
    start(graph, "status of O-5512", "cust-ada", "t-relabel4")
    values = {**gateway_state(graph.get_state(cfg("t-relabel4")).values)}
    sealer = Sealer(harness.store.keys, "t-relabel4")
    assert sealer.tampered_keys(values) == []
    form_4 = _form_4(harness, "t-relabel4", values)
    assert sealer.tampered_keys({**values, "seal": form_4}) == []
    # the same tags and ``all`` under the other label: neither verifies
    as_4 = {"v": TAGGED_SEAL_VERSION, **seal_tags(values["seal"]), "all": values["seal"]["all"]}
    assert sealer.tampered_keys({**values, "seal": as_4}) != []
    as_5 = tagged_seal({k: form_4[k] for k in sealed_keys()}, form_4["all"])
    assert sealer.tampered_keys({**values, "seal": as_5}) != []
    # a form-4 seal whose ``all`` binds other MACs: every tag matches, the seal does not
    assert sealer.tampered_keys({**values, "seal": {**form_4, "all": "0" * 64}}) == ["seal"]


def _form_5(harness: Harness, thread: str, values: dict[str, Any]) -> dict[str, str]:
    """The seal a thread saved before form 6 carries: the tags as one hex string and ``all`` in
    hex, both over MACs naming form 5."""
    sealer = Sealer(harness.store.keys, thread)
    macs = {k: sealer._mac(k, values, HEX_SEAL_VERSION) for k in sealed_keys()}
    tags = "".join(macs[k][:TAG_CHARS] for k in sealed_keys())
    return {"v": HEX_SEAL_VERSION, "tags": tags, "all": sealer._all(macs, HEX_SEAL_VERSION)}


def test_a_thread_sealed_in_form_5_resumes_and_is_sealed_again_in_form_6(harness: Harness) -> None:
    refund = {**LOOKUP, "amount_cents": 1000, "reason": "damaged"}
    model = ScriptedChatModel(responses=[ai("", tool_call("issue_refund", refund, "c1")), ai("done")])
    graph = harness.graph(model)
    facts = start(graph, REFUND_REQUEST, "cust-ada", "t-form5")["__interrupt__"][0].value["toolgate"][
        "proposals"
    ][0]
    values = gateway_state(graph.get_state(cfg("t-form5")).values)
    form_5 = _form_5(harness, "t-form5", values)
    assert Sealer(harness.store.keys, "t-form5").tampered_keys({**values, "seal": form_5}) == []
    graph.update_state(cfg("t-form5"), {"seal": form_5})
    decide(harness.gateway(), facts["proposal_id"], principal("fiona"), "approve")
    final = graph.invoke(Command(resume={"wake": True}), cfg("t-form5"), context=Context())
    assert final["status"] == "done" and harness.refunds() == 1 and not tampered(harness, "t-form5")
    seal = gateway_state(final)["seal"]
    assert seal["v"] == SEAL_VERSION == "6" and set(seal) == {"v", "tags", "all"} and len(seal["all"]) == 43


def test_a_form_6_seal_cannot_pass_for_form_5_nor_a_form_5_seal_for_form_6(harness: Harness) -> None:
    model = ScriptedChatModel(responses=[ai("", tool_call("lookup_order", LOOKUP, "c1")), ai("one")])
    graph = harness.graph(model)
    start(graph, "status of O-5512", "cust-ada", "t-relabel5")
    values = {**gateway_state(graph.get_state(cfg("t-relabel5")).values)}
    sealer = Sealer(harness.store.keys, "t-relabel5")
    assert sealer.tampered_keys(values) == []
    form_5 = _form_5(harness, "t-relabel5", values)
    assert sealer.tampered_keys({**values, "seal": form_5}) == []
    # the same tags and ``all`` (in hex) under the other label: neither verifies
    hex_tags = "".join(seal_tags(values["seal"])[k] for k in sealed_keys())
    as_5 = {"v": HEX_SEAL_VERSION, "tags": hex_tags, "all": _b64(values["seal"]["all"]).hex()}
    assert sealer.tampered_keys({**values, "seal": as_5}) != []
    as_6 = tagged_seal(seal_tags(form_5), seal_text(form_5["all"]))
    assert sealer.tampered_keys({**values, "seal": as_6}) != []
    # the current form re-encoded is the current seal; its ``all`` binding other MACs is not
    assert tagged_seal(seal_tags(values["seal"]), values["seal"]["all"]) == values["seal"]
    assert sealer.tampered_keys({**values, "seal": {**values["seal"], "all": seal_text("0" * 64)}}) == ["seal"]
    # tags that are not base64, or too many of them, name the seal itself
    assert sealer.tampered_keys({**values, "seal": {**values["seal"], "tags": "!" * 46}}) == ["seal"]
    assert sealer.tampered_keys({**values, "seal": {**values["seal"], "tags": hex_tags}}) == ["seal"]


def _b64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
