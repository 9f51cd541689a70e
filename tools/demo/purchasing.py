"""The demo purchasing service: ``preview_purchase_order`` and ``create_purchase_order``.

Chapter §11.2 and Lab 7: a preview computes exactly what an order would be (subtotal, tax,
total) and issues a ``preview_token``; the create call takes only that token. The token is
signed, bound to the tenant, to the canonical previewed payload and to its expiry, and single
use. So the amounts a reviewer approves are the amounts that execute, and a replayed create is
refused by the same mechanism that gates it: one conditional UPDATE consumes the preview, and
zero rows back means "already used", never a second order.

Token format: ``pvt_<id>.<base64url HMAC-SHA256>``. The HMAC covers the id, the tenant, the
canonical JSON of the stored payload and the expiry, and is verified against the *stored*
preview row, so a forged token and a tampered stored payload are both refused.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, ClassVar, Literal

from pydantic import Field

from toolgate.canonical import canonical_json
from toolgate.clock import iso, parse_iso, utcnow
from toolgate.errors import ConfigurationError, ToolExecutionError
from toolgate.store import Migration, Store, Tx
from toolgate.tools.demo.records import count_rows
from toolgate.tools.spec import (
    ApprovalClass,
    HandlerContext,
    NoRollback,
    ResourceRef,
    ResourceStatus,
    Rollback,
    StrictArgs,
    ToolResult,
    ToolSpec,
    ownership,
)

COMPONENT = "demo_purchasing"

_SCHEMA = """
CREATE TABLE sor_vendors (vendor_id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, name TEXT NOT NULL);
CREATE TABLE sor_po_previews (
    preview_id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, payload TEXT NOT NULL,
    created_at TEXT NOT NULL, expires_at TEXT NOT NULL, consumed_at TEXT, consumed_key TEXT
);
CREATE TABLE sor_po_requests (
    request_id TEXT PRIMARY KEY, idempotency_key TEXT, tenant_id TEXT NOT NULL,
    preview_id TEXT NOT NULL, received_at TEXT NOT NULL
);
CREATE TABLE sor_purchase_orders (
    po_id TEXT PRIMARY KEY, idempotency_key TEXT NOT NULL UNIQUE, tenant_id TEXT NOT NULL,
    preview_id TEXT NOT NULL UNIQUE, vendor_id TEXT NOT NULL, currency TEXT NOT NULL,
    line_items TEXT NOT NULL, subtotal_cents BIGINT NOT NULL, tax_cents BIGINT NOT NULL,
    total_cents BIGINT NOT NULL, created_at TEXT NOT NULL
)"""

MIGRATIONS: tuple[Migration, ...] = (
    Migration(name="demo purchasing: vendors, previews, requests, orders", sqlite=_SCHEMA, postgres=_SCHEMA),
)

SEED_VENDORS = (
    ("V-100", "acme", "Contoso Parts"),
    ("V-101", "acme", "Northwind Components"),
    ("V-200", "globex", "Initech Supply"),
)

Currency = Literal["USD", "EUR", "GBP"]
TAX_RATE_BASIS_POINTS: dict[str, int] = {"USD": 825, "EUR": 1900, "GBP": 2000}
"""Demo sales-tax / VAT rates in basis points (8.25 %, 19 %, 20 %)."""

_TOKEN_PATTERN = r"^pvt_[0-9a-f]{24}\.[A-Za-z0-9_-]{43}$"
_TOKEN = re.compile(_TOKEN_PATTERN)


class LineItem(StrictArgs):
    """One line of a purchase order."""

    sku: str = Field(pattern=r"^SKU-[0-9]{1,6}$", description="Stock keeping unit, e.g. 'SKU-7'.")
    quantity: int = Field(ge=1, le=1000, description="Units to order, 1..1000.")
    unit_price_cents: int = Field(ge=0, le=10_000_000, description="Agreed unit price in cents.")


class PreviewPurchaseOrderArgs(StrictArgs):
    """Arguments of ``preview_purchase_order``."""

    vendor_id: str = Field(pattern=r"^V-[0-9]{3,6}$", description="Vendor id, e.g. 'V-100'.")
    line_items: list[LineItem] = Field(min_length=1, max_length=20, description="1 to 20 order lines.")
    currency: Currency = Field(description="Currency of the order.")


class CreatePurchaseOrderArgs(StrictArgs):
    """Arguments of ``create_purchase_order``: only the token, so nothing can drift from the preview."""

    preview_token: str = Field(
        pattern=_TOKEN_PATTERN,
        description="The preview_token returned by preview_purchase_order, copied exactly.",
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


def _refuse(message: str) -> ToolExecutionError:
    return ToolExecutionError("caller_error", message)


def preview_id_of(token: str) -> str | None:
    """The preview id inside a well-formed token (``None`` for anything else)."""
    if not _TOKEN.match(token):
        return None
    return token[len("pvt_") : token.index(".")]


@dataclass
class PurchasingService:
    """The purchasing system of record: vendors, signed previews and purchase orders.

    ``signing_key`` must be shared by every process that verifies tokens (from configuration,
    never a tool argument); ``now`` is injectable so expiry is testable without sleeping.
    """

    store: Store
    signing_key: bytes = field(repr=False)
    preview_ttl_s: float = 600.0
    now: Callable[[], datetime] = utcnow

    resource_kinds: ClassVar[frozenset[str]] = frozenset({"vendor", "preview"})

    def __post_init__(self) -> None:
        if len(self.signing_key) < 16:
            raise ConfigurationError("the purchase-order signing key must be at least 16 bytes")

    def setup(self, *, seed: bool = True) -> None:
        """Create the tables and, once, the demo vendors."""
        self.store.migrate(COMPONENT, MIGRATIONS)
        if seed:
            with self.store.transaction() as tx:
                for vendor in SEED_VENDORS:
                    tx.execute(
                        "INSERT INTO sor_vendors (vendor_id, tenant_id, name) VALUES (?, ?, ?)"
                        " ON CONFLICT DO NOTHING",
                        vendor,
                    )

    def resource_status(self, kind: str, resource_id: str, tenant_id: str) -> ResourceStatus:
        """Vendors by id; previews by the id inside the token (ownership only, not validity)."""
        with self.store.transaction(write=False) as tx:
            if kind == "vendor":
                row = tx.one("SELECT tenant_id FROM sor_vendors WHERE vendor_id = ?", (resource_id,))
            elif kind == "preview":
                preview_id = preview_id_of(resource_id)
                if preview_id is None:
                    return "missing"
                row = tx.one("SELECT tenant_id FROM sor_po_previews WHERE preview_id = ?", (preview_id,))
            else:
                return "missing"
        return ownership(row, tenant_id)

    # ---- tokens ------------------------------------------------------------------------

    def _mac(self, preview_id: str, tenant_id: str, payload: dict[str, Any], expires_at: str) -> str:
        message = canonical_json(
            {"id": preview_id, "tenant": tenant_id, "payload": payload, "expires_at": expires_at}
        )
        digest = hmac.new(self.signing_key, message.encode("utf-8"), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")

    def _verified_preview(self, tx: Tx, tenant_id: str, token: str) -> dict[str, Any]:
        """The stored preview behind ``token``: signature over the stored row first, then tenant."""
        preview_id = preview_id_of(token)
        row = None
        if preview_id is not None:
            row = tx.one("SELECT * FROM sor_po_previews WHERE preview_id = ?", (preview_id,))
        if preview_id is None or row is None:
            raise _refuse("unknown preview token; run preview_purchase_order again")
        expected = self._mac(preview_id, row["tenant_id"], json.loads(row["payload"]), row["expires_at"])
        if not hmac.compare_digest(expected, token.rsplit(".", 1)[1]):
            raise _refuse("preview token signature does not match the stored preview (forged or tampered)")
        if row["tenant_id"] != tenant_id:
            raise _refuse("unknown preview token; run preview_purchase_order again")
        return row

    def preview_summary(self, tenant_id: str, token: str) -> dict[str, Any]:
        """What a token would create, verified but not consumed: for the reviewer's approval view.

        ``create_purchase_order`` takes only the token, so a reviewer needs this to see the exact
        vendor, lines and totals being approved (and whether the token is still usable).
        """
        with self.store.transaction(write=False) as tx:
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
        with self.store.transaction(write=False) as tx:
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
        with self.store.transaction() as tx:
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
        with self.store.transaction() as tx:
            tx.execute(
                "INSERT INTO sor_po_requests VALUES (?, ?, ?, ?, ?)",
                ("poreq_" + secrets.token_hex(8), idempotency_key, tenant_id, preview_id, iso(utcnow())),
            )
        with self.store.transaction() as tx:
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
        with self.store.transaction(write=False) as tx:
            return tx.one(
                "SELECT * FROM sor_purchase_orders WHERE tenant_id = ? AND idempotency_key = ?",
                (tenant_id, idempotency_key),
            )

    def count(self, table: str, **where: Any) -> int:
        """Rows in one of this service's tables matching ``where`` (test and demo evidence)."""
        return count_rows(
            self.store, table, frozenset({"sor_po_previews", "sor_po_requests", "sor_purchase_orders"}), where
        )


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


__all__ = [
    "MIGRATIONS",
    "TAX_RATE_BASIS_POINTS",
    "CreatePurchaseOrderArgs",
    "CreatePurchaseOrderResult",
    "LineItem",
    "PreviewPurchaseOrderArgs",
    "PreviewPurchaseOrderResult",
    "PurchasingService",
    "preview_id_of",
    "purchasing_specs",
]
