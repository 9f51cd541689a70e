"""Handler-level tests of the demo inventory, purchasing, reports, filing and CRM tools.

Each test runs against a real store (SQLite always, PostgreSQL when the harness provides one)
and calls the handlers directly with a trusted `HandlerContext`, the way the execute node does.
Success criteria are asserted as counts of rows in the systems of record, never by
reading the code: the status check (no duplicates, no false "failed"), the conflict key (it
prevents the lost update, and removing it reproduces the race), preview tokens (they are
single use, time-boxed and payload-bound) and the CRM (it enforces the user's own access).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import random
import threading
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from toolgate.errors import ToolExecutionError
from toolgate.policy.output import sanitize_result
from toolgate.store import Store
from toolgate.tools import HandlerContext, ResourceRef, ToolSpec, strict_json_schema
from toolgate.tools.audit import audit_specs
from toolgate.tools.demo import DemoSystem, demo_specs
from toolgate.tools.demo import crm as crm_mod
from toolgate.tools.demo import filing as filing_mod
from toolgate.tools.demo import inventory as inventory_mod
from toolgate.tools.demo import purchasing_schema as purchasing_schema_mod
from toolgate.tools.demo import records as records_mod
from toolgate.tools.demo import report_models as report_models_mod
from toolgate.tools.demo import reports as reports_mod
from toolgate.tools.demo.crm import CrmClient, LookupContactArgs, TokenBucket, crm_specs
from toolgate.tools.demo.filing import FilingService, LegacyFilingService, SubmitFilingArgs, filing_specs
from toolgate.tools.demo.inventory import InventoryService, UpdateInventoryArgs, inventory_specs
from toolgate.tools.demo.preview_tokens import preview_id_of
from toolgate.tools.demo.purchasing import PurchasingService, purchasing_specs
from toolgate.tools.demo.purchasing_models import CreatePurchaseOrderArgs, PreviewPurchaseOrderArgs
from toolgate.tools.demo.reports import CheckJobStatusArgs, ReportService, SubmitReportJobArgs, report_specs
from toolgate.tools.demo.service import DemoService

SIGNING_KEY = b"test-signing-key-0123456789abcdef"


class FakeClock:
    """A settable UTC clock for services that take ``now``."""

    def __init__(self) -> None:
        self.t = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += timedelta(seconds=seconds)


@dataclasses.dataclass
class World:
    store: Store
    clock: FakeClock
    inventory: InventoryService
    purchasing: PurchasingService
    reports: ReportService
    filing: FilingService
    crm: CrmClient

    def specs(self) -> dict[str, ToolSpec]:
        return {
            s.name: s
            for s in [
                *inventory_specs(self.inventory),
                *purchasing_specs(self.purchasing),
                *report_specs(self.reports),
                *filing_specs(self.filing),
                *crm_specs(self.crm),
            ]
        }

    def services(self) -> tuple[DemoService, ...]:
        return (self.inventory, self.purchasing, self.reports, self.filing, self.crm)

    def call(self, tool: str, args: dict[str, Any], ctx: HandlerContext) -> Any:
        """Validate like dispatch (a JSON-shaped dict), then run the handler like execute."""
        spec = self.specs()[tool]
        return spec.handler(spec.args_model.model_validate(args), ctx)

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        with self.store.transaction(write=False) as tx:
            return tx.execute(sql, params)


def build_world(store: Store) -> World:
    DemoSystem(store).setup(store)
    clock = FakeClock()
    world = World(
        store=store,
        clock=clock,
        inventory=InventoryService(store),
        purchasing=PurchasingService(store, signing_key=SIGNING_KEY, now=clock),
        reports=ReportService(store, now=clock),
        filing=FilingService(store, backoff_s=(0.001,) * 5),
        crm=CrmClient(store),
    )
    for service in world.services():
        service.setup(store)
    return world


@pytest.fixture
def world(store: Store) -> World:
    return build_world(store)


def ctx(tenant: str = "acme", key: str | None = None, **extra: Any) -> HandlerContext:
    return HandlerContext(tenant_id=tenant, user_id=f"u-{tenant}", idempotency_key=key, **extra)


# ---- the specs ------------------------------------------------------------------------

IDENTITY_WORDS = (
    "tenant",
    "user",
    "owner",
    "role",
    "approver",
    "approved",
    "admin",
    "permission",
    "account",
    "principal",
)
FREE_FORM_WORDS = ("command", "sql", "url", "path", "code", "template", "query", "script")


def _field_names(model: type[BaseModel]) -> Iterator[str]:
    for name, info in model.model_fields.items():
        yield name
        for arg in getattr(info.annotation, "__args__", ()) or ():
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                yield from _field_names(arg)


def _string_leaves(schema: dict[str, Any], defs: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, prop in schema.get("properties", {}).items():
        prop = defs.get(prop.get("$ref", "").rsplit("/", 1)[-1], prop)
        if prop.get("type") == "string":
            yield name, prop
        elif prop.get("type") == "array":
            item = prop["items"]
            yield from _string_leaves(defs.get(item.get("$ref", "").rsplit("/", 1)[-1], item), defs)


def test_every_spec_is_complete_and_consistent(world: World) -> None:
    specs = world.specs()
    assert set(specs) == {
        "get_inventory",
        "update_inventory",
        "preview_purchase_order",
        "create_purchase_order",
        "submit_report_job",
        "check_job_status",
        "submit_filing",
        "crm_lookup_contact",
    }
    assert not set(specs) & {s.name for s in demo_specs(DemoSystem(world.store))}
    every_name = set(specs) | {s.name for s in demo_specs(DemoSystem(world.store))}
    expected_writes = {
        "update_inventory": ("caution", "warehouse", "inventory:write"),
        "create_purchase_order": ("danger", "purchasing_manager", "purchasing:write"),
        "submit_report_job": ("caution", "analyst", "reports:write"),
        "submit_filing": ("danger", "tax_preparer", "filings:write"),
    }
    resolvers: dict[str, Any] = {
        "inventory": world.inventory,
        "purchasing": world.purchasing,
        "reports": world.reports,
        "filing": world.filing,
        "crm": world.crm,
    }
    for name, spec in specs.items():
        assert spec.handler_revision.startswith(name.replace("_", "-") + "/1.")
        assert spec.timeout_s > 0 and spec.max_output_bytes > 0 and spec.rollback_text().strip()
        # the description names its nearest confusable neighbour
        assert any(other in spec.description for other in every_name - {name}), name
        if name in expected_writes:
            risk, role, scope = expected_writes[name]
            assert (spec.risk, spec.approval.kind, spec.approval.roles) == (risk, "role", frozenset({role}))
            assert spec.required_scopes == frozenset({scope})
        else:
            assert spec.risk == "read-only" and spec.approval.kind == "none"
        if spec.resource is not None:
            assert any(spec.resource.kind in r.resource_kinds for r in resolvers.values()), name
    assert specs["update_inventory"].resource == ResourceRef(kind="sku", argument="sku", conflict=True)
    assert specs["get_inventory"].resource == ResourceRef(kind="sku", argument="sku", conflict=False)
    assert "poll every 10-15 seconds, no more often" in specs["check_job_status"].description.lower()
    for service in resolvers.values():
        assert service.resource_status("no-such-kind", "x", "acme") == "missing"


def test_the_registry_audit_passes(world: World) -> None:
    report = audit_specs("demo-extra/1.0.0", lambda: list(world.specs().values()))
    assert report.passed, report.defects
    assert (report.identity_fields_in_schemas, report.generic_executors, report.dynamic_handlers) == (0, 0, 0)


def test_argument_models_are_closed_strict_and_free_of_identity(world: World) -> None:
    for spec in world.specs().values():
        config = spec.args_model.model_config
        assert (config.get("extra"), config.get("strict"), config.get("frozen")) == ("forbid", True, True)
        for field_name in _field_names(spec.args_model):
            lowered = field_name.lower()
            assert not any(word in lowered for word in IDENTITY_WORDS), (spec.name, field_name)
            assert not any(word in lowered.split("_") for word in FREE_FORM_WORDS), (spec.name, field_name)
        assert strict_json_schema(spec.args_model)["additionalProperties"] is False  # exports strict
        schema = spec.args_model.model_json_schema()
        for field_name, prop in _string_leaves(schema, schema.get("$defs", {})):
            assert {"pattern", "enum", "format"} & set(prop), f"{spec.name}.{field_name} is a free string"
        with pytest.raises(ValidationError):
            spec.args_model.model_validate({"tenant_id": "globex"})


SEEDED = {
    "sor_tenants": 2,
    "sor_customers": 3,
    "sor_orders": 5,
    "sor_services": 4,
    "sor_inventory": 3,
    "sor_vendors": 3,
    "sor_taxpayers": 11,
    "sor_crm_contacts": 4,
    "sor_crm_tokens": 1,
    "sor_report_jobs": 1,
}
"""Demo rows per seeded table, as every service's ``setup`` leaves them."""


def _seeded(world: World) -> dict[str, int]:
    return {table: world.rows(f"SELECT COUNT(*) AS n FROM {table}")[0]["n"] for table in SEEDED}


def test_migrations_are_portable_and_setup_is_idempotent(world: World) -> None:
    for module in (records_mod, inventory_mod, purchasing_schema_mod, reports_mod, filing_mod, crm_mod):
        for migration in module.MIGRATIONS:
            assert migration.sqlite == migration.postgres
            assert "AUTOINCREMENT" not in migration.sqlite.upper()
            tables = [
                line.split()[2] for line in migration.sqlite.splitlines() if line.startswith("CREATE TABLE")
            ]
            assert tables and all(t.startswith("sor_") for t in tables)
    assert _seeded(world) == SEEDED
    assert world.rows("SELECT DISTINCT state FROM sor_services") == [{"state": "active"}]
    for service in (DemoSystem(world.store), *world.services()):
        service.setup(world.store)
    assert _seeded(world) == SEEDED


def test_every_service_counts_only_its_evidence_and_resolves_only_its_own_kinds(world: World) -> None:
    """What the services share (`DemoService`): ``count`` reads an allow-list of tables with
    identifier columns, each resource kind has exactly one resolving service, and a service alias
    is looked up inside the caller's tenant, so another tenant's alias is missing, not foreign."""
    system = DemoSystem(world.store)
    services = (system, *world.services())
    for service in services:
        assert service.countable and not service.countable & (set(SEEDED) - {"sor_orders", "sor_report_jobs"})
        with pytest.raises(ValueError, match="not a countable table"):
            service.count("sor_tenants")
        with pytest.raises(ValueError, match="identifiers"):
            service.count(min(service.countable), **{"tenant_id = tenant_id OR 1": 1})
    kinds = [kind for service in services for kind in service.resource_kinds]
    assert sorted(kinds) == ["contact", "job", "order", "preview", "service", "sku", "taxpayer", "vendor"]
    assert system.count("sor_orders", tenant_id="acme") == 4
    assert system.resource_status("order", "O-7001", "acme") == "foreign"
    assert system.resource_status("order", "O-4040", "acme") == "missing"
    assert system.resource_status("service", "web", "globex") == "owned"
    assert system.resource_status("service", "worker", "globex") == "missing"
    assert system.resource_status("service", "worker", "acme") == "owned"


def test_status_checks_find_effects_by_key_and_semantic_checks_refuse_early(world: World) -> None:
    """``reconcile`` is what recovery runs for an unknown outcome; ``semantic_check`` runs at dispatch."""
    specs = world.specs()
    inv = specs["update_inventory"]
    inv_args = UpdateInventoryArgs(sku="SKU-7", delta=-3, reason="shipped")
    assert inv.semantic_check is not None and inv.reconcile is not None
    assert inv.semantic_check(inv_args, ctx()) is None
    assert "at least -10" in (
        inv.semantic_check(UpdateInventoryArgs(sku="SKU-7", delta=-11, reason="shipped"), ctx()) or ""
    )
    assert inv.reconcile(inv_args, ctx(key="idem_inv")) is None
    done = inv.handler(inv_args, ctx(key="idem_inv"))
    assert inv.reconcile(inv_args, ctx(key="idem_inv")) == done
    assert inv.reconcile(inv_args, ctx("globex", key="idem_inv")) is None

    po = specs["create_purchase_order"]
    assert po.semantic_check is not None and po.reconcile is not None and po.retry_safe_when_absent
    po_args = CreatePurchaseOrderArgs(preview_token=_preview(world).preview_token)
    assert po.semantic_check(po_args, ctx()) is None
    assert po.reconcile(po_args, ctx(key="idem_po")) is None
    order = po.handler(po_args, ctx(key="idem_po"))
    assert po.reconcile(po_args, ctx(key="idem_po")) == order
    assert "already used" in (po.semantic_check(po_args, ctx()) or "")
    late = CreatePurchaseOrderArgs(preview_token=_preview(world).preview_token)
    world.clock.advance(601)
    assert "expired" in (po.semantic_check(late, ctx()) or "")

    job = specs["submit_report_job"]
    assert job.reconcile is not None
    job_args = SubmitReportJobArgs.model_validate(REPORT_ARGS)
    assert job.reconcile(job_args, ctx(key="idem_job")) is None
    assert job.reconcile(job_args, ctx(key="idem_job")) is None
    submitted = job.handler(job_args, ctx(key="idem_job"))
    assert job.reconcile(job_args, ctx(key="idem_job")) == submitted

    filing = specs["submit_filing"]
    assert filing.reconcile is not None and filing.retry_safe_when_absent is False
    filing_args = SubmitFilingArgs(taxpayer_ref="TP-1003", tax_year=2024, filing_type="payroll_annual")
    assert filing.reconcile(filing_args, ctx(key="idem_fil")) is None
    filed = filing.handler(filing_args, ctx(key="idem_fil"))
    found = filing.reconcile(filing_args, ctx(key="idem_other"))  # natural key, not the idempotency key
    assert (
        found is not None
        and found.model_dump()["confirmation_number"] == filed.model_dump()["confirmation_number"]
    )


# ---- inventory (conflict key, lost update) --------------------------------------------


def run_batch(calls: list[tuple[ToolSpec, dict[str, Any], HandlerContext]]) -> list[BaseModel]:
    """A tiny batch executor: calls sharing a declared conflict key run in one lane, in order;
    lanes run concurrently (released together by a barrier)."""
    lanes: dict[tuple[str, str], list[tuple[ToolSpec, dict[str, Any], HandlerContext]]] = {}
    for index, (spec, args, call_ctx) in enumerate(calls):
        if spec.resource is not None and spec.resource.conflict:
            key = (spec.resource.kind, str(args[spec.resource.argument]))
        else:
            key = ("independent", str(index))
        lanes.setdefault(key, []).append((spec, args, call_ctx))
    barrier = threading.Barrier(len(lanes))
    results: list[BaseModel] = []
    errors: list[BaseException] = []

    def run_lane(lane: list[tuple[ToolSpec, dict[str, Any], HandlerContext]]) -> None:
        barrier.wait()
        for spec, args, call_ctx in lane:
            try:
                results.append(spec.handler(spec.args_model.model_validate(args), call_ctx))
            except BaseException as exc:  # surfaced below, never lost in a thread
                errors.append(exc)

    threads = [threading.Thread(target=run_lane, args=(lane,)) for lane in lanes.values()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors, errors
    return results


WINDOW_TIMEOUT_S = 30.0
"""Bounds every rendezvous below. Reaching it fails the test (a hang guard); no test passes by it."""


class ReadWriteWindow:
    """Forces (or records) the interleaving of inventory adjustments with events, never with time.

    `InventoryService.adjust` reads ``on_hand``, calls ``time.sleep(latency_s)`` and only then
    writes ``read + delta``. `install` puts this object in place of that module's ``time`` (with a
    nonzero latency so the call happens), so that sleep becomes `sleep` below: it logs ``read`` and,
    with ``meet=2``, waits at a barrier until both adjustments have read, so neither writes before
    the other has read. `wrap` makes a handler log ``start`` and ``end``; ordering is asserted on
    `events` (``(event, delta)`` in the order they happened), not on elapsed time.
    """

    def __init__(self, *, meet: int = 1) -> None:
        self.events: list[tuple[str, int]] = []
        self._lock = threading.Lock()
        self._local = threading.local()
        self._barrier = threading.Barrier(meet, timeout=WINDOW_TIMEOUT_S) if meet > 1 else None

    def install(self, monkeypatch: pytest.MonkeyPatch, service: InventoryService) -> None:
        monkeypatch.setattr(inventory_mod, "time", self)
        monkeypatch.setattr(service, "latency_s", 1.0)  # any value > 0: adjust() then calls self.sleep

    def _log(self, event: str, delta: int) -> None:
        with self._lock:
            self.events.append((event, delta))

    def sleep(self, _seconds: float) -> None:
        """The window between the service's read and its write."""
        self._log("read", self._local.delta)
        if self._barrier is not None:
            self._barrier.wait()  # BrokenBarrierError (the call fails) unless both calls get here

    def wrap(self, spec: ToolSpec) -> ToolSpec:
        """``spec`` whose handler logs its start and end (keyed by its delta)."""
        inner = spec.handler

        def handler(args: Any, call_ctx: HandlerContext) -> Any:
            self._local.delta = args.delta
            self._log("start", args.delta)
            result = inner(args, call_ctx)
            self._log("end", args.delta)
            return result

        return dataclasses.replace(spec, handler=handler)


SERIALIZED_EVENTS = [("start", -2), ("read", -2), ("end", -2), ("start", -3), ("read", -3), ("end", -3)]
"""The -3 adjustment starts only after the -2 one ended (the lane order)."""


def assert_both_read_before_either_wrote(events: list[tuple[str, int]]) -> None:
    """The forced interleaving really happened: two starts and two reads, then the two ends."""
    assert sorted(events[:4]) == [("read", -3), ("read", -2), ("start", -3), ("start", -2)]
    assert sorted(events[4:]) == [("end", -3), ("end", -2)]


def _two_same_sku_updates(spec: ToolSpec) -> list[tuple[ToolSpec, dict[str, Any], HandlerContext]]:
    return [
        (spec, {"sku": "SKU-7", "delta": -2, "reason": "shipped"}, ctx(key="idem_bin_a")),
        (spec, {"sku": "SKU-7", "delta": -3, "reason": "shipped"}, ctx(key="idem_bin_b")),
    ]


def _read_before_each_adjustment(world: World) -> dict[int, int]:
    rows = world.rows("SELECT delta, on_hand_before FROM sor_inventory_adjustments WHERE sku = 'SKU-7'")
    return {int(r["delta"]): int(r["on_hand_before"]) for r in rows}


def test_conflict_key_serializes_same_sku_updates(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    window = ReadWriteWindow()
    window.install(monkeypatch, world.inventory)
    spec = window.wrap(world.specs()["update_inventory"])
    results = run_batch(_two_same_sku_updates(spec))
    assert len(results) == 2
    assert window.events == SERIALIZED_EVENTS  # the second call started after the first ended
    assert _read_before_each_adjustment(world) == {-2: 10, -3: 8}  # ... and read its write
    assert world.inventory.on_hand("acme", "SKU-7") == 5  # 10 - 2 - 3


def test_removing_the_conflict_key_reproduces_the_lost_update(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    window = ReadWriteWindow(meet=2)  # both calls read, then both write: the race, forced
    window.install(monkeypatch, world.inventory)
    unprotected = dataclasses.replace(
        world.specs()["update_inventory"], resource=ResourceRef(kind="sku", argument="sku", conflict=False)
    )
    results = run_batch(_two_same_sku_updates(window.wrap(unprotected)))
    assert len(results) == 2  # both adjustments "succeeded" ...
    assert_both_read_before_either_wrote(window.events)
    assert world.inventory.count("sor_inventory_adjustments", tenant_id="acme") == 2
    # ... but both read 10 and wrote their own result: one change is lost
    assert _read_before_each_adjustment(world) == {-2: 10, -3: 10}
    assert world.inventory.on_hand("acme", "SKU-7") in (7, 8)


def test_inventory_replay_of_a_key_adjusts_once(world: World) -> None:
    args = {"sku": "SKU-7", "delta": 4, "reason": "received"}
    first = world.call("update_inventory", args, ctx(key="idem_same"))
    second = world.call("update_inventory", args, ctx(key="idem_same"))
    assert first == second
    assert world.inventory.on_hand("acme", "SKU-7") == 14
    assert world.inventory.count("sor_inventory_requests", idempotency_key="idem_same") == 2
    assert world.inventory.count("sor_inventory_adjustments", idempotency_key="idem_same") == 1
    assert world.call("get_inventory", {"sku": "SKU-7"}, ctx()).model_dump() == {
        "sku": "SKU-7",
        "on_hand": 14,
    }


def test_inventory_refusals(world: World) -> None:
    with pytest.raises(ToolExecutionError) as below:
        world.call("update_inventory", {"sku": "SKU-7", "delta": -11, "reason": "shipped"}, ctx(key="k1"))
    assert below.value.kind == "caller_error" and "below zero" in below.value.message
    with pytest.raises(ToolExecutionError) as no_key:
        world.call("update_inventory", {"sku": "SKU-7", "delta": 1, "reason": "received"}, ctx())
    assert no_key.value.kind == "server_error"
    with pytest.raises(ToolExecutionError) as foreign:  # globex's SKU, asked for by acme
        world.call("update_inventory", {"sku": "SKU-9", "delta": 1, "reason": "received"}, ctx(key="k2"))
    assert foreign.value.kind == "caller_error"
    assert world.inventory.on_hand("globex", "SKU-9") == 25
    for bad in ({"delta": 0}, {"delta": 501}, {"delta": "3"}, {"reason": "because"}, {"sku": "7"}):
        with pytest.raises(ValidationError):
            UpdateInventoryArgs.model_validate({"sku": "SKU-7", "delta": 1, "reason": "received", **bad})
    assert world.inventory.resource_status("sku", "SKU-7", "acme") == "owned"
    assert world.inventory.resource_status("sku", "SKU-9", "acme") == "foreign"
    assert world.inventory.resource_status("sku", "SKU-404", "acme") == "missing"


# ---- purchasing (preview / confirm token) ---------------------------------------------

PO_ARGS = {
    "vendor_id": "V-100",
    "line_items": [
        {"sku": "SKU-7", "quantity": 2, "unit_price_cents": 1999},
        {"sku": "SKU-8", "quantity": 1, "unit_price_cents": 500},
    ],
    "currency": "USD",
}


def _preview(world: World, tenant: str = "acme", args: dict[str, Any] | None = None) -> Any:
    return world.call("preview_purchase_order", args or PO_ARGS, ctx(tenant))


def test_preview_computes_totals_without_creating_anything(world: World) -> None:
    preview = _preview(world)
    assert (preview.subtotal_cents, preview.tax_cents, preview.total_cents) == (4498, 371, 4869)
    assert preview.preview_token.startswith("pvt_")
    CreatePurchaseOrderArgs.model_validate({"preview_token": preview.preview_token})
    assert world.purchasing.count("sor_purchase_orders") == 0
    half_cent = _preview(
        world, args={**PO_ARGS, "line_items": [{"sku": "SKU-7", "quantity": 1, "unit_price_cents": 200}]}
    )
    assert half_cent.tax_cents == 17  # 16.5 cents rounds half up
    with pytest.raises(ToolExecutionError, match="no vendor V-200"):
        _preview(world, args={**PO_ARGS, "vendor_id": "V-200"})
    assert world.purchasing.resource_status("vendor", "V-200", "acme") == "foreign"
    assert world.purchasing.resource_status("preview", preview.preview_token, "acme") == "owned"
    assert world.purchasing.resource_status("preview", preview.preview_token, "globex") == "foreign"
    assert world.purchasing.resource_status("preview", "pvt_nonsense", "acme") == "missing"
    bad: dict[str, Any]
    for bad in (
        {"line_items": []},
        {"currency": "JPY"},
        {"line_items": [{"sku": "SKU-7", "quantity": 0, "unit_price_cents": 1}]},
    ):
        with pytest.raises(ValidationError):
            PreviewPurchaseOrderArgs.model_validate({**PO_ARGS, **bad})


def test_token_used_once_then_replay_refused_without_a_second_order(world: World) -> None:
    preview = _preview(world)
    args = {"preview_token": preview.preview_token}
    # what the reviewer sees before approving: the exact amounts behind the token, unconsumed
    shown = world.purchasing.preview_summary("acme", preview.preview_token)
    assert (shown["total_cents"], shown["used"], shown["expired"]) == (preview.total_cents, False, False)
    with pytest.raises(ToolExecutionError):
        world.purchasing.preview_summary("globex", preview.preview_token)
    order = world.call("create_purchase_order", args, ctx(key="idem_po_1"))
    assert (order.total_cents, order.tax_cents, order.status) == (
        preview.total_cents,
        preview.tax_cents,
        "created",
    )
    # the same operation redelivered gets its order back, not a second one
    assert world.call("create_purchase_order", args, ctx(key="idem_po_1")) == order
    # any other use of the token is refused by the single-use consumption, never re-executed
    with pytest.raises(ToolExecutionError) as replay:
        world.call("create_purchase_order", args, ctx(key="idem_po_2"))
    assert replay.value.kind == "caller_error" and "already used" in replay.value.message
    assert world.purchasing.count("sor_purchase_orders") == 1
    assert world.purchasing.count("sor_po_requests") == 3
    assert world.purchasing.preview_summary("acme", preview.preview_token)["used"] is True


def test_expired_token_is_refused_with_a_clear_reason(world: World) -> None:
    preview = _preview(world)
    world.clock.advance(601)
    with pytest.raises(ToolExecutionError) as expired:
        world.call("create_purchase_order", {"preview_token": preview.preview_token}, ctx(key="idem_late"))
    assert expired.value.kind == "caller_error" and "expired" in expired.value.message
    assert world.purchasing.count("sor_purchase_orders") == 0


def test_tampered_stored_payload_is_refused(world: World) -> None:
    preview = _preview(world)
    preview_id = preview_id_of(preview.preview_token)
    stored = json.loads(
        world.rows("SELECT payload FROM sor_po_previews WHERE preview_id = ?", (preview_id,))[0]["payload"]
    )
    stored["total_cents"] = 1  # someone with database access lowers the approved amount
    with world.store.transaction() as tx:
        tx.execute(
            "UPDATE sor_po_previews SET payload = ? WHERE preview_id = ?", (json.dumps(stored), preview_id)
        )
    with pytest.raises(ToolExecutionError, match="signature"):
        world.call("create_purchase_order", {"preview_token": preview.preview_token}, ctx(key="idem_tamper"))
    assert world.purchasing.count("sor_purchase_orders") == 0


def test_forged_signature_and_foreign_key_are_refused(world: World) -> None:
    preview = _preview(world)
    token_id = preview.preview_token.split(".")[0]
    forged_mac = base64.urlsafe_b64encode(b"\x00" * 32).rstrip(b"=").decode()
    with pytest.raises(ToolExecutionError, match="signature"):
        world.call(
            "create_purchase_order", {"preview_token": f"{token_id}.{forged_mac}"}, ctx(key="idem_forged")
        )
    other_key = PurchasingService(world.store, signing_key=b"another-key-0123456789abcdef", now=world.clock)
    with pytest.raises(ToolExecutionError, match="signature"):
        other_key.create("acme", preview.preview_token, "idem_other_key")
    assert world.purchasing.count("sor_purchase_orders") == 0


def test_token_of_another_tenant_is_refused(world: World) -> None:
    preview = _preview(world)
    with pytest.raises(ToolExecutionError) as foreign:
        world.call(
            "create_purchase_order", {"preview_token": preview.preview_token}, ctx("globex", key="idem_x")
        )
    assert foreign.value.kind == "caller_error"
    assert world.purchasing.count("sor_purchase_orders") == 0
    # and the token is still good for its own tenant
    world.call("create_purchase_order", {"preview_token": preview.preview_token}, ctx(key="idem_own"))
    assert world.purchasing.count("sor_purchase_orders", tenant_id="acme") == 1


def test_concurrent_creates_from_one_token_make_one_order(world: World) -> None:
    preview = _preview(world)
    outcomes: list[str] = []
    barrier = threading.Barrier(4)

    def create(n: int) -> None:
        barrier.wait()
        try:
            world.purchasing.create("acme", preview.preview_token, f"idem_race_{n}")
            outcomes.append("created")
        except ToolExecutionError as exc:
            outcomes.append("refused" if "already used" in exc.message else exc.message)

    threads = [threading.Thread(target=create, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(outcomes) == ["created", "refused", "refused", "refused"]
    assert world.purchasing.count("sor_purchase_orders") == 1


# ---- reports (submit / poll) --------------------------------------------------------------

REPORT_ARGS = {"report_type": "sales_summary", "date_from": "2025-01-01", "date_to": "2025-01-31"}


def test_report_job_submit_running_complete_with_a_controlled_clock(world: World) -> None:
    submitted = world.call("submit_report_job", REPORT_ARGS, ctx(key="idem_rep"))
    assert submitted.status == "submitted" and submitted.estimated_seconds == 120
    assert 10 <= submitted.poll_after_seconds <= 15
    job = {"job_id": submitted.job_id}
    running = world.call("check_job_status", job, ctx())
    assert running.status == "running" and running.summary is None and running.poll_after_seconds == 15
    world.clock.advance(115)
    almost = world.call("check_job_status", job, ctx())
    assert almost.status == "running" and almost.poll_after_seconds == 10  # never more often than 10 s
    world.clock.advance(5)
    done = world.call("check_job_status", job, ctx())
    assert done.status == "complete" and done.poll_after_seconds is None
    assert done.summary is not None
    acme = world.rows(
        "SELECT COUNT(*) AS n, SUM(amount_cents) AS total FROM sor_orders WHERE tenant_id = 'acme'"
    )[0]
    assert acme["n"] >= 2  # the demo's acme orders, and none of globex's
    assert (done.summary.row_count, done.summary.total_amount_cents) == (acme["n"], acme["total"])
    assert (done.summary.date_from, done.summary.date_to) == ("2025-01-01", "2025-01-31")
    assert set(sanitize_result(done, report_models_mod.JobStatusResult)["summary"]) == set(
        report_models_mod.ReportSummary.model_fields
    )


def test_report_job_dedupes_on_the_key_and_stays_with_its_tenant(world: World) -> None:
    first = world.call("submit_report_job", REPORT_ARGS, ctx(key="idem_rep"))
    again = world.call("submit_report_job", REPORT_ARGS, ctx(key="idem_rep"))
    assert first.job_id == again.job_id
    assert world.reports.count("sor_report_jobs", idempotency_key="idem_rep") == 1
    assert world.reports.count("sor_report_requests") == 2
    assert world.reports.resource_status("job", first.job_id, "globex") == "foreign"
    with pytest.raises(ToolExecutionError, match="no job"):
        world.call("check_job_status", {"job_id": first.job_id}, ctx("globex"))
    with pytest.raises(ValidationError):
        CheckJobStatusArgs.model_validate({"job_id": "job_1"})


def test_report_dates_are_calendar_dates_in_order(world: World) -> None:
    with pytest.raises(ValidationError, match="on or before"):
        SubmitReportJobArgs.model_validate({**REPORT_ARGS, "date_from": "2025-02-01"})
    for bad in ({"date_from": 1735689600}, {"date_to": "2025-01-31T00:00:00"}, {"date_to": "2027-01-01"}):
        with pytest.raises(ValidationError):
            SubmitReportJobArgs.model_validate({**REPORT_ARGS, **bad})
    reversed_range = SubmitReportJobArgs.model_construct(
        report_type="sales_summary", date_from=date(2025, 2, 1), date_to=date(2025, 1, 1)
    )
    spec = world.specs()["submit_report_job"]
    with pytest.raises(ToolExecutionError) as refused:  # the handler re-checks its own rule
        spec.handler(reversed_range, ctx(key="idem_rev"))
    assert refused.value.kind == "caller_error"
    args = SubmitReportJobArgs.model_validate(REPORT_ARGS)
    assert args.model_dump(mode="json") == REPORT_ARGS  # canonical form round-trips as text


# ---- filing (status check on a legacy system) ---------------------------------------------

COMBOS = [
    (f"TP-{1001 + n % 10}", 2019 + n // 10, ("income_tax_return", "vat_return")[n % 2]) for n in range(50)
]


def _duplicates(world: World) -> list[dict[str, Any]]:
    return world.rows(
        "SELECT taxpayer_ref, tax_year, filing_type, COUNT(*) AS n FROM sor_filings"
        " GROUP BY taxpayer_ref, tax_year, filing_type HAVING COUNT(*) > 1"
    )


def _filing(world: World, taxpayer: str, year: int, kind: str) -> list[dict[str, Any]]:
    return world.rows(
        "SELECT * FROM sor_filings WHERE taxpayer_ref = ? AND tax_year = ? AND filing_type = ?",
        (taxpayer, year, kind),
    )


def test_lab4_status_check_makes_no_duplicates_and_no_false_failures(world: World) -> None:
    legacy = LegacyFilingService(
        world.store, drop_response_rate=0.3, drop_request_rate=0.1, rng=random.Random(7)
    )
    world.filing = FilingService(world.store, legacy=legacy, backoff_s=(0.001,) * 5)
    log: list[tuple[str, str]] = []
    for n, (taxpayer, year, kind) in enumerate(COMBOS):
        args = {"taxpayer_ref": taxpayer, "tax_year": year, "filing_type": kind}
        try:
            result = world.call("submit_filing", args, ctx(key=f"idem_filing_{n}"))
        except ToolExecutionError as exc:
            # an unknown outcome is reported as unresolved, never as a failure, never retried
            assert (exc.kind, exc.retryable) == ("timeout", False) and exc.message.startswith("unresolved")
            assert "failed" not in exc.message
            log.append(("unresolved", taxpayer))
            assert _filing(world, taxpayer, year, kind) == []  # the request really never arrived
            continue
        stored = _filing(world, taxpayer, year, kind)
        assert [row["confirmation_number"] for row in stored] == [result.confirmation_number]
        log.append((result.note, taxpayer))
    outcomes = Counter(note for note, _ in log)
    # the seeded rng exercises every branch: clean submits, lost replies confirmed, lost requests
    assert outcomes["submitted"] and outcomes["confirmed via status check"] and outcomes["unresolved"], (
        outcomes
    )
    assert sum(outcomes.values()) == 50
    assert _duplicates(world) == []
    per_key = world.rows(
        "SELECT COUNT(*) AS n FROM sor_filing_requests GROUP BY taxpayer_ref, tax_year, filing_type"
    )
    assert {row["n"] for row in per_key} == {1}  # each natural key was submitted exactly once

    # a second round (new operations) never files what already exists
    legacy.drop_response_rate = legacy.drop_request_rate = 0.0
    for n, (taxpayer, year, kind) in enumerate(COMBOS):
        args = {"taxpayer_ref": taxpayer, "tax_year": year, "filing_type": kind}
        result = world.call("submit_filing", args, ctx(key=f"idem_filing_round2_{n}"))
        if log[n][0] != "unresolved":
            assert result.note == "already existed; not resubmitted"
    assert _duplicates(world) == []
    assert world.filing.count("sor_filings") == 50


def test_negative_control_blind_retry_creates_duplicates(world: World) -> None:
    legacy = LegacyFilingService(world.store, drop_response_rate=0.3, rng=random.Random(7))

    def naive_submit(taxpayer: str, year: int, kind: str, attempts: int = 3) -> dict[str, Any] | None:
        for _ in range(attempts):
            try:
                return legacy.submit("acme", taxpayer, year, kind)
            except TimeoutError:
                continue  # "it failed, try again"
        return None

    for taxpayer, year, kind in COMBOS:
        naive_submit(taxpayer, year, kind)
    assert len(_duplicates(world)) > 0


def test_unresolved_when_status_is_down_then_recovered_by_status_check(world: World) -> None:
    legacy = LegacyFilingService(world.store, drop_response_rate=1.0)
    sleeps: list[float] = []

    def sleep(delay: float) -> None:
        sleeps.append(delay)
        legacy.status_available = False  # the status endpoint goes down after the submit

    service = FilingService(world.store, legacy=legacy, backoff_s=(0.001,) * 5, sleep=sleep)
    args = SubmitFilingArgs(taxpayer_ref="TP-1001", tax_year=2024, filing_type="vat_return")
    with pytest.raises(ToolExecutionError) as unresolved:
        service.submit_with_status_check(args, ctx(key="idem_down"))
    assert unresolved.value.kind == "timeout" and unresolved.value.message.startswith("unresolved")
    assert sleeps == [0.001] * 5
    assert len(_filing(world, "TP-1001", 2024, "vat_return")) == 1  # it did go through
    assert world.filing.count("sor_filing_requests") == 1  # never resubmitted

    legacy.status_available = True
    found = service.filing_status(args, ctx())  # what the recovery worker does
    assert found is not None and found.note == "found by status check"
    again = service.submit_with_status_check(args, ctx(key="idem_down_2"))
    assert again.note == "already existed; not resubmitted"
    assert again.confirmation_number == found.confirmation_number
    assert world.filing.count("sor_filing_requests") == 1


def test_filing_refusals(world: World) -> None:
    args = {"taxpayer_ref": "TP-2001", "tax_year": 2024, "filing_type": "vat_return"}
    with pytest.raises(ToolExecutionError) as foreign:
        world.call("submit_filing", args, ctx(key="idem_f"))
    assert foreign.value.kind == "caller_error"
    with pytest.raises(ToolExecutionError) as no_key:
        world.call("submit_filing", {**args, "taxpayer_ref": "TP-1001"}, ctx())
    assert no_key.value.kind == "server_error"
    assert world.filing.count("sor_filing_requests") == 0
    assert world.filing.resource_status("taxpayer", "TP-2001", "acme") == "foreign"
    assert world.filing.resource_status("taxpayer", "TP-1001", "acme") == "owned"
    deadline_passed = ctx(key="idem_deadline", deadline=datetime.now(UTC))
    world.filing.downstream.drop_response_rate = 1.0
    with pytest.raises(ToolExecutionError, match=r"unresolved: .* 0 status check"):
        world.call("submit_filing", {**args, "taxpayer_ref": "TP-1002"}, deadline_passed)


# ---- CRM (the user's own token) and outbound rate limiting ------------------------------


def test_crm_forwards_the_users_own_token_and_the_crm_enforces_regions(world: World) -> None:
    emea = world.crm.issue_token("acme", "u-ada", ["emea"])
    seen = world.call("crm_lookup_contact", {"contact_id": "C-100"}, ctx(credentials={"crm_token": emea}))
    assert seen.model_dump() == {
        "contact_id": "C-100",
        "name": "Ada Byron",
        "email": "ada.byron@example.com",
        "region": "emea",
    }
    injected = world.call("crm_lookup_contact", {"contact_id": "C-102"}, ctx(credentials={"crm_token": emea}))
    shown = sanitize_result(injected, crm_mod.LookupContactResult)
    assert "phone" not in shown and "notes" not in shown
    assert crm_mod.INJECTION_NOTE not in json.dumps(shown)
    with pytest.raises(ToolExecutionError) as hidden:
        world.call("crm_lookup_contact", {"contact_id": "C-101"}, ctx(credentials={"crm_token": emea}))
    assert hidden.value.kind == "caller_error" and "not visible to you" in hidden.value.message
    outcomes = [r["outcome"] for r in world.rows("SELECT outcome FROM sor_crm_requests ORDER BY received_at")]
    assert sorted(outcomes) == ["forbidden", "ok", "ok"]
    # the token is stored only as its hash
    assert emea not in json.dumps(world.rows("SELECT * FROM sor_crm_tokens"))


def test_crm_refuses_missing_invalid_and_foreign_sessions(world: World) -> None:
    with pytest.raises(ToolExecutionError) as missing:
        world.call("crm_lookup_contact", {"contact_id": "C-100"}, ctx())
    assert missing.value.kind == "caller_error" and "no CRM session" in missing.value.message
    assert world.crm.count("sor_crm_requests") == 0  # nothing was sent
    with pytest.raises(ToolExecutionError, match="did not accept"):
        world.call(
            "crm_lookup_contact", {"contact_id": "C-100"}, ctx(credentials={"crm_token": "crm_made_up"})
        )
    globex = world.crm.issue_token("globex", "u-gina", ["emea", "amer"])
    with pytest.raises(ToolExecutionError, match="did not accept"):
        world.call("crm_lookup_contact", {"contact_id": "C-100"}, ctx(credentials={"crm_token": globex}))
    assert world.crm.resource_status("contact", "C-200", "acme") == "foreign"
    with pytest.raises(ValidationError):
        LookupContactArgs.model_validate({"contact_id": "C-100", "crm_token": "x"})


class FakeMonotonic:
    def __init__(self) -> None:
        self.t = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.t += seconds


def test_token_bucket_burst_then_refill() -> None:
    clock = FakeMonotonic()
    bucket = TokenBucket(rate_per_second=10, burst=20, clock=clock, sleep=clock.sleep)
    assert [bucket.try_acquire() for _ in range(21)] == [True] * 20 + [False]
    clock.t += 0.1
    assert bucket.try_acquire() and not bucket.try_acquire()
    clock.t += 60  # refill is capped at the burst
    assert sum(bucket.try_acquire() for _ in range(30)) == 20
    assert not bucket.acquire(timeout_s=0.05)  # the next token is 0.1 s away: fail fast, no sleep
    assert clock.slept == []
    assert bucket.acquire(timeout_s=0.5)
    assert clock.slept == [pytest.approx(0.1)]


def test_token_bucket_is_thread_safe() -> None:
    clock = FakeMonotonic()
    bucket = TokenBucket(rate_per_second=10, burst=20, clock=clock)
    granted: list[bool] = []
    barrier = threading.Barrier(50)

    def take() -> None:
        barrier.wait()
        granted.append(bucket.try_acquire())

    threads = [threading.Thread(target=take) for _ in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert granted.count(True) == 20


def test_crm_rate_limit_is_a_retryable_server_error(world: World) -> None:
    clock = FakeMonotonic()
    client = CrmClient(world.store, limiter=TokenBucket(1, 1, clock=clock, sleep=clock.sleep), max_wait_s=0.5)
    token = client.issue_token("acme", "u-ada", ["emea"])
    spec = crm_specs(client)[0]
    args = LookupContactArgs(contact_id="C-100")
    spec.handler(args, ctx(credentials={"crm_token": token}))
    with pytest.raises(ToolExecutionError) as limited:
        spec.handler(args, ctx(credentials={"crm_token": token}))
    assert (limited.value.kind, limited.value.message, limited.value.retryable) == (
        "server_error",
        "CRM rate limit",
        True,
    )
    clock.t += 1.0
    spec.handler(args, ctx(credentials={"crm_token": token}))
