"""Every demo tool's argument contract has a positive fixture that is a realistic call, and refuses
an unknown alias wherever it has an enumerated or patterned string (``registry schemas --check``).

The fixture is built from the fields' declared ``examples`` (`toolgate.tools.schema.fixtures`);
these tests hold the examples to the demo seeds (a fixture names an order, SKU, contact, vendor
or taxpayer that exists for acme) and check that they never reach the model: the strict form the
provider is sent drops ``examples``, so the exported schemas and manifests do not change.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from support import cli_env, toolgate

from toolgate.releases.bundle import ReleaseEnv
from toolgate.store import SQLiteStore
from toolgate.tools.demo.crm import SEED_CONTACTS
from toolgate.tools.demo.filing import SEED_TAXPAYERS
from toolgate.tools.demo.inventory import SEED_STOCK
from toolgate.tools.demo.purchasing_schema import SEED_VENDORS
from toolgate.tools.demo.records import SEED_ORDERS
from toolgate.tools.demo.release import DEMO_RELEASES
from toolgate.tools.schema.export import anthropic_tool, openai_tool
from toolgate.tools.schema.fixtures import check_fixtures, example_arguments
from toolgate.tools.schema.walk import resolve_pointer
from toolgate.tools.spec import ToolSpec

RELEASES = ("ops-tools/1.0.0", "ops-tools/1.1.0")


def _specs(release_id: str, tmp_path: Path) -> dict[str, ToolSpec]:
    store = SQLiteStore(tmp_path / "specs.sqlite", key=b"k" * 16)
    return dict(DEMO_RELEASES[release_id].registry(ReleaseEnv(store, secret=b"fixtures")).tools)


def _has_closed_string(schema: Mapping[str, Any]) -> bool:
    """Whether a top-level argument is a string restricted by an enum or a pattern."""
    for node in schema.get("properties", {}).values():
        if isinstance(node.get("$ref"), str):
            node = resolve_pointer(schema, node["$ref"])
        if "enum" in node or "pattern" in node:
            return True
    return False


def _lines(stdout: str) -> dict[str, dict[str, str]]:
    rows = {}
    for line in stdout.splitlines():
        if line.startswith("schema="):
            fields = dict(part.split("=", 1) for part in line.split())
            rows[fields["schema"]] = fields
    return rows


@pytest.mark.parametrize("release_id", RELEASES)
def test_every_demo_tool_passes_its_fixtures_through_the_cli(release_id: str, tmp_path: Path) -> None:
    specs = _specs(release_id, tmp_path)
    result = toolgate(["registry", "schemas", "--check", "--release", release_id], cli_env(tmp_path))
    rows = _lines(result.stdout)
    assert set(rows) == set(specs)  # every tool of the release is checked, none skipped
    for name, spec in specs.items():
        expected_alias = "REJECTED" if _has_closed_string(spec.contract.json_schema()) else "N/A"
        assert (rows[name]["valid_fixture"], rows[name]["unknown_alias"]) == ("PASS", expected_alias), name
        assert (rows[name]["unsupported_keywords"], rows[name]["problems"]) == ("0", "0"), name
        assert check_fixtures(spec.contract) == ("PASS", expected_alias), name
    # every demo contract names something closed (an id pattern or an alias set)
    assert {row["unknown_alias"] for row in rows.values()} == {"REJECTED"}
    assert result.stdout.splitlines()[-1] == "schemas_checked=PASS"


ACME_ORDERS = {row[0]: row[4] for row in SEED_ORDERS if row[1] == "acme"}
ACME_STOCK = {sku: on_hand for tenant, sku, on_hand in SEED_STOCK if tenant == "acme"}
ACME_CONTACTS = {row[0] for row in SEED_CONTACTS if row[1] == "acme"}
ACME_VENDORS = {row[0] for row in SEED_VENDORS if row[1] == "acme"}
ACME_TAXPAYERS = {row[0] for row in SEED_TAXPAYERS if row[1] == "acme"}


def test_the_fixtures_name_what_the_demo_seeds_hold(tmp_path: Path) -> None:
    specs = _specs("ops-tools/1.1.0", tmp_path)
    fixture = {name: example_arguments(spec.contract.json_schema()) or {} for name, spec in specs.items()}
    assert fixture["lookup_order"]["order_id"] in ACME_ORDERS
    refund = fixture["issue_refund"]
    assert 0 < refund["amount_cents"] <= ACME_ORDERS[refund["order_id"]]
    assert fixture["get_inventory"]["sku"] in ACME_STOCK
    update = fixture["update_inventory"]
    assert update["delta"] != 0 and ACME_STOCK[update["sku"]] + update["delta"] >= 0
    assert fixture["crm_lookup_contact"]["contact_id"] in ACME_CONTACTS
    preview = fixture["preview_purchase_order"]
    assert preview["vendor_id"] in ACME_VENDORS
    assert {line["sku"] for line in preview["line_items"]} <= set(ACME_STOCK)
    assert all(line["quantity"] >= 1 and line["unit_price_cents"] > 0 for line in preview["line_items"])
    assert fixture["submit_filing"]["taxpayer_ref"] in ACME_TAXPAYERS
    report = fixture["submit_report_job"]
    assert report["date_from"] < report["date_to"]


@pytest.mark.parametrize("release_id", RELEASES)
def test_examples_are_not_sent_to_the_model(release_id: str, tmp_path: Path) -> None:
    def keys(node: Any) -> set[str]:
        if isinstance(node, dict):
            return set(node) | {k for value in node.values() for k in keys(value)}
        if isinstance(node, list):
            return {k for item in node for k in keys(item)}
        return set()

    for name, spec in _specs(release_id, tmp_path).items():
        assert "examples" in keys(spec.args_model.model_json_schema()), name  # declared ...
        tool = openai_tool(spec.wire_name, spec.description, spec.args_model)
        assert tool["function"]["strict"] is True, name
        assert "examples" not in keys(tool), name  # ... but not in the strict form the provider gets
        assert "examples" not in keys(anthropic_tool(spec.wire_name, spec.description, spec.args_model))
