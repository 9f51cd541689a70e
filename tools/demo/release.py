"""The demo releases, registered like any other release (entry points ``ops-tools/1.0.0`` and
``ops-tools/1.1.0`` in the group ``toolgate.releases``): specs bound to the demo system of record
kept in the toolgate store, each with its ``policy.json`` and reviewed ``manifest.json`` beside
it under ``releases/<name>-<version>/``."""

from __future__ import annotations

from pathlib import Path

from toolgate.releases.bundle import Release, ReleaseEnv
from toolgate.store.base import Store
from toolgate.tools.credentials import HmacCredentialProvider
from toolgate.tools.demo.catalog import REFUND_RELEASE, WIDE_RELEASE, demo_specs
from toolgate.tools.demo.crm_hub import HubCrmApi, HubCrmClient, hubcrm_overrides
from toolgate.tools.demo.records import DemoSystem
from toolgate.tools.demo.services import DemoResolver, DemoServices
from toolgate.tools.spec import ToolSpec
from toolgate.tools.tenant_overrides import TenantOverride

HOME = Path(__file__).resolve().parent / "releases"
"""Where the demo releases' files live."""


def setup_refund(store: Store) -> None:
    """Create and seed the demo system of record (tenants, customers, orders, services)."""
    DemoSystem(store).setup(store)


def setup_wide(store: Store) -> None:
    """The refund story's tables plus the other demo services' (inventory, purchasing, ...)."""
    DemoSystem(store).setup(store)
    DemoServices.on(store, secret=b"schema-setup-only").setup(store)  # tables only: nothing is signed
    HubCrmClient(store, api=HubCrmApi(store)).setup(store)  # globex's own CRM


def refund_tools(env: ReleaseEnv) -> list[ToolSpec]:
    """The four refund-story tools on ``env``'s store."""
    return demo_specs(DemoSystem(env.store))


def refund_resolver(env: ReleaseEnv) -> DemoSystem:
    """Ownership of orders and services."""
    return DemoSystem(env.store)


def wide_tools(env: ReleaseEnv) -> list[ToolSpec]:
    """The refund story plus the other demo integrations."""
    return [*demo_specs(DemoSystem(env.store)), *DemoServices.on(env.store, secret=env.secret).specs()]


def wide_overrides(env: ReleaseEnv) -> list[TenantOverride]:
    """Globex's own CRM behind ``crm_lookup_contact`` (`toolgate.tools.demo.crm_hub`); HubCRM checks
    the credentials the process issues with the store's secret, the key the process signs with."""
    api = HubCrmApi(env.store, verifier=HmacCredentialProvider(env.secret))
    return hubcrm_overrides(HubCrmClient(env.store, api=api))


def wide_resolver(env: ReleaseEnv) -> DemoResolver:
    """Ownership for every demo resource kind."""
    return DemoResolver(DemoSystem(env.store), DemoServices.on(env.store, secret=env.secret))


def _home(release_id: str) -> Path:
    return HOME / release_id.replace("/", "-")


refund = Release.from_directory(
    _home(REFUND_RELEASE),
    id=REFUND_RELEASE,
    tools=refund_tools,
    resolver=refund_resolver,
    setup=setup_refund,
)
"""``ops-tools/1.0.0``: the refund story (four tools), kept as the previous complete bundle."""

wide = Release.from_directory(
    _home(WIDE_RELEASE),
    id=WIDE_RELEASE,
    tools=wide_tools,
    resolver=wide_resolver,
    setup=setup_wide,
    tenant_overrides=wide_overrides,
)
"""``ops-tools/1.1.0``: the default demo release."""

DEMO_RELEASES = {release.id: release for release in (refund, wide)}
"""The demo releases by id (tests and benchmarks use them directly)."""

__all__ = [
    "DEMO_RELEASES",
    "HOME",
    "REFUND_RELEASE",
    "WIDE_RELEASE",
    "refund",
    "refund_tools",
    "setup_refund",
    "setup_wide",
    "wide",
    "wide_overrides",
    "wide_resolver",
    "wide_tools",
]
