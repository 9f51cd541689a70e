"""The demo release and its system of record (tenants, orders, services, payments)."""

from toolgate.tools.demo.catalog import (
    REFUND_RELEASE,
    WIDE_RELEASE,
    build_demo_registry,
    build_wide_registry,
    demo_specs,
)
from toolgate.tools.demo.records import DemoSystem
from toolgate.tools.demo.services import DemoResolver, DemoServices

__all__ = [
    "REFUND_RELEASE",
    "WIDE_RELEASE",
    "DemoResolver",
    "DemoServices",
    "DemoSystem",
    "build_demo_registry",
    "build_wide_registry",
    "demo_specs",
]
