"""The demo inventory service and its two tools, ``get_inventory`` and ``update_inventory``.

The downstream service is deliberately naive, like a real REST API without versioning: an
adjustment READS ``on_hand`` in one transaction, waits ``latency_s`` (the
network and application time between the two), then WRITES ``read_value + delta`` in a second
transaction. Two concurrent adjustments of the same SKU therefore lose an update. The gateway
must not rely on the service to fix that: ``update_inventory`` declares the SKU as its conflict
key, so same-SKU writes run one after the other, in a batch and across threads and processes (the
store's resource lease, `toolgate.graph.delivery.same_resource`); the tests remove the key to show the race.

Like every demo downstream, each request the service *receives* is logged in
``sor_inventory_requests`` separately from the adjustment it *performs*
(``sor_inventory_adjustments``, which dedupes on the idempotency key).
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Any

from toolgate.clock import iso, utcnow
from toolgate.errors import ToolExecutionError
from toolgate.store import Migration
from toolgate.tools.demo.inventory_models import (
    GetInventoryArgs,
    GetInventoryResult,
    UpdateInventoryArgs,
    UpdateInventoryResult,
)
from toolgate.tools.demo.service import DemoService, Owner, Seed
from toolgate.tools.spec import (
    ApprovalClass,
    HandlerContext,
    NoRollback,
    ResourceRef,
    Rollback,
    ToolSpec,
)

_SCHEMA = """
CREATE TABLE sor_inventory (
    tenant_id TEXT NOT NULL,
    sku TEXT NOT NULL,
    on_hand INTEGER NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (tenant_id, sku)
);
CREATE TABLE sor_inventory_requests (
    request_id TEXT PRIMARY KEY, idempotency_key TEXT, tenant_id TEXT NOT NULL,
    sku TEXT NOT NULL, delta INTEGER NOT NULL, received_at TEXT NOT NULL
);
CREATE TABLE sor_inventory_adjustments (
    adjustment_id TEXT PRIMARY KEY, idempotency_key TEXT NOT NULL UNIQUE, tenant_id TEXT NOT NULL,
    sku TEXT NOT NULL, delta INTEGER NOT NULL, reason TEXT NOT NULL,
    on_hand_before INTEGER NOT NULL, on_hand_after INTEGER NOT NULL, created_at TEXT NOT NULL
)"""

MIGRATIONS: tuple[Migration, ...] = (
    Migration(name="demo inventory: stock levels, requests, adjustments", sqlite=_SCHEMA, postgres=_SCHEMA),
)

SEED_STOCK = (("acme", "SKU-7", 10), ("acme", "SKU-8", 40), ("globex", "SKU-9", 25))


@dataclass
class InventoryService(DemoService):
    """The naive downstream inventory service over ``sor_inventory`` (fixed SQL, bound parameters).

    ``latency_s`` widens the read-modify-write window so tests can reproduce the lost update.
    """

    latency_s: float = 0.0

    component = "demo_inventory"
    migrations = MIGRATIONS
    owners = {"sku": Owner("sor_inventory", "sku")}
    """A SKU is owned when the tenant stocks it, foreign when only another tenant does."""
    countable = frozenset({"sor_inventory_requests", "sor_inventory_adjustments"})
    tables = frozenset({"sor_inventory", *countable})

    def seed_rows(self) -> tuple[Seed, ...]:
        """The demo stock, stamped with the moment of setup."""
        now = iso(utcnow())
        columns = ("tenant_id", "sku", "on_hand", "updated_at")
        return (Seed("sor_inventory", columns, tuple((*row, now) for row in SEED_STOCK)),)

    def on_hand(self, tenant_id: str, sku: str) -> int:
        """Current stock of one SKU of the tenant, or a caller error."""
        with self.records.transaction(write=False) as tx:
            row = tx.one(
                "SELECT on_hand FROM sor_inventory WHERE tenant_id = ? AND sku = ?", (tenant_id, sku)
            )
        if row is None:
            raise ToolExecutionError("caller_error", f"no {sku} in this account's inventory")
        return int(row["on_hand"])

    def adjust(
        self, tenant_id: str, sku: str, delta: int, idempotency_key: str, *, reason: str = "cycle_count"
    ) -> dict[str, Any]:
        """Log the request; replay a known key; else read, wait, write ``read + delta`` (racy)."""
        now = iso(utcnow())
        with self.records.transaction() as tx:
            tx.execute(
                "INSERT INTO sor_inventory_requests VALUES (?, ?, ?, ?, ?, ?)",
                ("ireq_" + secrets.token_hex(8), idempotency_key, tenant_id, sku, delta, now),
            )
        with self.records.transaction(write=False) as tx:
            prior = tx.one(
                "SELECT * FROM sor_inventory_adjustments WHERE idempotency_key = ?", (idempotency_key,)
            )
            row = tx.one(
                "SELECT on_hand FROM sor_inventory WHERE tenant_id = ? AND sku = ?", (tenant_id, sku)
            )
        if prior is not None:
            return prior
        if row is None:
            raise ToolExecutionError("caller_error", f"no {sku} in this account's inventory")
        read_value = int(row["on_hand"])
        if read_value + delta < 0:
            raise ToolExecutionError(
                "caller_error", f"{sku} has {read_value} on hand; removing {-delta} would go below zero"
            )
        if self.latency_s > 0:
            time.sleep(self.latency_s)  # the read-modify-write window of a REST API without versions
        adjustment = {
            "adjustment_id": "adj_" + secrets.token_hex(8),
            "idempotency_key": idempotency_key,
            "tenant_id": tenant_id,
            "sku": sku,
            "delta": delta,
            "reason": reason,
            "on_hand_before": read_value,
            "on_hand_after": read_value + delta,
            "created_at": iso(utcnow()),
        }
        with self.records.transaction() as tx:
            inserted = tx.execute(
                "INSERT INTO sor_inventory_adjustments (adjustment_id, idempotency_key, tenant_id, sku, delta,"
                " reason, on_hand_before, on_hand_after, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (idempotency_key) DO NOTHING RETURNING adjustment_id",
                tuple(adjustment.values()),
            )
            if inserted:
                # the naive part: an absolute write of a value computed from a stale read
                tx.execute(
                    "UPDATE sor_inventory SET on_hand = ?, updated_at = ? WHERE tenant_id = ? AND sku = ?",
                    (read_value + delta, adjustment["created_at"], tenant_id, sku),
                )
            else:
                # a concurrent request with the same key won: return its record, change nothing
                won = tx.one(
                    "SELECT * FROM sor_inventory_adjustments WHERE idempotency_key = ?", (idempotency_key,)
                )
                assert won is not None
                return won
        return adjustment

    def adjustment_by_key(self, tenant_id: str, idempotency_key: str) -> dict[str, Any] | None:
        """The service's status query by idempotency key (no side effect), for reconciliation."""
        return self._by_key("sor_inventory_adjustments", tenant_id, idempotency_key)


def inventory_specs(service: InventoryService) -> list[ToolSpec]:
    """``get_inventory`` and ``update_inventory``, bound to ``service``."""

    def get_inventory(args: GetInventoryArgs, ctx: HandlerContext) -> GetInventoryResult:
        return GetInventoryResult(sku=args.sku, on_hand=service.on_hand(ctx.tenant_id, args.sku))

    def update_inventory(args: UpdateInventoryArgs, ctx: HandlerContext) -> UpdateInventoryResult:
        adjustment = service.adjust(
            ctx.tenant_id, args.sku, args.delta, ctx.require_idempotency_key(), reason=args.reason
        )
        return UpdateInventoryResult.model_validate({**adjustment, "status": "applied"})

    def stays_non_negative(args: UpdateInventoryArgs, ctx: HandlerContext) -> str | None:
        on_hand = service.on_hand(ctx.tenant_id, args.sku)
        if on_hand + args.delta < 0:
            return f"{args.sku} has {on_hand} on hand; delta must be at least {-on_hand}."
        return None

    def adjustment_status(args: UpdateInventoryArgs, ctx: HandlerContext) -> UpdateInventoryResult | None:
        adjustment = service.adjustment_by_key(ctx.tenant_id, ctx.require_idempotency_key())
        return (
            UpdateInventoryResult.model_validate({**adjustment, "status": "applied"}) if adjustment else None
        )

    return [
        ToolSpec(
            name="get_inventory",
            version="1.0.0",
            owner="warehouse-systems",
            description=(
                "Read how many units of one SKU (e.g. 'SKU-7') are on hand. Use it to answer stock questions "
                "and before proposing a change. Changes nothing; to change a count use update_inventory."
            ),
            args_model=GetInventoryArgs,
            result_model=GetInventoryResult,
            risk="read-only",
            effect="Reads the stock level of one SKU of the authenticated tenant.",
            timeout_s=5,
            max_output_bytes=1024,
            approval=ApprovalClass.none(),
            required_scopes=frozenset({"inventory:read"}),
            handler=get_inventory,
            handler_revision="get-inventory/1.0.0",
            rollback=NoRollback("read-only: nothing to undo"),
            resource=ResourceRef(kind="sku", argument="sku", conflict=False),
            audit_fields=frozenset({"sku"}),
        ),
        ToolSpec(
            name="update_inventory",
            version="1.0.0",
            owner="warehouse-systems",
            description=(
                "Propose adding or removing units of one SKU in the warehouse count, with a reason code. "
                "A warehouse reviewer must approve it; the result says pending_approval until then. "
                "One call per SKU change; to only look at stock use get_inventory, and to order stock "
                "from a vendor use preview_purchase_order instead."
            ),
            args_model=UpdateInventoryArgs,
            result_model=UpdateInventoryResult,
            risk="caution",
            effect="Changes the on-hand count of one SKU by delta units.",
            timeout_s=10,
            max_output_bytes=1024,
            approval=ApprovalClass.role("warehouse"),
            required_scopes=frozenset({"inventory:write"}),
            handler=update_inventory,
            handler_revision="update-inventory/1.0.0",
            rollback=Rollback(
                "apply the opposite delta through a separately approved update_inventory",
                tool="update_inventory",
                arguments=lambda done: {"sku": done["sku"], "delta": -done["delta"], "reason": "cycle_count"},
            ),
            resource=ResourceRef(kind="sku", argument="sku", conflict=True),
            audit_fields=frozenset({"sku", "delta", "reason"}),
            semantic_check=stays_non_negative,
            reconcile=adjustment_status,
            retry_safe_when_absent=True,  # the service dedupes on the idempotency key
        ),
    ]


__all__ = [
    "MIGRATIONS",
    "GetInventoryArgs",
    "GetInventoryResult",
    "InventoryService",
    "UpdateInventoryArgs",
    "UpdateInventoryResult",
    "inventory_specs",
]
