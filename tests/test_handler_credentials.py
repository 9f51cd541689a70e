"""Least privilege for credentials: a handler holds the forwarded credentials its tool declares
and no others, and a short-lived, scoped, rotated service credential when it declares one.

- A tool that did not declare ``crm_token`` does not see it; one that did sees only it, and asking
  for an undeclared one is `CapabilityDenied`.
- `HmacCredentialProvider`: scoped to one audience, cached until near expiry then refreshed,
  rotated to a new key id while tokens of the old key stay valid until their own expiry; a forged,
  expired, future-keyed or other audience's token is refused; the token never shows in a repr.
- Malformed declarations stop the tool from loading; the manifest pins what a handler may reach.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from support import Harness, principal

from toolgate.errors import CapabilityDenied, RegistryError, ToolExecutionError
from toolgate.graph.delivery.executor import Executor
from toolgate.graph.delivery.handler_scope import builtin_provider
from toolgate.store import Store
from toolgate.tools import Registry
from toolgate.tools.credentials import HmacCredentialProvider, ServiceScope
from toolgate.tools.manifest import tool_fingerprint
from toolgate.tools.spec import HandlerContext

FORWARDED = {"crm_token": "crm_secret_value_01", "hr_token": "hr_secret_value_02"}


def seen_by(store: Store, **declares: Any) -> HandlerContext:
    """The context a read handler of a tool declaring ``declares`` receives for ``FORWARDED``."""
    harness = Harness(store)
    status = harness.registry.tools["get_service_status"]
    seen: list[HandlerContext] = []

    def spy(args: Any, ctx: HandlerContext) -> Any:
        seen.append(ctx)
        return status.handler(args, ctx)

    spec = replace(status, handler=spy, **declares)
    gateway = harness.gateway()
    registry = Registry.of(harness.registry.release, [spec], harness.system)
    executor = Executor(store, registry, gateway.auditor, gateway.directory)
    executor.run_read(spec, {"service_alias": "web"}, principal("cust-ada"), dict(FORWARDED))
    return seen[0]


def test_a_tool_that_did_not_declare_a_credential_does_not_see_it(store: Store) -> None:
    ctx = seen_by(store)
    assert ctx.credentials == {} and ctx.service_credential is None and ctx.http is None
    with pytest.raises(CapabilityDenied) as refused:
        ctx.credential("crm_token")
    assert (refused.value.capability, refused.value.target) == ("credential", "crm_token")


def test_a_tool_sees_exactly_the_credentials_it_declared(store: Store) -> None:
    ctx = seen_by(store, forwarded_credentials=frozenset({"crm_token", "erp_token"}))
    assert ctx.credentials == {"crm_token": "crm_secret_value_01"}
    assert ctx.credential("crm_token") == "crm_secret_value_01"
    with pytest.raises(CapabilityDenied):
        ctx.credential("hr_token")  # forwarded by the user, not declared by the tool
    with pytest.raises(ToolExecutionError) as missing:
        ctx.credential("erp_token")  # declared, not forwarded
    assert missing.value.kind == "credential_missing"
    assert "crm_secret_value_01" not in repr(ctx)


def test_a_declared_service_scope_gives_a_short_lived_credential_for_that_audience(store: Store) -> None:
    ctx = seen_by(store, service_credential=ServiceScope("status-api", frozenset({"status:read"})))
    credential = ctx.service_credential
    assert credential is not None and credential.audience == "status-api"
    assert credential.token not in repr(credential) and credential.token not in repr(ctx)
    provider = builtin_provider(store)
    claims = provider.verify(credential.token, "status-api")
    assert claims["scope"] == "status:read" and claims["sub"] == "tool:get_service_status"
    assert credential.expires_at - credential.issued_at <= timedelta(minutes=5)
    with pytest.raises(ToolExecutionError):
        HmacCredentialProvider(b"another-store-secret-0000").verify(credential.token, "status-api")


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def test_service_credentials_refresh_before_expiry_and_rotate_keys() -> None:
    clock = Clock()
    provider = HmacCredentialProvider(b"s" * 32, ttl_s=300, refresh_s=60, clock=clock)
    scope = ServiceScope("inventory", frozenset({"inventory:read"}))
    first = provider.credential_for("t", scope)
    clock.now += timedelta(seconds=200)
    assert provider.credential_for("t", scope) is first  # cached while not near expiry
    assert provider.credential_for("u", scope) is not first  # one credential per tool
    clock.now += timedelta(seconds=50)  # within the refresh margin
    second = provider.credential_for("t", scope)
    assert second.token != first.token and second.expires_at > first.expires_at

    old_key = second.key_id
    new_key = provider.rotate()
    clock.now += timedelta(seconds=100)
    third = provider.credential_for("t", scope)
    assert new_key != old_key and third.key_id == new_key and third.token != second.token
    assert provider.verify(second.token, "inventory")["aud"] == "inventory"  # old key: valid until expiry
    clock.now = second.expires_at
    with pytest.raises(ToolExecutionError, match="expired"):
        provider.verify(second.token, "inventory")
    assert provider.verify(third.token, "inventory")
    with pytest.raises(ToolExecutionError):
        provider.verify(third.token, "payments")  # another downstream's credential
    head, body, signature = third.token.split(".")
    with pytest.raises(ToolExecutionError):
        provider.verify(f"{head}.{body}.{signature[::-1]}", "inventory")
    with pytest.raises(ToolExecutionError):
        provider.verify("not-a-token", "inventory")
    # a key id from the future (a forged header) is refused even with a valid signature under it
    future = HmacCredentialProvider(b"s" * 32, clock=lambda: clock.now + timedelta(days=3))
    with pytest.raises(ToolExecutionError, match="signature"):
        provider.verify(future.credential_for("t", scope).token, "inventory")
    assert "token" not in repr(provider) and third.token not in repr(third)


@pytest.mark.parametrize(
    ("declares", "code"),
    [
        ({"forwarded_credentials": frozenset({"CRM-Token"})}, "invalid_credential_name"),
        ({"service_credential": ServiceScope("bad audience")}, "invalid_credential_name"),
        ({"egress_hosts": frozenset({"https://api.example.com"})}, "invalid_egress_host"),
        ({"egress_hosts": frozenset({"api.example.com/path"})}, "invalid_egress_host"),
        ({"egress_hosts": frozenset({"*.example.com"})}, "invalid_egress_host"),
        ({"egress_hosts": frozenset({"api.example.com:70000"})}, "invalid_egress_host"),
    ],
)
def test_a_malformed_reach_declaration_stops_the_tool_from_loading(
    store: Store, declares: dict[str, Any], code: str
) -> None:
    status = Harness(store).registry.tools["get_service_status"]
    with pytest.raises(RegistryError) as refused:
        replace(status, **declares)
    assert [c for c, _ in refused.value.problems] == [code]  # type: ignore[attr-defined]


def test_the_manifest_pins_what_a_handler_may_hold_and_reach(store: Store) -> None:
    status = Harness(store).registry.tools["get_service_status"]
    plain = tool_fingerprint(status)
    assert "reach" not in plain  # a tool that declares nothing keeps its reviewed manifest
    wider = replace(status, egress_hosts=frozenset({"status.internal:443"}))
    pinned = tool_fingerprint(wider)
    assert pinned["reach"] == {"egress_hosts": ["status.internal:443"]}
    assert pinned["metadata_sha256"] != plain["metadata_sha256"]
    more = tool_fingerprint(replace(wider, forwarded_credentials=frozenset({"crm_token"})))
    assert more["reach"]["forwarded_credentials"] == ["crm_token"]
    assert more["metadata_sha256"] != pinned["metadata_sha256"]
