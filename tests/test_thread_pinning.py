"""A thread keeps the release it started with until it ends, or an operator migrates it.

The demo releases on one store, through the real routed graph and the real store, on both
backends: ``ops-tools/1.0.0`` (A) is configured, ``ops-tools/1.1.0`` (B) becomes the default
through release control (a promotion, then a new rollout). A thread started under A with an
approval pending resumes and finishes under A. A pin edited in the database is refused and never
acted on; a pin to a release this process cannot load stops the task for review; the operator's
migration moves a thread, audited, and each of its refusals changes nothing.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from langgraph.types import Command
from release_control_support import ADMIN_CREDENTIALS, RESTART, TwoReleases, audit_events, count, run, text
from release_control_support import CANDIDATE as B
from release_control_support import CONTROL as A
from support import cli_env, kv_lines, principal, seed_people, shift_store_clock, toolgate
from test_release_control_routing import admin

from toolgate.errors import ReleaseControlError
from toolgate.graph import Context
from toolgate.graph.review.decisions import decide
from toolgate.graph.state import gateway_state
from toolgate.policy.identities import IdentityDirectory
from toolgate.policy.principal import Principal
from toolgate.releases.migrate import migrate_thread
from toolgate.store.audit import Auditor
from toolgate.store.base import Store
from toolgate.store.rollout import RolloutStore
from toolgate.store.thread_releases import ThreadReleases
from toolgate.testing import ScriptedChatModel, ai, tool_call
from toolgate.tools.demo.identities import demo_token

STATUS = {"service_alias": "web"}
GONE = "ops-tools/9.9.9"


def pin_row(store: Store, thread: str) -> dict[str, Any] | None:
    """The raw pin row (MAC included): what the database holds."""
    with store.transaction(write=False) as tx:
        row = tx.one("SELECT * FROM release_thread_pins WHERE thread_id = ?", (thread,))
    return dict(row) if row else None


def status_of(graph: Any) -> Any:
    """``(pending, status)`` of a thread from the graph's checkpointer (what the CLI passes)."""

    def status(thread: str) -> tuple[bool, str]:
        snapshot = graph.get_state({"configurable": {"thread_id": thread}})
        return bool(snapshot.next), str((snapshot.values or {}).get("status") or "")

    return status


def resume(graph: Any, thread: str) -> dict[str, Any]:
    """Wake ``thread``; the output as clients read it (`gateway_state`)."""
    return gateway_state(
        graph.invoke(
            Command(resume={"wake": True}), {"configurable": {"thread_id": thread}}, context=Context()
        )
    )


def promote_b(two: TwoReleases) -> None:
    control = two.control()
    control.shadow(admin(two), B)
    control.canary(admin(two), B, 100)
    control.promote(admin(two))


@pytest.mark.parametrize("after", ["promoted", "promoted_skewed", "new_shadow", "new_canary"])
def test_a_thread_started_under_a_finishes_under_a_after_the_default_becomes_b(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, after: str
) -> None:
    model_a = ScriptedChatModel(responses=[ai("", tool_call("restart_service", RESTART)), text("restarted")])
    model_b = ScriptedChatModel(responses=[text("B serves new threads")])
    two = TwoReleases(store, tmp_path, models={A: model_a, B: model_b})
    graph = two.graph()
    waiting = run(graph, "restart web, it is stuck", "sam", "t-old")
    [proposal] = waiting["__interrupt__"][0].value["toolgate"]["proposals"]
    assert proposal["release"] == A

    promote_b(two)
    if after == "promoted_skewed":  # no clock decides which release serves a thread
        shift_store_clock(monkeypatch, store, timedelta(days=-2))
    if after.startswith("promoted"):
        assert run(graph, "hello", "sam", "t-new")["release"] == B  # the default is B now
    else:  # and a new rollout begins afterwards (B is the control, A the candidate)
        two.control().shadow(admin(two), A)
        if after == "new_canary":
            two.control().canary(admin(two), A, 100)
    assert two.app.executor_gateway(proposal["operation_key"]).registry.release == A
    decided = decide(
        two.app.gateway_for_proposal(proposal["proposal_id"]),
        proposal["proposal_id"],
        principal("omar"),
        "approve",
    )
    assert decided.operation.status == "approved"
    seq = max(e.seq for e in store.audit.events())

    state = resume(graph, "t-old")

    assert state["status"] == "done" and state["release"] == A
    assert two.handler_calls(A) == 1 and two.handler_calls(B) == 0  # the proposal executed under A
    model_a.assert_complete()
    events = [e for e in store.audit.events() if e.seq > seq and e.thread_id == "t-old"]
    assert events and {e.tool_release for e in events} == {A}
    assert any(e.event == "handler.started" for e in store.audit.events() if e.seq > seq)
    pin = ThreadReleases(store).get("t-old")
    assert (
        pin is not None and pin.authentic and (pin.release, pin.version, pin.changed_by) == (A, 1, "router")
    )


@pytest.mark.parametrize("forged", ["edited", "inserted"])
def test_a_tampered_pin_is_refused_audited_and_never_acted_on(
    store: Store, tmp_path: Path, forged: str
) -> None:
    model_a = ScriptedChatModel(responses=[text("web is up")])
    model_b = ScriptedChatModel(responses=[])
    two = TwoReleases(store, tmp_path, models={A: model_a, B: model_b})
    graph = two.graph()
    thread = "t-edited" if forged == "edited" else "t-forged"
    if forged == "edited":
        assert run(graph, "is web up?", "sam", thread)["release"] == A
    with store.transaction() as tx:
        if forged == "edited":
            tx.execute("UPDATE release_thread_pins SET release = ? WHERE thread_id = ?", (B, thread))
        else:  # a pin written with database access alone, before the thread's first turn
            tx.execute(
                "INSERT INTO release_thread_pins (thread_id, release, tenant_id, rollout_id, changed_by,"
                " version, updated_at, mac) VALUES (?, ?, 'acme', '', 'router', 1, '2026-01-01T00:00:00Z', 'x')",
                (thread, B),
            )
    promote_b(two)  # B, the forged pin's release, is even the default now
    row = pin_row(store, thread)
    calls_a = len(model_a.requests)

    state = run(graph, "is web still up?", "sam", thread)

    assert state["status"] == "needs_review" and state["status_reason"].startswith("thread_pin_tampered")
    assert model_b.requests == [] and len(model_a.requests) == calls_a  # no model ran for it
    assert two.handler_calls(A) == 0 and two.handler_calls(B) == 0
    assert [e.code for e in audit_events(store, "release.refused")] == ["thread_pin_tampered"]
    [stopped] = audit_events(store, "release.thread_stopped")
    assert (stopped.code, stopped.thread_id) == ("thread_pin_tampered", thread)
    assert pin_row(store, thread) == row  # never re-signed, never replaced
    pin = ThreadReleases(store).get(thread)
    assert pin is not None and not pin.authentic
    with pytest.raises(ReleaseControlError) as caught:  # nor migrated
        migrate_thread(two.control(), admin(two), thread, A, thread_status=status_of(graph))
    assert caught.value.code == "thread_pin_tampered" and pin_row(store, thread) == row


def test_a_thread_pinned_to_a_release_this_process_cannot_load_stops_then_migrates(
    store: Store, tmp_path: Path
) -> None:
    model_a = ScriptedChatModel(responses=[text("web is up"), text("back under A")])
    two = TwoReleases(store, tmp_path, models={A: model_a})
    graph = two.graph()
    assert run(graph, "is web up?", "sam", "t-gone")["release"] == A
    # another process, which has 9.9.9 installed, moved the thread there (a signed record)
    ThreadReleases(store).migrate("t-gone", GONE, by="ivy", expect_version=1)

    state = run(graph, "and now?", "sam", "t-gone")

    assert state["status"] == "needs_review" and state["status_reason"].startswith("release_unavailable")
    assert len(model_a.requests) == 1  # A does not silently take the thread over
    [stopped] = audit_events(store, "release.thread_stopped")
    assert (stopped.code, stopped.thread_id, stopped.detail["pinned"]) == (
        "release_unavailable",
        "t-gone",
        GONE,
    )

    before, moved = migrate_thread(two.control(), admin(two), "t-gone", A, thread_status=status_of(graph))
    assert (before, moved.release, moved.version, moved.changed_by) == (GONE, A, 3, "ivy")
    [migrated] = audit_events(store, "release.thread_migrated")
    assert migrated.detail == {"from": GONE, "to": A, "version": 3}  # who: its actor, a keyed hash
    assert migrated.actor_id == Auditor(store, A).actor("ivy") and "ivy" not in str(migrated.detail)
    assert (migrated.thread_id, migrated.tool_release, migrated.tenant_id) == ("t-gone", A, "acme")
    state = run(graph, "once more?", "sam", "t-gone")
    assert state["status"] == "done" and state["release"] == A and len(model_a.requests) == 2


def globex_admin(store: Store) -> Principal:
    directory = IdentityDirectory(store)
    token = directory.add(
        Principal(user_id="gus", tenant_id="globex", roles=frozenset({"admin"})), by=None, token="gus-token-x"
    )
    return directory.authenticate("gus", token or "gus-token-x")


def test_migration_refusals_change_nothing_and_are_audited(store: Store, tmp_path: Path) -> None:
    model_a = ScriptedChatModel(responses=[ai("", tool_call("restart_service", RESTART)), text("web is up")])
    two = TwoReleases(store, tmp_path, models={A: model_a})
    graph = two.graph()
    run(graph, "restart web, it is stuck", "sam", "t-wait")  # awaiting approval
    assert run(graph, "is web up?", "sam", "t-done")["status"] == "done"
    rita = two.app.gateway.directory.authenticate("rita", demo_token("rita"))
    attempts = [
        (rita, "t-wait", B, "missing_role"),
        (globex_admin(store), "t-wait", B, "other_tenant"),
        (admin(two), "t-wait", GONE, "unknown_release"),
        (admin(two), "t-wait", A, "same_release"),
        (admin(two), "t-done", B, "thread_finished"),
        (admin(two), "t-never", B, "unknown_thread"),
    ]
    rows = {t: pin_row(store, t) for t in ("t-wait", "t-done")}
    for actor, thread, to, code in attempts:
        with pytest.raises(ReleaseControlError) as caught:
            migrate_thread(two.control(), actor, thread, to, thread_status=status_of(graph))
        assert caught.value.code == code
    assert {t: pin_row(store, t) for t in rows} == rows
    assert count(store, "release_thread_pins") == 2
    assert [e.code for e in audit_events(store, "release.refused")] == [a[3] for a in attempts]
    assert all(e.detail["action"] == "migrate_thread" for e in audit_events(store, "release.refused"))
    assert audit_events(store, "release.thread_migrated") == []

    before, moved = migrate_thread(two.control(), admin(two), "t-wait", B, thread_status=status_of(graph))
    assert (before, moved.release) == (A, B)
    with pytest.raises(ReleaseControlError) as caught:  # a second operator who read version 1
        ThreadReleases(store).migrate("t-wait", A, by="ivy", expect_version=1)
    assert caught.value.code == "state_changed"
    assert ThreadReleases(store).get("t-wait") == moved


@pytest.mark.parametrize("workers", [6])
def test_concurrent_first_pins_of_one_thread_agree(store: Store, workers: int) -> None:
    import threading
    from concurrent.futures import ThreadPoolExecutor

    RolloutStore(store).setup()
    pins = ThreadReleases(store)
    barrier = threading.Barrier(workers)

    def pin(i: int) -> Any:
        barrier.wait()
        return pins.pin("t-race", A if i % 2 else B, tenant_id="acme")

    with ThreadPoolExecutor(max_workers=workers) as pool:
        got = list(pool.map(pin, range(workers)))
    assert len({(p.release, p.updated_at) for p in got}) == 1 and all(p.authentic for p in got)
    assert count(store, "release_thread_pins", "thread_id = ?", ("t-race",)) == 1


def test_migrate_thread_through_the_cli(tmp_path: Path) -> None:
    from test_cli_doors import (
        all_tables,
        assert_only_refusals_recorded,
        assert_refused,
        audit_seq,
        audit_since,
        run_each,
    )
    from test_release_control_cli import with_evidence

    data_dir = tmp_path / "data"
    seed_people(data_dir)
    env = cli_env(data_dir, TOOLGATE_RELEASE=A)
    db = data_dir / "toolgate.sqlite"
    restart = 'call restart_service {"service_alias": "web", "reason": "stuck after deploy"}'
    first = kv_lines(toolgate(["run", restart, "--as", "sam"], env).stdout)[0]
    assert (first["status"], first["release"]) == ("awaiting_approval", A)
    thread = first["thread"]
    command = ["release", "migrate-thread", thread, "--to", B, "--as"]
    before, seq = all_tables(db), audit_seq(db)
    results = run_each([([*command, who], {**env, **extra}) for extra, who, _ in ADMIN_CREDENTIALS.values()])
    for result, (_, _, (_, code)) in zip(results, ADMIN_CREDENTIALS.values(), strict=True):
        assert_refused(result, code)
    after = all_tables(db)
    assert_only_refusals_recorded(before, after)
    assert sorted(audit_since(db, seq)) == sorted(c for _, _, c in ADMIN_CREDENTIALS.values())

    # an admin with a credential still moves it only to what a rollout could serve
    ungated = toolgate([*command, "ivy"], env, check=False)
    assert_refused(ungated, "gate_not_passed")
    with_evidence(data_dir)  # what `evals run` and `release rollback --dry-run` record
    done = kv_lines(toolgate([*command, "ivy"], env).stdout)[0]
    assert done == {"thread": thread, "migrated": "done", "from": A, "to": B, "by": "ivy"}
    assert ("release.thread_migrated", None) in audit_since(db, seq)
    unknown = toolgate(["release", "migrate-thread", thread, "--to", GONE, "--as", "ivy"], env, check=False)
    assert_refused(unknown, "unknown_release")
