"""Argument and result models of the demo release. Identity never appears here: tenant and
user come from the authenticated context, and resources are named by server-owned ids or
closed aliases."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from toolgate.tools.spec import StrictArgs, ToolResult

ServiceAlias = Literal["web", "worker", "scheduler"]
"""Reviewed service aliases; the model cannot name a unit, path or host."""

OrderId = Field(
    pattern=r"^O-[0-9]{3,8}$",
    description="Order id exactly as shown to the customer, e.g. 'O-5512'.",
    examples=["O-5512"],  # a seeded order; the registry's positive schema fixture (schema_fixtures)
)


class LookupOrderArgs(StrictArgs):
    """Arguments of ``lookup_order``."""

    order_id: str = OrderId


class LookupOrderResult(ToolResult):
    """An order as the model may see it (no card or address data)."""

    order_id: str
    item: str
    status: str
    amount_cents: int
    refunded_cents: int
    currency: str


class ServiceStatusArgs(StrictArgs):
    """Arguments of ``get_service_status``."""

    service_alias: ServiceAlias = Field(description="One approved service alias.", examples=["web"])


class ServiceStatusResult(ToolResult):
    """Current state of one service."""

    service_alias: str
    state: str
    restarts: int


class RestartServiceArgs(StrictArgs):
    """Arguments of ``restart_service``."""

    service_alias: ServiceAlias = Field(description="One approved service alias.", examples=["web"])
    reason: str = Field(
        min_length=3,
        max_length=200,
        description="Why the restart is needed, for the operator.",
        examples=["health check failing since the last deploy"],
    )


class RestartServiceResult(ToolResult):
    """Outcome of a restart."""

    service_alias: str
    state: str
    restart_id: str


class IssueRefundArgs(StrictArgs):
    """Arguments of ``issue_refund``."""

    order_id: str = OrderId
    amount_cents: int = Field(
        gt=0,
        le=1_000_000,
        description="Refund amount in cents, at most the unrefunded amount.",
        examples=[4999],  # the whole of seeded order O-5512
    )
    reason: Literal["damaged", "not_received", "wrong_item", "other"] = Field(
        description="Refund reason code.", examples=["damaged"]
    )


class IssueRefundResult(ToolResult):
    """A refund as recorded by the payment system."""

    refund_id: str
    order_id: str
    amount_cents: int
    status: Literal["refunded"]


__all__ = [
    "IssueRefundArgs",
    "IssueRefundResult",
    "LookupOrderArgs",
    "LookupOrderResult",
    "RestartServiceArgs",
    "RestartServiceResult",
    "ServiceAlias",
    "ServiceStatusArgs",
    "ServiceStatusResult",
]
