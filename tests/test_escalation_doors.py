"""An escalated refund at the reviewers' doors: the HTTP API and the CLI, on SQLite and PostgreSQL.

Reviewers see the raised class and its reason (HTTP review details, ``toolgate proposals show``);
each door authenticates, refuses the requester and another person's token, and applies the class
stored on the proposal: the CLI process loads the release's shipped policy (threshold 50000), yet
the 2500-cent refund proposed under the 2000-cent test policy still needs its two reviewers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient
from support import Harness, audit_events, cli_env, kv_lines, open_test_store, toolgate
from test_escalation import ABOVE, RAISED, RULE, THRESHOLD, policy_with_threshold, propose

import toolgate.graph.server.http as http
import toolgate.graph.worker.waker as waker
from toolgate.store import Store
from toolgate.tools.demo.identities import demo_token


def bearer(user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {demo_token(user)}"}


def test_the_review_api_shows_the_reason_and_needs_the_second_reviewer(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = Harness(store)
    rig.policy = policy_with_threshold(THRESHOLD)
    gw = rig.gateway()

    async def wake(thread_id: str) -> bool:
        return True

    monkeypatch.setattr(waker, "wake_thread", wake)
    client = TestClient(http.create_app(lambda: gw, waker_interval_s=None))
    _, facts = propose(rig, ABOVE, "t-http")
    url = f"/toolgate/proposals/{facts['proposal_id']}"
    shown = client.get(url, headers=bearer("fiona")).json()
    reason = rig.policy.escalations[0].reason
    assert shown["approval_class"] == RAISED
    assert shown["escalation"] == {"rule_id": RULE, "reason": reason, "approval_class": RAISED}

    body = {"digest": shown["digest"]}
    requester = client.post(url + "/approve", headers=bearer("cust-ada"), json=body)
    assert requester.status_code == 409 and requester.json()["error"] == "self_approval"
    nobody = client.post(url + "/approve", headers={"Authorization": "Bearer demo-token-fiona-x"}, json=body)
    assert nobody.status_code == 401 and nobody.json()["error"] == "authentication_failed"
    assert store.approvals.for_proposal(facts["proposal_id"]) == []
    first = client.post(url + "/approve", headers=bearer("fiona"), json=body)
    assert first.status_code == 200 and first.json()["status"] == "pending_approval"
    second = client.post(url + "/approve", headers=bearer("sam"), json=body)
    assert second.status_code == 200 and second.json()["status"] == "approved"
    assert second.json()["approvers"] == ["fiona", "sam"]
    assert [e.code for e in audit_events(store, "approval.refused")] == ["self_approval"]


def test_the_cli_shows_the_reason_and_refuses_someone_elses_token(
    tmp_path: Path, database_url: str | None
) -> None:
    store = open_test_store(tmp_path, database_url)
    try:
        rig = Harness(store)
        rig.policy = policy_with_threshold(THRESHOLD)
        _, facts = propose(rig, ABOVE, "t-cli")
        reason = rig.policy.escalations[0].reason
        env = cli_env(tmp_path, database_url, TOOLGATE_RELEASE="ops-tools/1.0.0")
        pid = facts["proposal_id"]

        text = toolgate(["proposals", "show", pid], env).stdout
        shown: dict[str, Any] = {}
        for line in kv_lines(text):
            shown.update(line)
        assert shown["approval"] == RAISED and shown["escalated_by"] == RULE
        assert f"escalation_reason={json.dumps(reason)}" in text, text

        for token, code in ((demo_token("fiona"), "authentication_failed"), ("", "missing_token")):
            as_sam = toolgate(["approve", pid, "--as", "sam"], {**env, "TOOLGATE_TOKEN": token}, check=False)
            assert as_sam.returncode != 0, as_sam.stdout
            assert audit_events(store, "identity.refused")[-1].code == code
        assert store.approvals.for_proposal(pid) == []

        first = kv_lines(toolgate(["approve", pid, "--as", "fiona"], env).stdout)[0]
        assert first["status"] == "pending_approval"  # the stored class, not this process's policy
        requester = toolgate(["approve", pid, "--as", "cust-ada"], env, check=False)
        assert (
            requester.returncode != 0 and audit_events(store, "approval.refused")[-1].code == "self_approval"
        )
        second = kv_lines(toolgate(["approve", pid, "--as", "sam"], env).stdout)[0]
        assert second["status"] == "approved"
        assert sorted(d.reviewer_id for d in store.approvals.for_proposal(pid)) == ["fiona", "sam"]
        assert rig.handler_calls["issue_refund"] == 0  # approval alone runs nothing
    finally:
        store.close()
