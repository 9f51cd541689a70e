"""A release-like 40-tool catalog for measuring tool selection: the demo's 12 tools and 28
realistic distractor read tools.

The distractors are what a grown catalog holds beside the tools a task needs: reads on the same
systems (orders, services, inventory, purchasing, reports, CRM) with their own descriptions and
bounded arguments (patterns, enums, numeric ranges, lengths), so a request naming an order id
matches several order tools and the selector must still keep the right one. They sit behind the
scopes the demo people already hold (four need none), so every case's principal sees them. They
exist only here: no release offers them, and their handlers only answer that they are
distractors (the measurement runs no handler).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from toolgate.releases.bundle import ReleaseEnv
from toolgate.tools.demo.release import wide_resolver, wide_tools
from toolgate.tools.handler import StrictArgs
from toolgate.tools.registry import Registry
from toolgate.tools.spec import ApprovalClass, HandlerContext, NoRollback, ToolSpec

CATALOG_RELEASE = "ops-tools-wide-catalog/1.1.0"
"""Id of the measurement catalog (never served)."""

ORDER = Field(pattern=r"^O-[0-9]{3,8}$", description="Order id, e.g. 'O-5512'.")
SKU = Field(pattern=r"^SKU-[0-9]{1,6}$", description="Stock keeping unit, e.g. 'SKU-7'.")
VENDOR = Field(pattern=r"^V-[0-9]{3,6}$", description="Vendor id, e.g. 'V-100'.")
Alias = Literal["web", "worker", "scheduler"]


class OrderArgs(StrictArgs):
    order_id: str = ORDER


class RecentOrdersArgs(StrictArgs):
    days: int = Field(ge=1, le=90, description="How many days back.")


class ServiceArgs(StrictArgs):
    service_alias: Alias


class LogArgs(StrictArgs):
    service_alias: Alias
    lines: int = Field(ge=1, le=200, description="Most recent lines to read.")


class MetricArgs(StrictArgs):
    service_alias: Alias
    metric: Literal["cpu", "memory", "latency", "error_rate"]


class IncidentArgs(StrictArgs):
    severity: Literal["sev1", "sev2", "sev3"]


class TeamArgs(StrictArgs):
    team: Literal["platform", "payments", "warehouse", "support"]


class SkuArgs(StrictArgs):
    sku: str = SKU


class SkuDaysArgs(StrictArgs):
    sku: str = SKU
    days: int = Field(ge=1, le=90)


class ThresholdArgs(StrictArgs):
    threshold: int = Field(ge=0, le=10000, description="Units below which a SKU counts as low.")


class VendorArgs(StrictArgs):
    vendor_id: str = VENDOR


class VendorSkuArgs(StrictArgs):
    vendor_id: str = VENDOR
    sku: str = SKU


class LimitArgs(StrictArgs):
    limit: int = Field(ge=1, le=50)


class ReportTypeArgs(StrictArgs):
    report_type: Literal["sales_summary", "refund_summary", "order_volume"]


class JobArgs(StrictArgs):
    job_id: str = Field(pattern=r"^JOB-[0-9A-F]{8}$", description="A finished report job's id.")


class QueryArgs(StrictArgs):
    query: str = Field(min_length=2, max_length=80, description="Words to search for.")


class CompanyArgs(StrictArgs):
    company_code: str = Field(pattern=r"^C-[0-9]{3,8}$", description="CRM company code, e.g. 'C-1001'.")


class RegionArgs(StrictArgs):
    region: Literal["emea", "americas", "apac"]


class CurrencyArgs(StrictArgs):
    currency: Literal["USD", "EUR", "GBP"]


class YearArgs(StrictArgs):
    year: int = Field(ge=2000, le=2100)


class Answer(BaseModel):
    note: str


D = tuple[str, str, str | None, type[StrictArgs]]
DISTRACTORS: tuple[D, ...] = (
    ("get_order_invoice", "Fetch the invoice (number, date, totals, tax) of one order by its id.", "orders:read", OrderArgs),
    ("list_order_shipments", "List the carrier shipments and tracking numbers of an order.", "orders:read", OrderArgs),
    ("get_order_notes", "Read the internal support notes attached to an order.", "orders:read", OrderArgs),
    ("get_return_label", "Read the return label and return authorization of an order.", "orders:read", OrderArgs),
    ("list_recent_orders", "List the customer's orders placed in the last few days.", "orders:read", RecentOrdersArgs),
    ("get_payment_method", "Show the payment method (card brand, last four) used for an order.", "orders:read", OrderArgs),
    ("get_service_logs", "Read the most recent log lines of one service alias.", "ops:read", LogArgs),
    ("get_deploy_history", "List the recent deployments of one service alias with their versions.", "ops:read", ServiceArgs),
    ("get_service_metrics", "Read one metric (cpu, memory, latency, errors) of a service alias.", "ops:read", MetricArgs),
    ("list_open_incidents", "List the open incidents of a severity with their owners.", "ops:read", IncidentArgs),
    ("get_oncall_schedule", "Who is on call this week for a team.", "ops:read", TeamArgs),
    ("get_sku_details", "Read the catalog details (name, dimensions, supplier) of a SKU.", "inventory:read", SkuArgs),
    ("list_low_stock", "List the SKUs whose units on hand are below a threshold.", "inventory:read", ThresholdArgs),
    ("get_bin_locations", "Where a SKU is shelved: warehouse, aisle and bin.", "inventory:read", SkuArgs),
    ("get_stock_movements", "The recent receipts, shipments and adjustments of a SKU.", "inventory:read", SkuDaysArgs),
    ("get_vendor_profile", "Read a vendor's profile: address, contacts, payment terms.", "purchasing:read", VendorArgs),
    ("list_open_purchase_orders", "List the purchase orders still open with a vendor.", "purchasing:read", VendorArgs),
    ("get_price_list", "A vendor's current list price for one SKU.", "purchasing:read", VendorSkuArgs),
    ("get_vendor_lead_time", "A vendor's typical delivery lead time in days.", "purchasing:read", VendorArgs),
    ("list_report_jobs", "List the most recent report jobs and who started them.", "reports:read", LimitArgs),
    ("get_report_schedule", "When a report type runs on its schedule.", "reports:read", ReportTypeArgs),
    ("download_report_summary", "The first lines of a finished report job's output.", "reports:read", JobArgs),
    ("crm_search_contacts", "Search CRM contacts by name or company words.", "crm:read", QueryArgs),
    ("crm_get_company", "Read a CRM company record: name, owner, tier.", "crm:read", CompanyArgs),
    ("get_business_hours", "The support desk's opening hours in a region.", None, RegionArgs),
    ("get_exchange_rate", "Today's reference exchange rate of a currency against the euro.", None, CurrencyArgs),
    ("search_help_articles", "Search the public help center articles.", None, QueryArgs),
    ("get_holiday_calendar", "The public holidays the company observes in a year.", None, YearArgs),
)  # fmt: skip
"""Name, description, required scope (None: open) and arguments of each distractor."""


def _distractor_handler(args: Any, ctx: HandlerContext) -> Answer:
    return Answer(note="measurement-only distractor")


def distractor_specs() -> list[ToolSpec]:
    """The 28 distractor read tools."""
    return [
        ToolSpec(
            name=name,
            version="1.0.0",
            owner="catalog-measurement",
            description=f"{text} Does not change anything.",
            args_model=args,
            result_model=Answer,
            risk="read-only",
            effect="Reads nothing real: a measurement distractor.",
            timeout_s=5,
            max_output_bytes=2048,
            approval=ApprovalClass.none(),
            required_scopes=frozenset({scope} if scope else ()),
            handler=_distractor_handler,
            handler_revision=f"{name.replace('_', '-')}/1.0.0",
            rollback=NoRollback("read-only: nothing to undo"),
        )
        for name, text, scope, args in DISTRACTORS
    ]


def wide_catalog(env: ReleaseEnv) -> Registry:
    """The 40-tool registry: the demo release's 12 tools and the 28 distractors."""
    specs = [*wide_tools(env), *distractor_specs()]
    return Registry.of(CATALOG_RELEASE, specs, wide_resolver(env))


__all__ = ["CATALOG_RELEASE", "DISTRACTORS", "distractor_specs", "wide_catalog"]
