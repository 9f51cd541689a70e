"""Checkpointed state carries its schema version: an older thread is migrated, a newer one refused.

The fixture in ``fixtures/state_v1/`` is a real thread saved by the gateway before state had a
version (``fixtures/make_state_v1.py``): a refund by cust-ada waiting at the approval interrupt.
Opened by today's code, it resumes after a real approval, runs its handler once and ends at the
current version. A changed old state is refused before any migration runs; a state newer than
this code is refused with a stable code and left as it is; the registry's steps run in order.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command, Overwrite
from support import REFUND_REQUEST, Harness, principal, shift_store_clock, start

from toolgate.clock import parse_iso
from toolgate.errors import RunRefused
from toolgate.graph import Context
from toolgate.graph.review.decisions import decide
from toolgate.graph.seals import versions as state_versions
from toolgate.graph.seals.seal import (
    LEGACY_SEAL_VERSION,
    SEAL_VERSION,
    Sealer,
    seal_of,
    seal_tags,
    tagged_seal,
)
from toolgate.graph.seals.updates import apply_update
from toolgate.graph.seals.versions import CURRENT_VERSION, UNSUPPORTED, migrate, pending_update
from toolgate.graph.state import gateway_state
from toolgate.store import SQLiteStore
from toolgate.store.chain import verify_chain
from toolgate.testing import ScriptedChatModel, ai, tool_call

FIXTURE = Path(__file__).parent / "fixtures" / "state_v1"
FIXTURE_KEY = b"k" * 32
REFUND = {"order_id": "O-5512", "amount_cents": 4999, "reason": "damaged"}
WAKE: Command[Any] = Command(resume={"wake": True})


def cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def events(harness: Harness, event: str) -> list[Any]:
    return [e for e in harness.store.audit.events() if e.event == event]


@dataclass
class Saved:
    """The fixture's thread, opened by today's code on a copy of its files."""

    harness: Harness
    graph: Any
    thread: str
    proposal_id: str
    operation_key: str

    def values(self) -> dict[str, Any]:
        return dict(gateway_state(self.graph.get_state(cfg(self.thread)).values))

    def resume(self, command: Command[Any] = WAKE) -> dict[str, Any]:
        result: dict[str, Any] = self.graph.invoke(
            command, cfg(self.thread), context=Context(principal=principal("cust-ada"))
        )
        return result


def _sign_proposal(store: SQLiteStore, proposal_id: str) -> None:
    """The fixture's proposal row predates proposal MACs (such a row is refused: see
    tests/test_proposal_mac.py); these tests are about the thread's state, so its row is given the
    MAC toolgate writes today, as if it had been proposed after the upgrade."""
    proposal = store.proposals.get(proposal_id)
    assert proposal is not None and not proposal.authentic
    with store.transaction() as tx:
        tx.execute("DROP TRIGGER proposals_no_update")
        tx.execute(
            "UPDATE proposals SET mac = ? WHERE proposal_id = ?",
            (store.keys.mac("proposal", proposal.sealed()), proposal_id),
        )
        tx.execute(
            "CREATE TRIGGER proposals_no_update BEFORE UPDATE ON proposals"
            " BEGIN SELECT RAISE(ABORT, 'proposals are immutable'); END"
        )
    signed = store.proposals.get(proposal_id)
    assert signed is not None and signed.authentic


@pytest.fixture
def saved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Saved]:
    """A copy of the fixture, its store's clock a minute after the proposal was made (the approval
    window is the store's clock, and the files are older than that window)."""
    copy = tmp_path / "state_v1"
    shutil.copytree(FIXTURE, copy)
    facts = json.loads((copy / "facts.json").read_text())
    store = SQLiteStore(copy / "toolgate.sqlite", key=FIXTURE_KEY)
    shift_store_clock(
        monkeypatch, store, parse_iso(facts["proposed_at"]) + timedelta(minutes=1) - store.now()
    )
    conn = sqlite3.connect(copy / "checkpoints.sqlite", check_same_thread=False)
    harness = Harness(store)
    _sign_proposal(store, facts["proposal_id"])
    graph = harness.graph(ScriptedChatModel(responses=[ai("Your refund is done.")]), SqliteSaver(conn))
    yield Saved(harness, graph, facts["thread_id"], facts["proposal_id"], facts["operation_key"])
    conn.close()
    store.close()


def test_the_fixture_is_a_thread_saved_before_states_had_a_version(saved: Saved) -> None:
    values = saved.values()
    assert "state_version" not in values and values["seal"]["v"] == LEGACY_SEAL_VERSION
    assert values["status"] == "awaiting_approval"
    assert saved.graph.get_state(cfg(saved.thread)).next == ("approval",)
    sealer = Sealer(saved.harness.store.keys, saved.thread)
    assert sealer.tampered_keys(values) == [] and sealer.sealed_version(values) == 1


def test_a_thread_saved_before_versions_resumes_once_approved_and_is_migrated(saved: Saved) -> None:
    decide(saved.harness.gateway(), saved.proposal_id, principal("fiona"), "approve")
    done = saved.resume()
    assert done["status"] == "done"
    assert saved.harness.handler_calls["issue_refund"] == 1 and saved.harness.refunds() == 1
    op = saved.harness.store.operations.get(saved.operation_key)
    assert op is not None and op.status == "succeeded"
    values = saved.values()
    assert values["state_version"] == CURRENT_VERSION == 3 and values["seal"]["v"] == SEAL_VERSION
    sealer = Sealer(saved.harness.store.keys, saved.thread)
    assert sealer.tampered_keys(values) == [] and sealer.sealed_version(values) == 3
    assert events(saved.harness, "state.tampered") == [] and events(saved.harness, "state.refused") == []
    assert verify_chain(saved.harness.store).ok


def test_every_step_after_the_threads_version_runs_once_in_order(
    saved: Saved, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fake version 4: the saved thread (version 1) is stamped 2, migrated to 3, then given to
    the new step once, before the first node runs, and carries version 4 from then on; a new
    thread starts at 4 and never runs a step."""
    seen: list[Any] = []

    def to_version_4(state: Mapping[str, Any]) -> dict[str, Any]:
        seen.append((state.get("state_version"), state.get("status")))
        return {}

    monkeypatch.setattr(state_versions, "MIGRATIONS", (*state_versions.MIGRATIONS, to_version_4))
    decide(saved.harness.gateway(), saved.proposal_id, principal("fiona"), "approve")
    done = saved.resume()
    assert done["status"] == "done" and saved.harness.handler_calls["issue_refund"] == 1
    assert seen == [(3, "awaiting_approval")]
    values = saved.values()
    assert values["state_version"] == 4 and events(saved.harness, "state.tampered") == []
    assert Sealer(saved.harness.store.keys, saved.thread).sealed_version(values) == 4

    fresh = saved.harness.graph(ScriptedChatModel(responses=[ai("hello")]))
    start(fresh, "hi", "cust-ada", "t-new")
    assert gateway_state(fresh.get_state(cfg("t-new")).values)["state_version"] == 4 and len(seen) == 1


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("calls", lambda v: {"c1": {**v["calls"]["c1"], "arguments": {**REFUND, "amount_cents": 9999}}}),
        ("state_version", lambda v: 2),  # claims to be migrated already
        ("status", lambda v: "done"),
    ],
)
def test_a_changed_old_state_is_refused_before_any_migration_runs(
    saved: Saved, monkeypatch: pytest.MonkeyPatch, key: str, value: Any
) -> None:
    steps: list[Any] = []

    def recorded(state: Mapping[str, Any]) -> dict[str, Any]:
        steps.append(state)
        return {}

    monkeypatch.setattr(state_versions, "MIGRATIONS", (recorded,))
    decide(saved.harness.gateway(), saved.proposal_id, principal("fiona"), "approve")
    saved.graph.update_state(cfg(saved.thread), {key: value(saved.values())})
    final = saved.resume()
    assert steps == []
    assert final["status"] == "refused" and saved.values().get("state_version") is None
    assert saved.harness.handler_calls["issue_refund"] == 0 and saved.harness.payments() == 0
    tampered = events(saved.harness, "state.tampered")
    assert len(tampered) == 1 and tampered[0].detail["keys"] == [key]


# ---- threads written by today's code, on both backends -----------------------------------------


def waiting(harness: Harness, thread: str) -> tuple[Any, str]:
    """A refund of cust-ada's approved by fiona, its thread still paused at the interrupt."""
    model = ScriptedChatModel(responses=[ai("", tool_call("issue_refund", REFUND, "c1")), ai("done")])
    graph = harness.graph(model)
    facts = start(graph, REFUND_REQUEST, "cust-ada", thread)["__interrupt__"][0].value["toolgate"][
        "proposals"
    ][0]
    decide(harness.gateway(), facts["proposal_id"], principal("fiona"), "approve")
    return graph, facts["operation_key"]


def forge(harness: Harness, graph: Any, thread: str, update: dict[str, Any]) -> None:
    """Apply ``update`` with a seal that verifies: written by trusted code (another release)."""
    values = gateway_state(graph.get_state(cfg(thread)).values)
    graph.update_state(
        cfg(thread), {**update, "seal": seal_of(harness.store.keys, thread, apply_update(values, update))}
    )


def test_a_new_thread_starts_at_the_current_version(harness: Harness) -> None:
    graph, _ = waiting(harness, "t-fresh")
    values = gateway_state(graph.get_state(cfg("t-fresh")).values)
    assert values["state_version"] == CURRENT_VERSION and values["seal"]["v"] == SEAL_VERSION
    assert Sealer(harness.store.keys, "t-fresh").sealed_version(values) == CURRENT_VERSION


def test_a_newer_state_is_refused_with_a_stable_code_and_left_as_it_is(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph, operation_key = waiting(harness, "t-newer")
    forge(harness, graph, "t-newer", {"state_version": CURRENT_VERSION + 1})
    before = gateway_state(graph.get_state(cfg("t-newer")).values)
    with pytest.raises(RunRefused, match=UNSUPPORTED) as refused:
        graph.invoke(WAKE, cfg("t-newer"), context=Context(principal=principal("cust-ada")))
    assert refused.value.code == UNSUPPORTED == "state_version_unsupported"
    assert harness.handler_calls["issue_refund"] == 0 and harness.payments() == 0
    after = gateway_state(graph.get_state(cfg("t-newer")).values)
    assert after == before and after["state_version"] == CURRENT_VERSION + 1
    op = harness.store.operations.get(operation_key)
    assert op is not None and op.status == "approved"
    refusals = events(harness, "state.refused")
    assert [(e.code, e.thread_id, e.result) for e in refusals] == [(UNSUPPORTED, "t-newer", "refused")]
    assert refusals[0].detail == {
        "version": CURRENT_VERSION + 1,
        "supported": CURRENT_VERSION,
        "node": "approval",
    }
    assert events(harness, "state.tampered") == []

    # code that knows that version runs the very same thread, once
    monkeypatch.setattr(state_versions, "MIGRATIONS", (*state_versions.MIGRATIONS, lambda state: {}))
    done = graph.invoke(WAKE, cfg("t-newer"), context=Context(principal=principal("cust-ada")))
    assert done["status"] == "done" and harness.handler_calls["issue_refund"] == 1 and harness.payments() == 1


def without_version(values: Mapping[str, Any]) -> dict[str, Any]:
    """The version emptied and its MAC dropped, the seal relabelled as made before versions (one
    entry per key, as a version-1 seal holds them)."""
    tags = {k: v for k, v in seal_tags(values["seal"]).items() if k != "state_version"}
    return {"state_version": None, "seal": {**tags, "all": values["seal"]["all"], "v": LEGACY_SEAL_VERSION}}


def without_version_tag(seal: Mapping[str, Any]) -> dict[str, str]:
    """``seal`` without the tag of ``state_version`` (the last key it tags)."""
    tags = {k: v for k, v in seal_tags(seal).items() if k != "state_version"}
    return tagged_seal(tags, seal["all"])


@pytest.mark.parametrize(
    ("claim", "keys"),
    [
        (lambda v: {"state_version": CURRENT_VERSION + 1}, ["state_version"]),  # newer, unsealed
        # older, to be migrated again (emptied where the version is stored: an empty channel of
        # its own reads as the grouped one, `gateway_state`)
        (lambda v: {"bookkeeping": {"state_version": None}}, ["state_version"]),
        (lambda v: {"seal": without_version_tag(v["seal"])}, ["seal"]),
        (lambda v: {"seal": {"v": LEGACY_SEAL_VERSION}, "state_version": CURRENT_VERSION + 1}, ["seal"]),
    ],
    ids=["newer", "emptied", "mac-dropped", "seal-replaced-newer"],
)
def test_a_version_claimed_outside_the_gateway_is_tampering(
    harness: Harness, claim: Any, keys: list[str]
) -> None:
    graph, _ = waiting(harness, "t-claim")
    graph.update_state(cfg("t-claim"), claim(gateway_state(graph.get_state(cfg("t-claim")).values)))
    final = graph.invoke(WAKE, cfg("t-claim"), context=Context(principal=principal("cust-ada")))
    assert final["status"] == "refused" and harness.payments() == 0
    tampered = events(harness, "state.tampered")
    assert len(tampered) == 1 and tampered[0].detail["keys"] == keys
    # the refusal seals no version it was not shown by a seal: the thread stays refused, quietly
    assert gateway_state(graph.get_state(cfg("t-claim")).values).get("state_version") in (
        None,
        CURRENT_VERSION,
    )
    again = graph.invoke(
        {"messages": [HumanMessage("again")]},
        cfg("t-claim"),
        context=Context(principal=principal("cust-ada")),
    )
    assert again["status"] == "refused" and len(events(harness, "state.tampered")) == 1
    assert events(harness, "state.refused") == []


def test_a_current_seal_cannot_pass_for_one_made_before_versions(harness: Harness) -> None:
    """Every MAC names its seal's form: relabelled as a version-1 seal, none of them verifies."""
    graph, _ = waiting(harness, "t-relabel")
    values = gateway_state(graph.get_state(cfg("t-relabel")).values)
    assert Sealer(harness.store.keys, "t-relabel").tampered_keys(
        apply_update(values, without_version(values))
    )
    graph.update_state(cfg("t-relabel"), without_version(values))
    final = graph.invoke(WAKE, cfg("t-relabel"), context=Context(principal=principal("cust-ada")))
    assert final["status"] == "refused" and harness.payments() == 0
    assert "calls" in events(harness, "state.tampered")[0].detail["keys"]


# ---- the registry itself (no I/O) --------------------------------------------------------------


def step(label: str, seen: list[tuple[str, Any]]) -> state_versions.Migration:
    def apply(state: Mapping[str, Any]) -> dict[str, Any]:
        seen.append((label, state.get("state_version")))
        return {"status_reason": state.get("status_reason", "") + label, "calls": {label: {"call_id": label}}}

    return apply


def test_the_registry_applies_each_pending_step_in_order_to_what_the_last_left() -> None:
    seen: list[tuple[str, Any]] = []
    steps = (step("a", seen), step("b", seen), step("c", seen))
    old = {"seal": {"v": "1"}, "status_reason": "", "calls": {"c1": {"call_id": "c1"}}}
    update = migrate(old, steps)
    assert seen == [("a", None), ("b", 2), ("c", 3)]
    assert update["state_version"] == 4 and update["status_reason"] == "abc"
    assert isinstance(update["calls"], Overwrite) and list(update["calls"].value) == ["c1", "a", "b", "c"]
    assert old == {"seal": {"v": "1"}, "status_reason": "", "calls": {"c1": {"call_id": "c1"}}}

    seen.clear()
    assert migrate({**old, "state_version": 3}, steps) == {
        "state_version": 4,
        "status_reason": "c",
        "calls": {"c": {"call_id": "c"}},
    }
    assert seen == [("c", 3)]
    assert migrate({**old, "state_version": 4}, steps) == {}
    with pytest.raises(ValueError, match="newer"):
        migrate({**old, "state_version": 5}, steps)


def test_the_current_version_is_two_and_a_new_thread_is_stamped_not_migrated() -> None:
    """Named when the current version was 2; 3 since ``unaudited_response`` (issue 31)."""
    assert CURRENT_VERSION == state_versions.latest_version() == 1 + len(state_versions.MIGRATIONS) == 3
    assert migrate({"seal": {"v": "1"}}) == {"state_version": 3}
    assert migrate({"seal": {"v": "5"}, "state_version": 2}) == {"state_version": 3}
    assert pending_update({"messages": [HumanMessage("hi")]}, (lambda s: {"status": "x"},) * 3) == {
        "state_version": 4
    }
    assert pending_update({"seal": {}, "state_version": 3}) == {}
