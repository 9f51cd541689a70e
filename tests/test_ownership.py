"""Ownership beyond tenant: a customer reaches only their own orders; tools declare who owns the
resources any argument names (nested ones and list items included); staff may span tenants only
where the operator says so.

Every refusal here is an authorization refusal (``not_owner`` or ``cross_tenant``, never
retryable), carries the same model-facing message as a missing id, runs no handler, creates no
proposal and is audited with its precise code.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from langgraph.types import Command
from support import REFUND_REQUEST, Harness, principal, start, tool_messages

from toolgate.errors import ApprovalError, IdentityError
from toolgate.graph import Context
from toolgate.graph.nodes.batch import partition
from toolgate.graph.review.decisions import decide
from toolgate.policy import PolicyRules, Principal
from toolgate.policy.identities import IdentityDirectory
from toolgate.testing import ScriptedChatModel, ai, open_test_app, tool_call
from toolgate.tools import ApprovalClass, NoRollback, Registry, ResourceRef, ToolSpec
from toolgate.tools.spec import HandlerContext, ResourceStatus, StrictArgs, ToolResult

MISSING = "No order with that id exists for this account."


def payload(state: dict[str, Any], call_id: str) -> dict[str, Any]:
    import json

    return next(json.loads(str(m.content)) for m in tool_messages(state) if m.tool_call_id == call_id)


def rejections(harness: Harness) -> list[tuple[str | None, str | None]]:
    return [(e.event, e.code) for e in harness.store.audit.events() if e.event == "call.rejected"]


def resume(graph: Any, thread: str) -> dict[str, Any]:
    result: dict[str, Any] = graph.invoke(
        Command(resume={"wake": True}), {"configurable": {"thread_id": thread}}, context=Context()
    )
    return result


# ---- the demo: orders belong to one customer ---------------------------------------------


def test_a_customer_cannot_look_up_or_refund_another_customers_order(harness: Harness) -> None:
    model = ScriptedChatModel(
        responses=[
            ai(
                "",
                tool_call("lookup_order", {"order_id": "O-5513"}, "peek"),
                tool_call(
                    "issue_refund", {"order_id": "O-5513", "amount_cents": 100, "reason": "damaged"}, "take"
                ),
                tool_call("lookup_order", {"order_id": "O-9999"}, "typo"),
            ),
            ai("I cannot find that order."),
        ]
    )
    state = start(harness.graph(model), "bob's toaster", "cust-ada", "t-cross-user")
    peek, take, typo = payload(state, "peek"), payload(state, "take"), payload(state, "typo")
    assert (peek["error"], peek["retryable"]) == ("not_owner", False)
    assert (take["error"], take["retryable"]) == ("not_owner", False)
    assert (typo["error"], typo["retryable"]) == ("semantic_invalid", True)
    # no oracle: another customer's order reads exactly like one that does not exist
    assert peek["message"] == take["message"] == typo["message"] == MISSING
    assert harness.total_handler_calls() == 0 and harness.store.proposals.list() == []
    assert rejections(harness).count(("call.rejected", "not_owner")) == 2


def test_own_orders_and_staff_of_the_tenant_pass(harness: Harness) -> None:
    model = ScriptedChatModel(
        responses=[ai("", tool_call("lookup_order", {"order_id": "O-5512"}, "own")), ai("ok")]
    )
    state = start(harness.graph(model), "my blender", "cust-ada", "t-own")
    assert payload(state, "own")["data"]["order_id"] == "O-5512"
    staff = ScriptedChatModel(
        responses=[ai("", tool_call("lookup_order", {"order_id": "O-5513"}, "rita")), ai("ok")]
    )
    state = start(harness.graph(staff), "bob's order", "rita", "t-staff")
    assert payload(state, "rita")["data"]["order_id"] == "O-5513"
    assert harness.handler_calls["lookup_order"] == 2
    # staff roles stop at the tenant: support of acme never reaches globex
    foreign = ScriptedChatModel(
        responses=[ai("", tool_call("lookup_order", {"order_id": "O-7001"}, "far")), ai("ok")]
    )
    state = start(harness.graph(foreign), "globex order", "rita", "t-staff-far")
    assert payload(state, "far")["error"] == "cross_tenant"


def test_execute_re_resolves_ownership_of_an_approved_write(harness: Harness) -> None:
    """The order changed hands between approval and execution: nothing is touched."""
    refund = {"order_id": "O-5512", "amount_cents": 1000, "reason": "damaged"}
    graph = harness.graph(
        ScriptedChatModel(responses=[ai("", tool_call("issue_refund", refund, "r1")), ai("ok")])
    )
    proposal = start(graph, REFUND_REQUEST, "cust-ada", "t-moved")["__interrupt__"][0].value["toolgate"][
        "proposals"
    ][0]
    decide(harness.gateway(), proposal["proposal_id"], principal("fiona"), "approve")
    with harness.store.transaction() as tx:
        tx.execute("UPDATE sor_orders SET customer_id = 'cust-bob' WHERE order_id = 'O-5512'")
    resume(graph, "t-moved")
    assert harness.refunds() == 0 and harness.payments() == 0 and harness.handler_calls["issue_refund"] == 0
    operation = harness.store.operations.get(proposal["operation_key"])
    assert operation is not None and operation.status == "approved"
    refused = [e for e in harness.store.audit.events() if e.event == "operation.refused"]
    assert [e.code for e in refused] == ["not_owner"]


# ---- a third-party tool declares owners for nested arguments and list items --------------


class Payment(StrictArgs):
    payment_id: str
    amount_cents: int


class PayArgs(StrictArgs):
    reservation_id: str
    payments: list[Payment]


class Paid(ToolResult):
    reservation_id: str
    paid_cents: int


class Reservations:
    """A system of record: reservations and payment methods, each owned by one user."""

    def __init__(self) -> None:
        self.owner = {
            ("reservation", "R-1"): ("acme", "cust-ada"),
            ("reservation", "R-2"): ("acme", "cust-bob"),
            ("payment", "PM-ada"): ("acme", "cust-ada"),
            ("payment", "PM-bob"): ("acme", "cust-bob"),
            ("payment", "PM-gina"): ("globex", "cust-gina"),
        }
        self.calls = 0
        self.lookups: list[tuple[str, str, str]] = []

    def check(self, kind: str) -> Any:
        def owner(resource_id: str, ctx: HandlerContext) -> ResourceStatus:
            self.lookups.append((kind, resource_id, ctx.user_id))
            found = self.owner.get((kind, resource_id))
            if found is None:
                return "missing"
            if found[0] != ctx.tenant_id:
                return "foreign"
            return "owned" if found[1] == ctx.user_id else "not_owner"

        return owner

    def resource_status(self, kind: str, resource_id: str, tenant_id: str) -> ResourceStatus:
        return "missing"  # never consulted: every resource of this tool declares its owner check

    def pay(self, args: PayArgs, ctx: HandlerContext) -> Paid:
        self.calls += 1
        return Paid(reservation_id=args.reservation_id, paid_cents=sum(p.amount_cents for p in args.payments))


def pay_spec(system: Reservations) -> ToolSpec:
    return ToolSpec(
        name="pay_reservation",
        version="1.0.0",
        owner="travel",
        description="Pay a reservation with one or more of the user's payment methods.",
        args_model=PayArgs,
        result_model=Paid,
        risk="caution",
        effect="Charges the payment methods.",
        timeout_s=5,
        max_output_bytes=2048,
        approval=ApprovalClass.role("support"),
        required_scopes=frozenset({"orders:read"}),
        handler=system.pay,
        handler_revision="pay-reservation/1.0.0",
        rollback=NoRollback("charges are refunded by a separate tool"),
        resource=ResourceRef(
            kind="reservation", argument="reservation_id", owner=system.check("reservation")
        ),
        resources=(
            ResourceRef(kind="payment", argument="payments[].payment_id", owner=system.check("payment")),
        ),
    )


@pytest.mark.parametrize(
    ("payments", "expected"),
    [
        (["PM-ada", "PM-bob"], "not_owner"),  # the second item of the list is someone else's
        (["PM-gina"], "cross_tenant"),
        (["PM-nope"], "semantic_invalid"),
    ],
)
def test_a_list_item_owned_by_someone_else_refuses_the_call(
    harness: Harness, payments: list[str], expected: str
) -> None:
    system = Reservations()
    registry = Registry.of("travel/1.0.0", [pay_spec(system)], system)
    args = {"reservation_id": "R-1", "payments": [{"payment_id": p, "amount_cents": 500} for p in payments]}
    model = ScriptedChatModel(responses=[ai("", tool_call("pay_reservation", args, "p1")), ai("ok")])
    graph = open_test_app(
        model=model,
        tools=registry,
        policy=_no_rules(),
        store=harness.store,
        start=False,
        checkpointer=_saver(),
    ).compiled()
    state = start(graph, "pay it", "cust-ada", f"t-pay-{expected}")
    got = payload(state, "p1")
    assert got["error"] == expected and got["retryable"] is (expected == "semantic_invalid")
    assert system.calls == 0 and harness.store.proposals.list() == []
    assert ("payment", payments[-1], "cust-ada") in system.lookups  # the resolver saw the user


def test_a_third_party_tool_runs_once_for_its_owner_and_never_for_another_user(harness: Harness) -> None:
    system = Reservations()
    registry = Registry.of("travel/1.0.0", [pay_spec(system)], system)
    own = {"reservation_id": "R-1", "payments": [{"payment_id": "PM-ada", "amount_cents": 700}]}
    other = {"reservation_id": "R-2", "payments": [{"payment_id": "PM-ada", "amount_cents": 700}]}
    model = ScriptedChatModel(
        responses=[
            ai("", tool_call("pay_reservation", own, "mine"), tool_call("pay_reservation", other, "bobs")),
            ai("ok"),
        ]
    )
    graph = open_test_app(
        model=model,
        tools=registry,
        policy=_no_rules(),
        store=harness.store,
        start=False,
        checkpointer=_saver(),
    ).compiled()
    waiting = start(graph, "pay", "cust-ada", "t-pay-own")
    proposals = waiting["__interrupt__"][0].value["toolgate"]["proposals"]
    assert [p["call_id"] for p in proposals] == ["mine"]
    gateway = build_graph_gateway(registry, harness)
    decide(gateway, proposals[0]["proposal_id"], principal("rita"), "approve")
    done = resume(graph, "t-pay-own")
    assert system.calls == 1
    statuses = {o["call_id"]: (o["status"], o.get("detail")) for o in done["outcomes"].values()}
    assert statuses == {"mine": ("completed", None), "bobs": ("rejected", "not_owner")}


def test_resource_paths_must_name_arguments() -> None:
    from toolgate.errors import RegistryError

    system = Reservations()
    spec = pay_spec(system)
    bad = ResourceRef(kind="payment", argument="wallets[].payment_id")
    with pytest.raises(RegistryError, match="wallets"):
        dataclasses.replace(spec, resources=(bad,))


def test_calls_sharing_any_resource_share_a_lane(harness: Harness) -> None:
    system = Reservations()
    registry = Registry.of("travel/1.0.0", [pay_spec(system)], system)

    def record(call_id: str, reservation: str, *methods: str) -> Any:
        arguments = {
            "reservation_id": reservation,
            "payments": [{"payment_id": m, "amount_cents": 1} for m in methods],
        }
        return {"call_id": call_id, "tool": "pay_reservation", "arguments": arguments}

    records = [
        record("a", "R-1", "PM-x"),
        record("b", "R-2", "PM-y"),
        record("c", "R-3", "PM-x", "PM-y"),
        record("d", "R-4", "PM-z"),
    ]
    lanes = [[r["call_id"] for r in lane] for lane in partition(registry, records)]
    assert lanes == [["a", "b", "c"], ["d"]]  # c joins a (PM-x) and b (PM-y) transitively, in order


# ---- staff reviewers across tenants ------------------------------------------------------


def test_a_staff_reviewer_decides_only_for_the_tenants_the_operator_granted(harness: Harness) -> None:
    stella = principal("stella")
    assert stella.tenant_id == "toolgate-staff" and stella.review_tenants == {"acme"}
    refund = {"order_id": "O-5512", "amount_cents": 1200, "reason": "damaged"}
    graph = harness.graph(
        ScriptedChatModel(responses=[ai("", tool_call("issue_refund", refund, "r1")), ai("ok")])
    )
    proposal = start(graph, REFUND_REQUEST, "cust-ada", "t-staff-review")["__interrupt__"][0].value[
        "toolgate"
    ]["proposals"][0]
    decide(harness.gateway(), proposal["proposal_id"], stella, "approve")  # finance: sole approver
    resume(graph, "t-staff-review")
    assert harness.refunds() == 1
    decision = harness.store.approvals.for_proposal(proposal["proposal_id"])[0]
    assert decision.reviewer_tenant_id == "acme" and decision.authentic

    # globex was never granted to stella
    globex = harness.graph(
        ScriptedChatModel(
            responses=[
                ai(
                    "",
                    tool_call(
                        "issue_refund", {"order_id": "O-7001", "amount_cents": 100, "reason": "damaged"}, "g1"
                    ),
                )
            ]
        )
    )
    far = start(globex, "refund", "cust-gina", "t-staff-far")["__interrupt__"][0].value["toolgate"][
        "proposals"
    ][0]
    with pytest.raises(ApprovalError) as refused:
        decide(harness.gateway(), far["proposal_id"], stella, "approve")
    assert refused.value.code == "cross_tenant"
    assert harness.store.approvals.for_proposal(far["proposal_id"]) == []


def test_only_someone_reviewing_for_a_tenant_may_grant_its_review(harness: Harness) -> None:
    directory = IdentityDirectory(harness.store, harness.gateway().auditor)
    ivy = principal("ivy")  # acme's administrator
    with pytest.raises(IdentityError) as refused:
        directory.add(
            Principal(
                user_id="mallory",
                tenant_id="acme",
                roles=frozenset({"finance"}),
                review_tenants=frozenset({"globex"}),
            ),
            by=ivy,
        )
    assert refused.value.code == "cross_tenant" and harness.store.identities.get("mallory") is None
    events = [(e.event, e.code) for e in harness.store.audit.events() if e.event == "identity.refused"]
    assert events == [("identity.refused", "cross_tenant")]


def test_a_staff_reviewers_token_and_roles_change_only_by_someone_reviewing_for_their_tenants(
    harness: Harness,
) -> None:
    """A staff reviewer's roles and token carry the review of other tenants (stella reviews for
    acme): their own tenant's administrator who does not review for acme may not re-role them
    (more approval power in acme) or re-key them (the new token, shown to that administrator, is
    acme's review), as they may not grant acme's review in the first place; taking a role away
    or revoking only takes power away and stays theirs. Refusals audited, the row unchanged."""
    auditor = harness.gateway().auditor
    directory = IdentityDirectory(harness.store, auditor)
    staff_admin = Principal(user_id="sid", tenant_id="toolgate-staff", roles=frozenset({"admin"}))
    directory.add(staff_admin, by=None)
    before = harness.store.identities.get("stella")
    with pytest.raises(IdentityError) as rekeyed:
        directory.rotate_token("stella", by=staff_admin)
    with pytest.raises(IdentityError) as reroled:
        directory.change_roles("stella", roles=frozenset({"finance", "operator"}), scopes=None, by=staff_admin)
    assert (rekeyed.value.code, reroled.value.code) == ("cross_tenant", "cross_tenant")
    assert harness.store.identities.get("stella") == before
    refused = [(e.code, e.actor_id) for e in harness.store.audit.events() if e.event == "identity.refused"]
    assert refused == [("cross_tenant", auditor.actor("sid"))] * 2
    acme_staff_admin = Principal(
        user_id="sue",
        tenant_id="toolgate-staff",
        roles=frozenset({"admin"}),
        review_tenants=frozenset({"acme"}),
    )
    directory.add(acme_staff_admin, by=None)
    assert directory.rotate_token("stella", by=acme_staff_admin).startswith("tg_")
    narrowed = directory.change_roles("stella", roles=frozenset({"support"}), scopes=None, by=staff_admin)
    assert narrowed.roles == ("support",)  # taking a role away widens nothing
    assert directory.revoke("stella", by=staff_admin).status == "revoked"


def test_a_review_grant_written_into_the_row_directly_does_not_count(harness: Harness) -> None:
    """Database access alone cannot make a reviewer staff: the row's MAC covers its grants."""
    with harness.store.transaction() as tx:
        tx.execute("UPDATE identities SET review_tenants = ? WHERE user_id = 'gina'", ('["acme"]',))
    assert harness.store.identities.get("gina").authentic is False  # type: ignore[union-attr]
    directory = IdentityDirectory(harness.store)
    assert directory.reviewer_for("gina", "acme") is None


def _no_rules() -> PolicyRules:
    return PolicyRules(policy_version="test", sha256="0" * 64, approval_minutes=15, rules=())


def _saver() -> Any:
    from langgraph.checkpoint.memory import InMemorySaver

    return InMemorySaver()


def build_graph_gateway(registry: Registry, harness: Harness) -> Any:

    return open_test_app(
        model=ScriptedChatModel(responses=[]),
        tools=registry,
        policy=_no_rules(),
        store=harness.store,
        start=False,
    ).gateway
