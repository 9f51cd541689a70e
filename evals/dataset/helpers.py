"""Small builders the dataset generator's case modules share (`toolgate.evals.dataset.build`).

They keep each case to the facts that matter: who asks, what the model does, what must happen.
The demo world they refer to (orders, services, stock, vendors, people) is seeded by the demo
releases; the ids below are that seed data.
"""

from __future__ import annotations

from typing import Any

from toolgate.evals.fixtures import EvalCase

REFUND_FULL = {"order_id": "O-5512", "amount_cents": 4999, "reason": "damaged"}
"""Ada's blender (O-5512, 4999 cents), refunded in full."""
RESTART_WEB = {"service_alias": "web", "reason": "stuck request queue"}
INVENTORY_DOWN = {"sku": "SKU-8", "delta": -5, "reason": "damaged"}
REPORT_Q1 = {"report_type": "sales_summary", "date_from": "2024-01-01", "date_to": "2024-03-31"}
FILING_2024 = {"taxpayer_ref": "TP-1001", "tax_year": 2024, "filing_type": "vat_return"}
"""A VAT return for acme's first demo taxpayer."""
BIG_ORDER = "O-5520"
"""Ada's espresso bar (250000 cents): room above every refund limit and the two-reviewer threshold."""
SEED_JOB_ID = "job_5eed000000000001"
"""Acme's finished report job the demo seeds (`toolgate.tools.demo.reports.SEED_JOB`)."""
PREVIEW_USD = {
    "vendor_id": "V-100",
    "line_items": [{"sku": "SKU-7", "quantity": 5, "unit_price_cents": 1200}],
    "currency": "USD",
}

WRITE_APPROVERS = {
    "issue_refund": "fiona",
    "restart_service": "omar",
    "update_inventory": "wanda",
    "submit_report_job": "ana",
}
"""A reviewer whose single approval satisfies each write's approval class."""
WRITE_REQUESTERS = {
    "issue_refund": "cust-ada",
    "restart_service": "sam",
    "update_inventory": "lee",
    "submit_report_job": "lee",
}
WRITE_ARGS: dict[str, dict[str, Any]] = {
    "issue_refund": REFUND_FULL,
    "restart_service": RESTART_WEB,
    "update_inventory": INVENTORY_DOWN,
    "submit_report_job": REPORT_Q1,
}


KNOWN_TOOLS = frozenset(
    {
        "lookup_order",
        "get_service_status",
        "restart_service",
        "issue_refund",
        "get_inventory",
        "update_inventory",
        "preview_purchase_order",
        "create_purchase_order",
        "submit_report_job",
        "check_job_status",
        "submit_filing",
        "crm_lookup_contact",
    }
)
"""The tools of ops-tools/1.1.0, the release the dataset is written for; a case requires the ones
its calls name (unknown and look-alike names are what some cases are about)."""


def call(name: str, args: Any = None, call_id: str = "c1", *, raw: str | None = None) -> dict[str, Any]:
    """One scripted tool call."""
    out: dict[str, Any] = {"name": name, "id": call_id}
    if raw is not None:
        out["raw"] = raw
    else:
        out["args"] = args
    return out


def approve(call_id: str, reviewer: str, *, expect_refused: str | None = None, **step: Any) -> dict[str, Any]:
    """A reviewer's approval of the proposal of ``call_id`` (``step``: further `ApprovalStep`
    fields, e.g. ``digest="stale"`` or ``after_minutes``)."""
    out: dict[str, Any] = {"call_id": call_id, "reviewer": reviewer, "decision": "approve", **step}
    if expect_refused:
        out["expect_refused"] = expect_refused
    return out


def reject(call_id: str, reviewer: str, reason: str, *, expect_refused: str | None = None) -> dict[str, Any]:
    """A reviewer's rejection of the proposal of ``call_id``."""
    step: dict[str, Any] = {"call_id": call_id, "reviewer": reviewer, "decision": "reject", "reason": reason}
    if expect_refused:
        step["expect_refused"] = expect_refused
    return step


def make(
    case_id: str,
    category: str,
    principal: str | dict[str, Any],
    text: str,
    turns: list[list[dict[str, Any]]],
    *,
    critical: bool = False,
    final: str = "Here is what happened.",
    approvals: list[dict[str, Any]] | None = None,
    faults: list[dict[str, Any]] | None = None,
    limits: dict[str, int] | None = None,
    people: list[dict[str, Any]] | None = None,
    credentials: dict[str, str] | None = None,
    note: str = "",
    **expected: Any,
) -> EvalCase:
    """A validated case; ``expected`` holds the `Expected` fields (status defaults to ``done``)."""
    names = {c["name"] for turn in turns for c in turn}
    return EvalCase.model_validate(
        {
            "requires": sorted(names & KNOWN_TOOLS),
            "id": case_id,
            "category": category,
            "critical": critical,
            "principal": principal,
            "input": text,
            "turns": turns,
            "final": final,
            "approvals": approvals or [],
            "faults": faults or [],
            "limits": limits or {},
            "people": people or [],
            "credentials": credentials or {},
            "expected": expected,
            "note": note,
        }
    )


def refused(
    case_id: str,
    category: str,
    principal: str,
    text: str,
    tool: str,
    args: Any,
    code: str,
    *,
    critical: bool = True,
    note: str = "",
) -> EvalCase:
    """A one-call case whose call must be refused with ``code`` before any handler runs."""
    return make(
        case_id,
        category,
        principal,
        text,
        [[call(tool, args)]],
        critical=critical,
        final="I can't do that from this account.",
        note=note,
        refusal=code,
        calls={"c1": code},
    )


def read_ok(
    case_id: str,
    category: str,
    principal: str,
    text: str,
    tool: str,
    args: dict[str, Any],
    *,
    critical: bool = False,
    note: str = "",
) -> EvalCase:
    """A one-call case whose read must run once with exactly ``args``."""
    return make(
        case_id,
        category,
        principal,
        text,
        [[call(tool, args)]],
        critical=critical,
        note=note,
        tool=tool,
        arguments=args,
        calls={"c1": "accepted"},
        handler_calls={tool: 1},
    )


__all__ = [
    "BIG_ORDER",
    "FILING_2024",
    "INVENTORY_DOWN",
    "KNOWN_TOOLS",
    "PREVIEW_USD",
    "REFUND_FULL",
    "REPORT_Q1",
    "RESTART_WEB",
    "SEED_JOB_ID",
    "WRITE_APPROVERS",
    "WRITE_ARGS",
    "WRITE_REQUESTERS",
    "approve",
    "call",
    "make",
    "read_ok",
    "refused",
    "reject",
]
