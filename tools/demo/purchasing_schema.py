"""The purchasing system of record's tables and its demo vendors.

Apart from `toolgate.tools.demo.purchasing` because more than the service relies on this layout:
`toolgate.tools.demo.preview_tokens` verifies a token against its stored ``sor_po_previews`` row,
and the migration runs once per store under the service's component name, so changing a table
means a new migration here, never an edit of the old one. The service module keeps only
behaviour: previews, orders and the tool specs.
"""

from __future__ import annotations

from toolgate.store import Migration

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


__all__ = ["MIGRATIONS", "SEED_VENDORS"]
