"""Argument and result models of the purchasing tools, and the currencies they take.

Identity never appears here: the tenant comes from the authenticated context, and the create
call names its order only by the signed preview token.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from toolgate.tools.demo.preview_tokens import TOKEN_PATTERN
from toolgate.tools.spec import StrictArgs, ToolResult

Currency = Literal["USD", "EUR", "GBP"]
TAX_RATE_BASIS_POINTS: dict[str, int] = {"USD": 825, "EUR": 1900, "GBP": 2000}
"""Demo sales-tax / VAT rates in basis points (8.25 %, 19 %, 20 %)."""


class LineItem(StrictArgs):
    """One line of a purchase order."""

    sku: str = Field(
        pattern=r"^SKU-[0-9]{1,6}$", description="Stock keeping unit, e.g. 'SKU-7'.", examples=["SKU-7"]
    )
    quantity: int = Field(ge=1, le=1000, description="Units to order, 1..1000.", examples=[5])
    unit_price_cents: int = Field(
        ge=0, le=10_000_000, description="Agreed unit price in cents.", examples=[1250]
    )


class PreviewPurchaseOrderArgs(StrictArgs):
    """Arguments of ``preview_purchase_order``."""

    vendor_id: str = Field(
        pattern=r"^V-[0-9]{3,6}$", description="Vendor id, e.g. 'V-100'.", examples=["V-100"]
    )
    line_items: list[LineItem] = Field(min_length=1, max_length=20, description="1 to 20 order lines.")
    currency: Currency = Field(description="Currency of the order.", examples=["USD"])


class CreatePurchaseOrderArgs(StrictArgs):
    """Arguments of ``create_purchase_order``: only the token, so nothing can drift from the preview."""

    preview_token: str = Field(
        pattern=TOKEN_PATTERN,
        description="The preview_token returned by preview_purchase_order, copied exactly.",
        # well-formed only: a real token is issued per preview and signed with the service key
        examples=["pvt_6e55db266812203611c20580.qlAAYzgI0iY2zhAsxRT_eTov4_Gs8lSR_NHX18HN0Nw"],
    )


class PreviewLine(ToolResult):
    sku: str
    quantity: int
    unit_price_cents: int
    line_total_cents: int


class PreviewPurchaseOrderResult(ToolResult):
    """What the order would be; nothing has been created."""

    preview_token: str
    vendor_id: str
    vendor_name: str
    currency: str
    line_items: list[PreviewLine]
    subtotal_cents: int
    tax_cents: int
    total_cents: int
    expires_at: str


class CreatePurchaseOrderResult(ToolResult):
    """A purchase order as recorded by the purchasing system."""

    po_id: str
    vendor_id: str
    currency: str
    subtotal_cents: int
    tax_cents: int
    total_cents: int
    status: Literal["created"]


__all__ = [
    "TAX_RATE_BASIS_POINTS",
    "CreatePurchaseOrderArgs",
    "CreatePurchaseOrderResult",
    "Currency",
    "LineItem",
    "PreviewLine",
    "PreviewPurchaseOrderArgs",
    "PreviewPurchaseOrderResult",
]
