"""Argument and result models of ``get_inventory`` and ``update_inventory``: the tools' contract
with the model.

Apart from `toolgate.tools.demo.inventory` (the naive downstream service and the tool specs) to
keep that module under the size limit; it re-exports them. The examples are a realistic call on
the demo stock (acme holds 10 of SKU-7).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from toolgate.tools.spec import StrictArgs, ToolResult

InventoryReason = Literal["received", "shipped", "damaged", "returned", "cycle_count"]
"""Closed set of adjustment reasons (a free-text reason would be an injection channel)."""

Sku = Field(
    pattern=r"^SKU-[0-9]{1,6}$",
    description="Stock keeping unit exactly as labelled, e.g. 'SKU-7'.",
    examples=["SKU-7"],
)


class GetInventoryArgs(StrictArgs):
    """Arguments of ``get_inventory``."""

    sku: str = Sku


class GetInventoryResult(ToolResult):
    """Stock level of one SKU."""

    sku: str
    on_hand: int


class UpdateInventoryArgs(StrictArgs):
    """Arguments of ``update_inventory``."""

    sku: str = Sku
    delta: int = Field(
        ge=-500,
        le=500,
        description="Units to add (positive) or remove (negative), -500..500, never 0.",
        examples=[-3],
    )
    reason: InventoryReason = Field(description="Why the stock level changes.", examples=["shipped"])

    @field_validator("delta")
    @classmethod
    def _not_zero(cls, value: int) -> int:
        if value == 0:
            raise ValueError("delta must not be 0 (an adjustment of nothing is not an adjustment)")
        return value


class UpdateInventoryResult(ToolResult):
    """An adjustment as recorded by the inventory service."""

    adjustment_id: str
    sku: str
    delta: int
    on_hand_after: int
    status: Literal["applied"]


__all__ = [
    "GetInventoryArgs",
    "GetInventoryResult",
    "InventoryReason",
    "Sku",
    "UpdateInventoryArgs",
    "UpdateInventoryResult",
]
