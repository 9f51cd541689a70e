"""The wider demo release ``ops-tools/1.1.0``: the other demo integrations beside the refund story.

Inventory (a conflict key), purchase orders (preview and signed single-use token), report jobs
(submit, poll, retrieve), a legacy filing system (no idempotency keys; natural-key status check)
and a CRM (the user's own forwarded token). Each service owns its tables and resource kinds.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from toolgate.store.base import Store
from toolgate.tools.demo.crm import CrmClient, crm_specs
from toolgate.tools.demo.filing import FilingService, filing_specs
from toolgate.tools.demo.inventory import InventoryService, inventory_specs
from toolgate.tools.demo.purchasing import PurchasingService, purchasing_specs
from toolgate.tools.demo.records import DemoSystem
from toolgate.tools.demo.reports import ReportService, report_specs
from toolgate.tools.demo.service import DemoService
from toolgate.tools.spec import ResourceStatus, ToolSpec


def preview_signing_key(secret: bytes) -> bytes:
    """The purchase-preview signing key, derived from a configured secret shared by every process."""
    return hmac.new(secret, b"toolgate/po-preview-token/v1", hashlib.sha256).digest()


@dataclass(frozen=True)
class DemoServices:
    """The services of the wider demo release, each holding only its own records capability."""

    inventory: InventoryService
    purchasing: PurchasingService
    reports: ReportService
    filing: FilingService
    crm: CrmClient

    @classmethod
    def on(cls, store: Store, *, secret: bytes) -> DemoServices:
        """Services on ``store``; ``secret`` keys the preview-token signatures."""
        return cls(
            InventoryService(store),
            PurchasingService(store, signing_key=preview_signing_key(secret)),
            ReportService(store),
            FilingService(store),
            CrmClient(store),
        )

    def all(self) -> tuple[DemoService, ...]:
        """Every service, in setup order."""
        return (self.inventory, self.purchasing, self.reports, self.filing, self.crm)

    def setup(self, store: Store) -> None:
        """Trusted setup on ``store``: the services' tables, demo rows and records capabilities
        (after `DemoSystem.setup`)."""
        for service in self.all():
            service.setup(store)

    def specs(self) -> list[ToolSpec]:
        """The services' tools."""
        return [
            *inventory_specs(self.inventory),
            *purchasing_specs(self.purchasing),
            *report_specs(self.reports),
            *filing_specs(self.filing),
            *crm_specs(self.crm),
        ]


@dataclass(frozen=True)
class DemoResolver:
    """Resolves each resource kind with the service that owns it (orders and services: `DemoSystem`)."""

    system: DemoSystem
    services: DemoServices

    def resource_status(self, kind: str, resource_id: str, tenant_id: str) -> ResourceStatus:
        """Ownership of ``(kind, resource_id)`` relative to ``tenant_id``."""
        for service in self.services.all():
            if kind in service.resource_kinds:
                return service.resource_status(kind, resource_id, tenant_id)
        return self.system.resource_status(kind, resource_id, tenant_id)


__all__ = ["DemoResolver", "DemoServices", "preview_signing_key"]
