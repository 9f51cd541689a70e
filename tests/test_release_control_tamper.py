"""Release-control rows changed with database access alone are never acted on, on both backends.

The pointer, the rollout and the thread pins carry a MAC under the store's ``release`` key: a
row edited, inserted or deleted behind toolgate's back does not verify, routing falls back to
the operator's configured release (audited once per process), and every command refuses with
``release_state_tampered`` without re-signing anything.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from release_control_support import CANDIDATE, CONTROL, TwoReleases, audit_events, run, text
from test_release_control_routing import admin, table_counts

from toolgate.errors import ReleaseControlError
from toolgate.graph.bootstrap import served_release
from toolgate.releases.status import release_status
from toolgate.store.base import Store
from toolgate.store.rollout import RolloutStore
from toolgate.testing import ScriptedChatModel

EDITS = {
    "canary widened": "UPDATE release_rollouts SET canary_bp = 10000",
    "stopped rollout revived": "UPDATE release_rollouts SET phase = 'canary', stop_reason = ''",
    "pointer moved": f"UPDATE release_pointer SET active = '{CANDIDATE}'",
    "rollout deleted": "DELETE FROM release_rollouts",
    "pointer forged": "UPDATE release_pointer SET mac = 'f00d'",
}


@pytest.mark.parametrize("edit", list(EDITS))
def test_an_edited_row_is_refused_everywhere_and_the_configured_release_serves(
    store: Store, tmp_path: Path, edit: str
) -> None:
    models = {
        CONTROL: ScriptedChatModel(responses=[text("control")]),
        CANDIDATE: ScriptedChatModel(responses=[]),
    }
    two = TwoReleases(store, tmp_path, models=models)
    control = two.control()
    control.shadow(admin(two), CANDIDATE)
    rollout = control.canary(admin(two), CANDIDATE, 50)
    if edit == "stopped rollout revived":
        from toolgate.graph.rollout.stop import stop_rollout

        assert stop_rollout(store, CONTROL, rollout, "duplicate_effect:1", by="automatic") is not None
    with store.transaction() as tx:
        tx.execute(EDITS[edit])
    before = table_counts(store)

    assert RolloutStore(store).state(CONTROL).tampered
    state = run(two.graph(), "hello", "cust-ada", "t-after-edit")  # whatever its cohort: control
    assert state["release"] == CONTROL
    assert served_release(store, CONTROL, audit=False) == CONTROL
    for attempt in (
        lambda: control.promote(admin(two)),
        lambda: control.rollback(admin(two)),
        lambda: control.canary(admin(two), CANDIDATE, 100),
        lambda: control.shadow(admin(two), CANDIDATE),
    ):
        with pytest.raises(ReleaseControlError) as caught:
            attempt()
        assert caught.value.code == "release_state_tampered"
    assert release_status(control)["state"] == "tampered"
    changed = {t for t, n in table_counts(store).items() if before.get(t) != n}
    assert changed <= {"audit_events", "audit_payloads"}  # refusals are audited; nothing else moves
    refusals = [e.code for e in audit_events(store, "release.refused")]
    assert refusals.count("release_state_tampered") == 1 + 4  # routing (once) and each command


def test_an_edited_pin_is_not_followed(store: Store, tmp_path: Path) -> None:
    models = {CONTROL: ScriptedChatModel(responses=[text("one"), text("two")])}
    two = TwoReleases(store, tmp_path, models=models)
    control = two.control()
    control.shadow(admin(two), CANDIDATE)
    rollout = control.canary(admin(two), CANDIDATE, 0.01)
    graph = two.graph()
    run(graph, "hello", "sam", "t-pinned")
    pin = RolloutStore(store).get_pin(rollout.rollout_id, "t-pinned")
    if pin is None or pin.arm != "control":
        pytest.skip("sam fell into the 0.01 % cohort of this rollout's salt")
    with store.transaction() as tx:
        tx.execute("UPDATE release_pins SET arm = 'candidate', release = ?", (CANDIDATE,))
    assert run(graph, "hello again", "sam", "t-pinned")["release"] == CONTROL
    [refused] = [e for e in audit_events(store, "release.refused") if e.code == "pin_tampered"]
    assert refused.detail["thread_id"] == "t-pinned"
