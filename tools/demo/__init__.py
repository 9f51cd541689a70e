"""The demo release and its system of record (tenants, orders, services, payments)."""

from toolgate.tools.demo.catalog import build_demo_registry, demo_specs
from toolgate.tools.demo.records import DemoSystem

__all__ = ["DemoSystem", "build_demo_registry", "demo_specs"]
