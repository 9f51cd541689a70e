"""The facts a reviewer sees beside a proposal (`ToolSpec.review_details`): one lookup for both
doors (the approval node's interrupt payload and the API's proposal view), run as the proposal's
tenant's own implementation, and never able to stop the thread when it fails.

Demo flow: lee previews a purchase order, then asks to create it; ``create_purchase_order``
shows its reviewer what the preview token will create. A tenant override of that tool brings
its own lookup (its system holds that tenant's previews); an override without one is refused.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from starlette.testclient import TestClient
from support import Harness, cli_env, open_test_store, principal, tool_messages, toolgate

import toolgate.graph.server.http as http
from toolgate.errors import RegistryError, ToolExecutionError
from toolgate.graph import Context
from toolgate.graph.review.facts import UNAVAILABLE
from toolgate.store import Store
from toolgate.testing import ScriptedChatModel, ai, open_test_app, tool_call
from toolgate.tools import loaded_code
from toolgate.tools.demo import WIDE_RELEASE, DemoServices, DemoSystem, build_wide_registry
from toolgate.tools.demo.identities import demo_token
from toolgate.tools.demo.release import DEMO_RELEASES
from toolgate.tools.registry import Registry
from toolgate.tools.tenant_overrides import TenantOverride, resolve_overrides

TOOL = "create_purchase_order"
ORDER = {
    "vendor_id": "V-100",
    "currency": "USD",
    "line_items": [{"sku": "SKU-7", "quantity": 3, "unit_price_cents": 139900}],
}
POLICY = DEMO_RELEASES[WIDE_RELEASE].policy


def shared_registry(store: Store) -> Registry:
    Harness(store)  # schema, demo people and the systems of record
    return build_wide_registry(DemoSystem(store), DemoServices.on(store, secret=b"test-secret"))


def with_override(registry: Registry, **changes: Any) -> Registry:
    """``registry`` where acme runs its own ``create_purchase_order`` (same handler, own revision)."""
    base = registry.tools[TOOL]
    fields: dict[str, Any] = {
        "tenant_id": "acme",
        "tool": TOOL,
        "handler": base.handler,
        "handler_revision": "create-purchase-order/acme-own-1",
        "reconcile": base.reconcile,
    }
    own = TenantOverride(**(fields | changes))
    return Registry.of(registry.release, registry.tools.values(), registry.resolver, [own])


def pending(store: Store, registry: Registry) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """Lee previews an order and asks to create it: (graph, interrupt facts, the preview)."""
    saver = InMemorySaver()

    def graph(*responses: Any) -> Any:
        model = ScriptedChatModel(responses=list(responses))
        app = open_test_app(model=model, tools=registry, policy=POLICY, store=store, start=False)
        return app.compiled(checkpointer=saver)

    previewed = graph(ai("", tool_call("preview_purchase_order", ORDER, "p1")), ai("here")).invoke(
        {"messages": [("user", "3 laptops from V-100")]},
        {"configurable": {"thread_id": "t-preview"}},
        context=Context(principal=principal("lee")),
    )
    preview = json.loads(str(tool_messages(previewed)[0].content))["data"]
    creating = graph(ai("", tool_call(TOOL, {"preview_token": preview["preview_token"]}, "c1")), ai("ok"))
    waiting = creating.invoke(
        {"messages": [("user", "order it")]},
        {"configurable": {"thread_id": "t-create"}},
        context=Context(principal=principal("lee")),
    )
    return creating, waiting["__interrupt__"][0].value["toolgate"]["proposals"][0], preview


def api_view(store: Store, registry: Registry, facts: dict[str, Any]) -> dict[str, Any]:
    gw = open_test_app(
        model=ScriptedChatModel(responses=[]), tools=registry, policy=POLICY, store=store, start=False
    ).gateway
    client = TestClient(http.create_app(lambda: gw, waker_interval_s=None))
    reply = client.get(
        f"/toolgate/proposals/{facts['proposal_id']}",
        headers={"Authorization": f"Bearer {demo_token('paul')}"},
    )
    assert reply.status_code == 200, reply.text
    return dict(reply.json())


def test_both_doors_show_the_same_facts_of_the_shared_lookup(store: Store) -> None:
    registry = shared_registry(store)
    _, facts, preview = pending(store, registry)
    assert facts["details"]["total_cents"] == preview["total_cents"] and facts["details_error"] is None
    shown = api_view(store, registry, facts)
    assert shown["review_details"] == facts["details"] and shown["review_details_error"] is None


def test_a_tenants_own_lookup_is_the_one_its_reviewer_sees(store: Store) -> None:
    asked: list[tuple[str, str]] = []

    def own_lookup(args: Any, ctx: Any) -> dict[str, Any]:
        asked.append((ctx.tenant_id, ctx.user_id))
        return {"system": "acme-purchasing", "token_prefix": args.preview_token[:4]}

    registry = with_override(shared_registry(store), review_details=own_lookup)
    _, facts, preview = pending(store, registry)
    expected = {"system": "acme-purchasing", "token_prefix": preview["preview_token"][:4]}
    assert facts["handler_revision"] == "create-purchase-order/acme-own-1"
    assert facts["details"] == expected and facts["details_error"] is None
    shown = api_view(store, registry, facts)
    assert shown["review_details"] == expected
    # the stored proposal's tenant and requester, at each door, never the reviewer's
    assert set(asked) == {("acme", "lee")} and len(asked) >= 2


def test_an_override_of_a_tool_with_a_lookup_must_bring_its_own(store: Store) -> None:
    registry = shared_registry(store)
    base = registry.tools[TOOL]
    bare = TenantOverride(
        tenant_id="acme",
        tool=TOOL,
        handler=base.handler,
        handler_revision="cpo/acme-1",
        reconcile=base.reconcile,
    )
    with pytest.raises(RegistryError, match="needs its own review_details"):
        resolve_overrides(WIDE_RELEASE, registry.tools, [bare])


@pytest.mark.parametrize(
    "failure", [ToolExecutionError("server_error", "preview service down"), RuntimeError("secret=hunter2")]
)
def test_a_failing_lookup_is_shown_and_never_stops_the_thread(store: Store, failure: Exception) -> None:
    calls: list[str] = []

    def broken(args: Any, ctx: Any) -> dict[str, Any]:
        calls.append(ctx.tenant_id)
        raise failure

    registry = with_override(shared_registry(store), review_details=broken)
    graph, facts, _ = pending(store, registry)  # the approval node ran the lookup and still paused
    assert calls and facts["details"] is None and facts["details_error"].startswith(UNAVAILABLE)
    assert "hunter2" not in facts["details_error"]  # an unexpected error is logged, never shown raw
    shown = api_view(store, registry, facts)
    assert shown["review_details"] is None and shown["review_details_error"] == facts["details_error"]
    # a wake-up re-runs the node (and the lookup): the thread stays paused at its approval
    again = graph.invoke(
        Command(resume={"wake": True}),
        {"configurable": {"thread_id": "t-create"}},
        context=Context(principal=principal("lee")),
    )
    assert again["__interrupt__"][0].value["toolgate"]["proposals"][0]["proposal_id"] == facts["proposal_id"]


class _Facts(dict):  # type: ignore[type-arg]
    """A lookup's answer whose own ``items`` is its code: held on ``gate``, or raising ``SystemExit``."""

    gate: threading.Event | None = None

    def items(self) -> Any:
        if self.gate is None:
            raise SystemExit("secret=hunter2")
        assert self.gate.wait(120)
        return super().items()


@pytest.mark.parametrize("behaviour", ["hangs", "exits"])
def test_a_lookup_answer_whose_own_methods_hang_or_exit_is_unavailable_never_the_thread(
    store: Store, behaviour: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a lookup returns was turned into JSON in the caller's thread: a dict subclass whose
    ``items`` hung held the approval node (and every proposal view) past the lookup's deadline,
    and one raising ``SystemExit`` ended the run. Both run on the lookup's worker now."""
    monkeypatch.setattr(loaded_code, "LOOKUP_TIMEOUT_S", 0.5)
    gate = threading.Event()

    def hostile(args: Any, ctx: Any) -> dict[str, Any]:
        answer = _Facts(order="O-1")
        answer.gate = gate if behaviour == "hangs" else None
        return answer

    registry = with_override(shared_registry(store), review_details=hostile)
    try:
        _, facts, _ = pending(store, registry)  # the approval node ran the lookup and still paused
    finally:
        gate.set()
    expected = "did not answer in time" if behaviour == "hangs" else "(see the server log)"
    assert facts["details"] is None and expected in facts["details_error"], facts["details_error"]
    assert "hunter2" not in facts["details_error"]


def test_proposals_show_prints_what_a_purchase_order_buys(tmp_path: Path) -> None:
    """``toolgate proposals show`` showed only the opaque preview token; a CLI reviewer now sees
    the same facts as the interrupt and the API (issue 29)."""
    store = open_test_store(tmp_path)
    try:
        Harness(store)  # schema, demo people and the systems of record
        services = DemoServices.on(store, secret=store.keys.secret)  # as the CLI's release builds them
        registry = build_wide_registry(DemoSystem(store), services)
        _, facts, preview = pending(store, registry)
    finally:
        store.close()
    shown = toolgate(["proposals", "show", facts["proposal_id"]], cli_env(tmp_path, TOOLGATE_RELEASE=WIDE_RELEASE))
    (line,) = [line for line in shown.stdout.splitlines() if line.startswith("review_details=")]
    assert "review_details_error" not in line, shown.stdout + shown.stderr
    details = json.loads(json.loads(line.removeprefix("review_details=")))  # one quoted token (cli.lines)
    assert details == facts["details"] and details["total_cents"] == preview["total_cents"]


def test_a_resume_that_decides_runs_no_lookup(store: Store) -> None:
    """The payload a resume builds is thrown away (LangGraph returns the resume value instead of
    pausing), so the tenant's lookup, which is loaded code and may call the tenant's system, runs
    only when the node pauses. Before, every resume ran it once more for nothing."""
    calls: list[str] = []
    base = shared_registry(store)
    looked_up = base.tools[TOOL].review_details
    assert looked_up is not None

    def counted(args: Any, ctx: Any) -> Any:
        calls.append(ctx.tenant_id)
        return looked_up(args, ctx)

    registry = with_override(base, review_details=counted)
    graph, facts, _ = pending(store, registry)
    assert calls == ["acme"] and facts["details"]["total_cents"]  # the pause looked it up, once
    done = graph.invoke(
        Command(resume={"decisions": [{"type": "approve"}]}),
        {"configurable": {"thread_id": "t-create"}},
        context=Context(principal=principal("paul")),
    )
    assert "__interrupt__" not in done and done["outcomes"]["c1"]["status"] == "completed", done
    assert calls == ["acme"]  # the resume that decided looked nothing up
