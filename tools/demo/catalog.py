"""The demo release ``ops-tools/1.0.0``: four reviewed tools over the demo system of record.

Handlers are typed functions bound to one `DemoSystem`; none of them builds shell, SQL text or
URLs from model strings. Identity comes from `HandlerContext`, never from arguments.
"""

from __future__ import annotations

from typing import Any

from toolgate.tools.demo.models import (
    IssueRefundArgs,
    IssueRefundResult,
    LookupOrderArgs,
    LookupOrderResult,
    RestartServiceArgs,
    RestartServiceResult,
    ServiceStatusArgs,
    ServiceStatusResult,
)
from toolgate.tools.demo.records import DemoSystem
from toolgate.tools.demo.services import DemoResolver, DemoServices
from toolgate.tools.registry import Registry
from toolgate.tools.spec import ApprovalClass, HandlerContext, NoRollback, ResourceRef, Rollback, ToolSpec

REFUND_RELEASE = "ops-tools/1.0.0"
"""The refund-story release (four tools), kept as the previous complete bundle."""
WIDE_RELEASE = "ops-tools/1.1.0"
"""The wider demo release: the refund story plus the other demo integrations."""

STAFF = frozenset({"support", "finance"})
"""Roles that act on any customer's order of their own tenant; a customer reaches only their own."""


def demo_specs(system: DemoSystem) -> list[ToolSpec]:
    """The demo tools, each bound to ``system``."""

    def lookup_order(args: LookupOrderArgs, ctx: HandlerContext) -> LookupOrderResult:
        return LookupOrderResult.model_validate(system.order(ctx.tenant_id, args.order_id))

    def get_service_status(args: ServiceStatusArgs, ctx: HandlerContext) -> ServiceStatusResult:
        row = system.service(ctx.tenant_id, args.service_alias)
        return ServiceStatusResult(service_alias=row["alias"], state=row["state"], restarts=row["restarts"])

    def restart_service(args: RestartServiceArgs, ctx: HandlerContext) -> RestartServiceResult:
        restart = system.restart(ctx.tenant_id, args.service_alias, ctx.require_idempotency_key())
        row = system.service(ctx.tenant_id, args.service_alias)
        return RestartServiceResult(
            service_alias=row["alias"], state=row["state"], restart_id=restart["restart_id"]
        )

    def refund_status(args: IssueRefundArgs, ctx: HandlerContext) -> IssueRefundResult | None:
        refund = system.refund_by_key(ctx.tenant_id, ctx.require_idempotency_key())
        if refund is None:
            return None
        return IssueRefundResult(
            refund_id=refund["refund_id"],
            order_id=refund["order_id"],
            amount_cents=refund["amount_cents"],
            status="refunded",
        )

    def restart_status(args: RestartServiceArgs, ctx: HandlerContext) -> RestartServiceResult | None:
        restart = system.restart_by_key(ctx.tenant_id, ctx.require_idempotency_key())
        if restart is None:
            return None
        row = system.service(ctx.tenant_id, args.service_alias)
        return RestartServiceResult(
            service_alias=row["alias"], state=row["state"], restart_id=restart["restart_id"]
        )

    def refund_within_balance(args: IssueRefundArgs, ctx: HandlerContext) -> str | None:
        order = system.order(ctx.tenant_id, args.order_id)
        remaining = order["amount_cents"] - order["refunded_cents"]
        if args.amount_cents > remaining:
            return f"amount_cents must be at most the unrefunded amount of the order ({remaining})."
        return None

    def refund_facts(args: IssueRefundArgs, ctx: HandlerContext) -> dict[str, Any]:
        """What the payment system's records say of the order, as the requester's tenant sees
        them: what a reviewer weighs before moving money."""
        order = system.order(ctx.tenant_id, args.order_id)
        remaining = order["amount_cents"] - order["refunded_cents"]
        return {
            "order_id": order["order_id"],
            "item": order["item"],
            "currency": order["currency"],
            "order_amount_cents": order["amount_cents"],
            "already_refunded_cents": order["refunded_cents"],
            "remaining_cents": remaining,
            "this_refund_cents": args.amount_cents,
            "remaining_after_cents": remaining - args.amount_cents,
        }

    def issue_refund(args: IssueRefundArgs, ctx: HandlerContext) -> IssueRefundResult:
        refund = system.refund(ctx.tenant_id, args.order_id, args.amount_cents, ctx.require_idempotency_key())
        return IssueRefundResult(
            refund_id=refund["refund_id"],
            order_id=refund["order_id"],
            amount_cents=refund["amount_cents"],
            status="refunded",
        )

    return [
        ToolSpec(
            name="lookup_order",
            version="1.0.0",
            owner="commerce-support",
            description=(
                "Look up one of the customer's orders by its id (e.g. 'O-5512') to see item, status, "
                "amount and what was already refunded. Use before proposing a refund. Does not change anything."
            ),
            args_model=LookupOrderArgs,
            result_model=LookupOrderResult,
            risk="read-only",
            effect="Reads one order of the authenticated tenant.",
            timeout_s=5,
            max_output_bytes=4096,
            approval=ApprovalClass.none(),
            required_scopes=frozenset({"orders:read"}),
            handler=lookup_order,
            handler_revision="lookup-order/1.0.0",
            rollback=NoRollback("read-only: nothing to undo"),
            resource=ResourceRef(
                kind="order",
                argument="order_id",
                conflict=False,
                owner=system.order_ownership,
                staff_roles=STAFF,
            ),
            audit_fields=frozenset({"order_id"}),
        ),
        ToolSpec(
            name="get_service_status",
            version="3.0.0",
            owner="platform-ops",
            description=(
                "Read the current status of one approved service alias (web, worker or scheduler). "
                "Use before proposing a restart. Does not change anything."
            ),
            args_model=ServiceStatusArgs,
            result_model=ServiceStatusResult,
            risk="read-only",
            effect="Reads the state of one service of the authenticated tenant.",
            timeout_s=5,
            max_output_bytes=16384,
            approval=ApprovalClass.none(),
            required_scopes=frozenset({"ops:read"}),
            handler=get_service_status,
            handler_revision="get-service-status/3.0.0",
            rollback=NoRollback("read-only: nothing to undo"),
            resource=ResourceRef(kind="service", argument="service_alias", conflict=False),
            audit_fields=frozenset({"service_alias"}),
        ),
        ToolSpec(
            name="restart_service",
            version="2.1.0",
            owner="platform-ops",
            description=(
                "Propose a restart of one approved service alias. An operator must approve it before it "
                "runs; the result says pending_approval until then. Use only after get_service_status."
            ),
            args_model=RestartServiceArgs,
            result_model=RestartServiceResult,
            risk="caution",
            effect="Restarts the service; in-flight requests to it are dropped for a few seconds.",
            timeout_s=30,
            max_output_bytes=16384,
            approval=ApprovalClass.role("operator"),
            required_scopes=frozenset({"ops:restart"}),
            handler=restart_service,
            handler_revision="restart-service/2.1.0",
            rollback=NoRollback("a restart cannot be undone; the service returns to its configured state"),
            resource=ResourceRef(kind="service", argument="service_alias"),
            audit_fields=frozenset({"service_alias"}),
            reconcile=restart_status,
        ),
        ToolSpec(
            name="issue_refund",
            version="1.0.0",
            owner="payments",
            description=(
                "Propose a refund of part or all of one of the customer's orders, in cents. Needs two-person "
                "or finance approval before money moves; the result says pending_approval until then. "
                "Call lookup_order first; never refund more than the unrefunded amount."
            ),
            args_model=IssueRefundArgs,
            result_model=IssueRefundResult,
            risk="danger",
            effect="Moves money back to the customer's original payment method.",
            timeout_s=15,
            max_output_bytes=4096,
            approval=ApprovalClass.two_person("support", "finance", sole_approver_roles=("finance",)),
            required_scopes=frozenset({"refunds:request"}),
            handler=issue_refund,
            handler_revision="issue-refund/1.0.0",
            rollback=Rollback(
                "re-charge the refunded amount through a separately approved payment adjustment"
            ),
            resource=ResourceRef(
                kind="order", argument="order_id", owner=system.order_ownership, staff_roles=STAFF
            ),
            audit_fields=frozenset({"order_id", "amount_cents", "reason"}),
            semantic_check=refund_within_balance,
            reconcile=refund_status,
            review_details=refund_facts,
        ),
    ]


def build_demo_registry(system: DemoSystem, release: str = REFUND_RELEASE) -> Registry:
    """The refund-story release ``ops-tools/1.0.0`` bound to ``system``."""
    return Registry.of(release, demo_specs(system), system)


def build_wide_registry(system: DemoSystem, services: DemoServices, release: str = WIDE_RELEASE) -> Registry:
    """The wider release ``ops-tools/1.1.0``: the refund story plus the other demo integrations."""
    return Registry.of(release, [*demo_specs(system), *services.specs()], DemoResolver(system, services))


__all__ = ["REFUND_RELEASE", "WIDE_RELEASE", "build_demo_registry", "build_wide_registry", "demo_specs"]
