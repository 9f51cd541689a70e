"""A release's ownership checks (a tool's owner check, the release's resolver) are loaded code:
when one raises, the call it was asked about is refused ``resolver_failed`` (fail closed) at
whichever checkpoint asked, dispatch or before the claim; the run goes on, no handler runs, and
nothing of the message (which may carry a password or a key) reaches the model, the state or the
audit log (issue 27, item 1)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from support import Harness, start, tool_messages

from toolgate.store import SQLiteStore
from toolgate.testing import ScriptedChatModel, ai, tool_call
from toolgate.tools import Registry

PLANTED = "password=hunter2 api_key=sk-live-planted-0001"


class HostileOwnerCheck:
    """The demo's own owner checks (`ResourceRef.owner`), until told to raise with a secret in
    the message."""

    def __init__(self) -> None:
        self.failing = False
        self.asked = 0

    def around(self, owner: Any) -> Any:
        def check(resource_id: str, ctx: Any) -> Any:
            self.asked += 1
            if self.failing:
                raise RuntimeError(f"ownership database down ({PLANTED})")
            return owner(resource_id, ctx)

        return check


def _world(tmp_path: Any) -> tuple[Harness, HostileOwnerCheck, Registry]:
    harness = Harness(SQLiteStore(tmp_path / "t.sqlite", key=b"k" * 32))
    hostile = HostileOwnerCheck()
    specs = [
        replace(s, resource=replace(s.resource, owner=hostile.around(s.resource.owner)))
        if s.resource is not None and s.resource.owner is not None
        else s
        for s in harness.registry.tools.values()
    ]
    registry = Registry.of(harness.registry.release, specs, harness.system)
    harness.registry = registry
    return harness, hostile, registry


def _nothing_planted(harness: Harness, state: Any | None) -> None:
    if state is not None:
        assert PLANTED not in json.dumps([str(m.content) for m in state["messages"]])
    assert PLANTED not in repr(harness.store.audit.events())


def test_a_resolver_that_raises_at_dispatch_refuses_that_call_only(tmp_path: Any) -> None:
    harness, resolver, _ = _world(tmp_path)
    resolver.failing = True
    model = ScriptedChatModel(
        responses=[
            ai(
                "",
                tool_call("lookup_order", {"order_id": "O-5512"}, "c-order"),
                tool_call("get_service_status", {"service_alias": "worker"}, "c-status"),
            ),
            ai("done"),
        ]
    )
    state = start(harness.graph(model), "my order and the worker", "cust-ada", "t-resolver-dispatch")

    answers = {m.tool_call_id: json.loads(str(m.content)) for m in tool_messages(state)}
    assert answers["c-order"]["error"] == "resolver_failed" and answers["c-order"]["retryable"] is True
    assert answers["c-status"].get("error") != "resolver_failed"  # answered on its own
    assert state["status"] == "done"
    assert harness.counter.calls.get("lookup_order", 0) == 0
    rejected = [e for e in harness.store.audit.events() if e.event == "call.rejected"]
    assert [(e.tool, e.code) for e in rejected if e.code == "resolver_failed"] == [
        ("lookup_order", "resolver_failed")
    ]
    _nothing_planted(harness, state)


def test_a_resolver_that_raises_before_the_claim_runs_no_effect(tmp_path: Any) -> None:
    harness, resolver, registry = _world(tmp_path)
    proposal, gateway = harness.approved_refund(registry, "t-resolver-claim")

    resolver.failing = True
    asked = resolver.asked
    delivery = gateway.executor.deliver(proposal["operation_key"], worker_id="w1")

    assert resolver.asked > asked  # the claim asked the resolver again, and it raised
    assert delivery.status != "succeeded"
    assert harness.refunds() == 0 and harness.payments() == 0
    refused = [e for e in harness.store.audit.events() if e.event == "operation.refused"]
    assert [(e.code, e.tool) for e in refused] == [("resolver_failed", "issue_refund")]
    op = harness.store.operations.get(proposal["operation_key"])
    assert op is not None and op.status == "approved"  # nothing ran; it stays for a later delivery
    _nothing_planted(harness, None)
