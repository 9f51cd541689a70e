"""Older, validly MAC'd rows copied back with database access alone are refused, on both backends.

A MAC proves trusted code once wrote a row, not that the row is the latest: every change of a
release pointer, rollout, pin and identity is bound into the audit chain with its version and
digest (`toolgate.store.record_versions`). A row copied back over a newer one reads as replayed:
routing falls back to the configured release, pins are not followed, the identity cannot act,
commands refuse, ``release status`` names it and ``audit verify`` names it and fails. Normal
changes and a fresh store verify clean.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from release_control_support import CANDIDATE, CONTROL, TwoReleases, audit_events, run, text
from support import cli_env, kv_lines, open_test_store, toolgate
from test_release_control_routing import admin, table_counts

from toolgate.errors import IdentityError, ReleaseControlError
from toolgate.graph.bootstrap import served_release
from toolgate.policy.identities import IdentityDirectory
from toolgate.releases.status import release_status
from toolgate.store.base import Store
from toolgate.store.chain import verify_chain, verify_versions
from toolgate.store.rollout import RolloutStore
from toolgate.store.thread_releases import ThreadReleases
from toolgate.testing import ScriptedChatModel
from toolgate.tools.demo.identities import demo_token

KEYS = {
    "release_pointer": "configured",
    "release_rollouts": "rollout_id",
    "release_thread_pins": "thread_id",
    "identities": "user_id",
}
"""The key column of each table a test saves and copies back."""


def saved(store: Store, table: str, key: str) -> dict[str, Any]:
    """The row of ``table`` with ``key``, as the database holds it (raw SQL)."""
    with store.transaction(write=False) as tx:
        row = tx.one(f"SELECT * FROM {table} WHERE {KEYS[table]} = ?", (key,))
    assert row is not None
    return dict(row)


def copy_back(store: Store, table: str, row: dict[str, Any]) -> None:
    """Write a saved row's values over the current row (database access alone: no secret)."""
    column = KEYS[table]
    names = [n for n in row if n != column]
    with store.transaction() as tx:
        tx.execute(
            f"UPDATE {table} SET {', '.join(f'{n} = ?' for n in names)} WHERE {column} = ?",
            (*(row[n] for n in names), row[column]),
        )


def promoted(two: TwoReleases) -> None:
    control = two.control()
    control.shadow(admin(two), CANDIDATE)
    control.canary(admin(two), CANDIDATE, 10)
    control.promote(admin(two))


def rolled_back_then_replayed(two: TwoReleases) -> str:
    """Promote the candidate, save its pointer and rollout, roll back, copy the saved rows back;
    the rollout id."""
    store = two.store
    promoted(two)
    pointer = saved(store, "release_pointer", CONTROL)
    rollout = saved(store, "release_rollouts", pointer["rollout_id"])
    two.control().rollback(admin(two))
    assert served_release(store, CONTROL, audit=False) == CONTROL
    copy_back(store, "release_pointer", pointer)
    copy_back(store, "release_rollouts", rollout)
    return str(pointer["rollout_id"])


def test_a_replayed_pointer_and_rollout_do_not_undo_a_rollback(store: Store, tmp_path: Path) -> None:
    models = {
        CONTROL: ScriptedChatModel(responses=[text("control")]),
        CANDIDATE: ScriptedChatModel(responses=[]),
    }
    two = TwoReleases(store, tmp_path, models=models)
    rollout_id = rolled_back_then_replayed(two)
    control = two.control()

    state = RolloutStore(store).state(CONTROL)
    assert state.tampered == ["pointer_replayed", "rollout_replayed"]
    assert state.pointer is not None and state.pointer.replayed and not state.pointer.authentic
    assert served_release(store, CONTROL, audit=False) == CONTROL  # what open_app loads
    before = table_counts(store)
    ran = run(two.graph(), "hello", "cust-ada", "t-after-replay")
    assert ran["release"] == CONTROL and two.handler_calls(CANDIDATE) == 0
    assert ThreadReleases(store).get("t-after-replay") is None  # nothing pinned while tampered
    assert RolloutStore(store).get_pin(rollout_id, "t-after-replay") is None
    for attempt in (lambda: control.rollback(admin(two)), lambda: control.shadow(admin(two), CANDIDATE)):
        with pytest.raises(ReleaseControlError) as caught:
            attempt()
        assert caught.value.code == "release_state_tampered"
    status = release_status(control)
    assert (status["state"], status["tamper"]) == ("tampered", "pointer_replayed,rollout_replayed")
    changed = {t for t, n in table_counts(store).items() if before.get(t) != n}
    assert changed <= {"audit_events", "audit_payloads"}  # refusals are audited; nothing else moves
    refused = [e for e in audit_events(store, "release.refused") if e.code == "release_state_tampered"]
    assert refused and refused[0].detail["records"] == ["pointer_replayed", "rollout_replayed"]

    report = verify_versions(store)
    assert sorted(r.describe() for r in report.replayed) == [
        f"release_pointer:{CONTROL}@v3!=v4",
        f"release_rollout:{rollout_id}@v3!=v4",
    ]
    assert verify_chain(store).ok  # the chain itself is intact: it is what names the replay


def test_a_replayed_thread_pin_is_refused(store: Store, tmp_path: Path) -> None:
    models = {CONTROL: ScriptedChatModel(responses=[text("one")])}
    two = TwoReleases(store, tmp_path, models=models)
    graph = two.graph()
    run(graph, "hello", "sam", "t-moved")
    pins = ThreadReleases(store)
    first = saved(store, "release_thread_pins", "t-moved")
    assert first["release"] == CONTROL
    moved = pins.migrate("t-moved", CANDIDATE, by="ivy", expect_version=1)
    assert moved.version == 2 and pins.get("t-moved") == moved
    copy_back(store, "release_thread_pins", first)  # back to the control, version 1

    replayed = pins.get("t-moved")
    assert (
        replayed is not None and replayed.release == CONTROL and replayed.replayed and not replayed.authentic
    )
    with pytest.raises(ReleaseControlError) as caught:
        pins.migrate("t-moved", CONTROL, by="ivy", expect_version=1)
    assert caught.value.code == "thread_pin_tampered"
    ran = run(graph, "hello again", "sam", "t-moved")
    assert ran["status"] != "done" and two.handler_calls(CONTROL) == 0  # not routed by the old pin
    [refused] = [e for e in audit_events(store, "release.refused") if e.code == "thread_pin_tampered"]
    assert refused.detail["thread_id"] == "t-moved"
    assert [r.describe() for r in verify_versions(store).replayed] == ["thread_release:t-moved@v1!=v2"]


@pytest.mark.parametrize("change", ["revoked", "token rotated"])
def test_a_replayed_identity_cannot_act(store: Store, tmp_path: Path, change: str) -> None:
    TwoReleases(store, tmp_path)
    directory = IdentityDirectory(store)
    token = demo_token("rita")
    assert directory.authenticate("rita", token).user_id == "rita"
    before = saved(store, "identities", "rita")
    if change == "revoked":
        directory.revoke("rita", by=None)
    else:
        directory.rotate_token("rita", by=None)
    copy_back(store, "identities", before)  # the active row with the old token, validly MAC'd

    record = store.identities.get("rita")
    assert record is not None and record.replayed and not record.authentic
    for attempt in (
        lambda: directory.authenticate("rita", token),
        lambda: directory.authenticate_bearer(token),
    ):
        with pytest.raises(IdentityError) as caught:
            attempt()
        assert caught.value.code == "forged_identity"
    with pytest.raises(IdentityError) as refused:
        store.identities.change("rita", status="active")  # never re-signed
    assert refused.value.code == "forged_identity"
    assert directory.active("rita", record.tenant_id) is None
    [replayed] = verify_versions(store).replayed
    assert (replayed.kind, replayed.key, replayed.version, replayed.audited_version) == (
        "identity",
        "rita",
        1,
        2,
    )


def test_normal_changes_and_a_fresh_store_verify_clean(store: Store, tmp_path: Path) -> None:
    fresh = verify_versions(store)
    assert fresh.ok and fresh.unbound == 0
    models = {
        CONTROL: ScriptedChatModel(responses=[text("after the rollback")]),
        CANDIDATE: ScriptedChatModel(responses=[text("promoted")]),
    }
    two = TwoReleases(store, tmp_path, models=models)
    promoted(two)
    graph = two.graph()
    run(graph, "hello", "cust-ada", "t-promoted")
    two.control().rollback(admin(two))
    run(graph, "hello", "sam", "t-after")
    ThreadReleases(store).migrate("t-after", CANDIDATE, by="ivy", expect_version=1)
    directory = IdentityDirectory(store)
    directory.rotate_token("rita", by=None)
    directory.revoke("omar", by=None)

    report = verify_versions(store)
    assert report.ok and report.unbound == 0 and report.rows > 0
    assert RolloutStore(store).state(CONTROL).tampered == []
    assert release_status(two.control())["state"] == "verified"
    assert all(i.authentic for i in store.identities.list())
    pin = ThreadReleases(store).get("t-after")
    assert pin is not None and pin.authentic and pin.version == 2


def test_audit_verify_names_replayed_rows_and_fails(tmp_path: Path, database_url: str | None) -> None:
    store = open_test_store(tmp_path, database_url)
    try:
        two = TwoReleases(store, tmp_path)
        env = cli_env(tmp_path, database_url, TOOLGATE_RELEASE=CONTROL)
        clean = toolgate(["audit", "verify", "--as", "otto"], env)
        assert kv_lines(clean.stdout)[-1]["replayed_records"] == "none"
        rollout_id = rolled_back_then_replayed(two)
        before = saved(store, "identities", "rita")
        IdentityDirectory(store).revoke("rita", by=None)
        copy_back(store, "identities", before)

        verified = toolgate(["audit", "verify", "--as", "otto"], env, check=False)
        assert verified.returncode == 1, verified.stdout + verified.stderr
        line = kv_lines(verified.stdout)[-1]
        assert line["tamper_check"] == "FAIL" and line["chain"] == "PASS"  # one verdict, never a pass
        assert sorted(line["replayed_records"].split(",")) == [
            "identity:rita@v1!=v2",
            f"release_pointer:{CONTROL}@v3!=v4",
            f"release_rollout:{rollout_id}@v3!=v4",
        ]
        status = toolgate(["release", "status"], env, check=False)
        assert status.returncode == 1, status.stdout + status.stderr
        assert kv_lines(status.stdout)[0]["tamper"] == "pointer_replayed,rollout_replayed"
    finally:
        store.close()
