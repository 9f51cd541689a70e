"""The demo purchasing service: ``preview_purchase_order`` and ``create_purchase_order``.

Preview, then confirm: a preview computes exactly what an order would be (subtotal, tax,
total) and issues a ``preview_token``; the create call takes only that token. The token is
signed, bound to the tenant, to the canonical previewed payload and to its expiry, and single
use. So the amounts a reviewer approves are the amounts that execute, and a replayed create is
refused by the same mechanism that gates it: one conditional UPDATE consumes the preview, and
zero rows back means "already used", never a second order. The token format and its checks
are in `toolgate.tools.demo.preview_tokens`; the tools' argument and result models in
`toolgate.tools.demo.purchasing_models`; the tables and demo vendors in
`toolgate.tools.demo.purchasing_schema`.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from toolgate.canonical import canonical_json
from toolgate.clock import iso, parse_iso, utcnow
from toolgate.errors import ConfigurationError, ToolExecutionError
from toolgate.store import Store, Tx
from toolgate.tools.demo.preview_tokens import preview_id_of, token_mac, verified_preview
from toolgate.tools.demo.purchasing_models import (
    TAX_RATE_BASIS_POINTS,
    CreatePurchaseOrderArgs,
    CreatePurchaseOrderResult,
    PreviewPurchaseOrderArgs,
    PreviewPurchaseOrderResult,
)
from toolgate.tools.demo.purchasing_schema import MIGRATIONS, SEED_VENDORS
from toolgate.tools.demo.service import DemoService, Owner, Seed
from toolgate.tools.spec import (
    ApprovalClass,
    HandlerContext,
    NoRollback,
    ResourceRef,
    Rollback,
    ToolSpec,
)


def _refuse(message: str) -> ToolExecutionError:
    return ToolExecutionError("caller_error", message)


@dataclass
class PurchasingService(DemoService):
    """The purchasing system of record: vendors, signed previews and purchase orders.

    ``signing_key`` must be shared by every process that verifies tokens (from configuration,
    never a tool argument); ``now`` is injectable so expiry is testable without sleeping.
    """

    signing_key: bytes = field(repr=False)
    preview_ttl_s: float = 600.0
    now: Callable[[], datetime] = utcnow

    component = "demo_purchasing"
    migrations = MIGRATIONS
    seeds = (Seed("sor_vendors", ("vendor_id", "tenant_id", "name"), SEED_VENDORS),)
    owners = {
        "vendor": Owner("sor_vendors", "vendor_id"),
        # a preview by the id inside its token: ownership only, not validity
        "preview": Owner("sor_po_previews", "preview_id", stored_id=preview_id_of),
    }
    countable = frozenset({"sor_po_previews", "sor_po_requests", "sor_purchase_orders"})
    tables = frozenset({"sor_vendors", *countable})
    read_appends = frozenset({"sor_po_previews"})
    """``preview_purchase_order`` (a read) stores the preview its signed token names."""

    def __post_init__(self, store: Store | None) -> None:
        super().__post_init__(store)
        if len(self.signing_key) < 16:
            raise ConfigurationError("the purchase-order signing key must be at least 16 bytes")

    # ---- tokens (with this service's key; ``preview`` and ``create`` call these) ---------

    def _mac(self, preview_id: str, tenant_id: str, payload: dict[str, Any], expires_at: str) -> str:
        return token_mac(self.signing_key, preview_id, tenant_id, payload, expires_at)

    def _verified_preview(self, tx: Tx, tenant_id: str, token: str) -> dict[str, Any]:
        return verified_preview(tx, self.signing_key, tenant_id, token)

    def preview_summary(self, tenant_id: str, token: str) -> dict[str, Any]:
        """What a token would create, verified but not consumed: for the reviewer's approval view.

        ``create_purchase_order`` takes only the token, so a reviewer needs this to see the exact
        vendor, lines and totals being approved (and whether the token is still usable).
        """
        with self.records.transaction(write=False) as tx:
            row = self._verified_preview(tx, tenant_id, token)
        return {
            **json.loads(row["payload"]),
            "expires_at": row["expires_at"],
            "expired": self.now() >= parse_iso(row["expires_at"]),
            "used": row["consumed_at"] is not None,
        }

    # ---- preview (no business effect) --------------------------------------------------

    def preview(self, tenant_id: str, args: PreviewPurchaseOrderArgs) -> dict[str, Any]:
        """Compute the order and store a short-lived, signed preview of it."""
        with self.records.transaction(write=False) as tx:
            vendor = tx.one(
                "SELECT * FROM sor_vendors WHERE tenant_id = ? AND vendor_id = ?", (tenant_id, args.vendor_id)
            )
        if vendor is None:
            raise _refuse(f"no vendor {args.vendor_id} for this account")
        lines: list[dict[str, Any]] = [
            {
                "sku": item.sku,
                "quantity": item.quantity,
                "unit_price_cents": item.unit_price_cents,
                "line_total_cents": item.quantity * item.unit_price_cents,
            }
            for item in args.line_items
        ]
        subtotal = sum(item.quantity * item.unit_price_cents for item in args.line_items)
        tax = (subtotal * TAX_RATE_BASIS_POINTS[args.currency] + 5_000) // 10_000  # half-up to the cent
        payload = {
            "vendor_id": args.vendor_id,
            "currency": args.currency,
            "line_items": lines,
            "subtotal_cents": subtotal,
            "tax_cents": tax,
            "total_cents": subtotal + tax,
        }
        now = self.now()
        preview_id = secrets.token_hex(12)
        expires_at = iso(now + timedelta(seconds=self.preview_ttl_s))
        with self.records.transaction() as tx:
            tx.execute(
                "INSERT INTO sor_po_previews (preview_id, tenant_id, payload, created_at, expires_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (preview_id, tenant_id, canonical_json(payload), iso(now), expires_at),
            )
        token = f"pvt_{preview_id}.{self._mac(preview_id, tenant_id, payload, expires_at)}"
        return {**payload, "preview_token": token, "vendor_name": vendor["name"], "expires_at": expires_at}

    # ---- create (the effect) -----------------------------------------------------------

    def create(self, tenant_id: str, token: str, idempotency_key: str) -> dict[str, Any]:
        """Verify signature, tenant, expiry; consume the preview once; create the order.

        Consumption and creation share one transaction, so there is never a consumed preview
        without its order. A repeat with the same idempotency key (the same operation,
        redelivered) gets the stored order; any other second use is refused.
        """
        preview_id = preview_id_of(token)
        if preview_id is None:
            raise _refuse("malformed preview token; run preview_purchase_order again")
        with self.records.transaction() as tx:
            tx.execute(
                "INSERT INTO sor_po_requests VALUES (?, ?, ?, ?, ?)",
                ("poreq_" + secrets.token_hex(8), idempotency_key, tenant_id, preview_id, iso(utcnow())),
            )
        with self.records.transaction() as tx:
            row = self._verified_preview(tx, tenant_id, token)
            prior = tx.one(
                "SELECT * FROM sor_purchase_orders WHERE tenant_id = ? AND idempotency_key = ?",
                (tenant_id, idempotency_key),
            )
            if prior is not None:
                if prior["preview_id"] != preview_id:
                    raise _refuse("this operation already created a different purchase order")
                return prior  # the same operation redelivered: its order, not a second one
            now = self.now()
            if now >= parse_iso(row["expires_at"]):
                raise _refuse(
                    f"preview token expired at {row['expires_at']}; run preview_purchase_order again "
                    "and get the new preview approved"
                )
            consumed = tx.execute(
                "UPDATE sor_po_previews SET consumed_at = ?, consumed_key = ?"
                " WHERE preview_id = ? AND consumed_at IS NULL RETURNING preview_id",
                (iso(now), idempotency_key, preview_id),
            )
            if not consumed:
                raise _refuse("preview token already used; the purchase order was not created again")
            payload = json.loads(row["payload"])
            order = {
                "po_id": "PO-" + secrets.token_hex(6).upper(),
                "idempotency_key": idempotency_key,
                "tenant_id": tenant_id,
                "preview_id": preview_id,
                "vendor_id": payload["vendor_id"],
                "currency": payload["currency"],
                "line_items": canonical_json(payload["line_items"]),
                "subtotal_cents": payload["subtotal_cents"],
                "tax_cents": payload["tax_cents"],
                "total_cents": payload["total_cents"],
                "created_at": iso(now),
            }
            tx.execute(
                f"INSERT INTO sor_purchase_orders ({', '.join(order)}) VALUES ({', '.join('?' for _ in order)})",
                tuple(order.values()),
            )
        return order

    def order_for_key(self, tenant_id: str, idempotency_key: str) -> dict[str, Any] | None:
        """Status check for reconciliation: the order created under this key, if any."""
        return self._by_key("sor_purchase_orders", tenant_id, idempotency_key)


def purchasing_specs(service: PurchasingService) -> list[ToolSpec]:
    """``preview_purchase_order`` and ``create_purchase_order``, bound to ``service``."""

    def preview_purchase_order(
        args: PreviewPurchaseOrderArgs, ctx: HandlerContext
    ) -> PreviewPurchaseOrderResult:
        return PreviewPurchaseOrderResult.model_validate(service.preview(ctx.tenant_id, args))

    def create_purchase_order(
        args: CreatePurchaseOrderArgs, ctx: HandlerContext
    ) -> CreatePurchaseOrderResult:
        order = service.create(ctx.tenant_id, args.preview_token, ctx.require_idempotency_key())
        return CreatePurchaseOrderResult.model_validate({**order, "status": "created"})

    def preview_still_usable(args: CreatePurchaseOrderArgs, ctx: HandlerContext) -> str | None:
        # refuse a stale token before a person is asked to approve it (execute re-checks anyway)
        summary = service.preview_summary(ctx.tenant_id, args.preview_token)
        if summary["used"]:
            return "this preview_token was already used; run preview_purchase_order again for a new order."
        if summary["expired"]:
            return "this preview_token has expired; run preview_purchase_order again."
        return None

    def order_status(args: CreatePurchaseOrderArgs, ctx: HandlerContext) -> CreatePurchaseOrderResult | None:
        order = service.order_for_key(ctx.tenant_id, ctx.require_idempotency_key())
        return CreatePurchaseOrderResult.model_validate({**order, "status": "created"}) if order else None

    ttl_minutes = max(1, round(service.preview_ttl_s / 60))
    return [
        ToolSpec(
            name="preview_purchase_order",
            version="1.0.0",
            owner="procurement",
            description=(
                "Compute exactly what a purchase order to one vendor would be (line totals, tax, total) "
                "WITHOUT creating it, and get a preview_token for it. Always call this first and show the "
                f"result to the user; the token expires in {ttl_minutes} minutes. To actually place the "
                "order use create_purchase_order with that token. Not for adjusting stock counts "
                "(that is update_inventory)."
            ),
            args_model=PreviewPurchaseOrderArgs,
            result_model=PreviewPurchaseOrderResult,
            risk="read-only",
            effect="Computes an order and stores a short-lived signed preview; nothing is ordered.",
            timeout_s=5,
            max_output_bytes=8192,
            approval=ApprovalClass.none(),
            required_scopes=frozenset({"purchasing:read"}),
            handler=preview_purchase_order,
            handler_revision="preview-purchase-order/1.0.0",
            rollback=NoRollback("read-only: a preview orders nothing and expires on its own"),
            resource=ResourceRef(kind="vendor", argument="vendor_id", conflict=False),
            audit_fields=frozenset({"vendor_id", "currency"}),
        ),
        ToolSpec(
            name="create_purchase_order",
            version="1.0.0",
            owner="procurement",
            description=(
                "Place the purchase order previously computed by preview_purchase_order. Takes only the "
                "exact preview_token from that call: the order is created with the previewed amounts. A "
                "purchasing manager must approve it; the result says pending_approval until then. The "
                "token is single-use and expires; a used or expired token is refused, never re-executed. "
                "Never call it without a fresh preview_purchase_order first."
            ),
            args_model=CreatePurchaseOrderArgs,
            result_model=CreatePurchaseOrderResult,
            risk="danger",
            effect="Creates a binding purchase order with the vendor for the previewed total.",
            timeout_s=15,
            max_output_bytes=2048,
            approval=ApprovalClass.role("purchasing_manager"),
            required_scopes=frozenset({"purchasing:write"}),
            handler=create_purchase_order,
            handler_revision="create-purchase-order/1.0.0",
            review_details=lambda args, ctx: service.preview_summary(ctx.tenant_id, args.preview_token),
            rollback=Rollback(
                "cancel the purchase order with the vendor through a separately approved request"
            ),
            resource=ResourceRef(kind="preview", argument="preview_token", conflict=True),
            audit_fields=frozenset(),
            semantic_check=preview_still_usable,
            reconcile=order_status,
            retry_safe_when_absent=True,  # no order means the preview was not consumed (same transaction)
        ),
    ]


__all__ = ["PurchasingService", "purchasing_specs"]
