"""Dataset cases about the arguments of a call: values taken from the user's words are kept in
canonical form, and a malformed or invalid form is refused with a fix that a corrected retry
follows. Calls refused outright live in `toolgate.evals.dataset.refusal`."""

from __future__ import annotations

from toolgate.evals.dataset.helpers import call, make, read_ok
from toolgate.evals.fixtures import EvalCase


def argument_extraction() -> list[EvalCase]:
    """Arguments come from the user's words; the gateway keeps them canonically, refuses a
    malformed or invalid form, and a corrected retry goes through."""
    cat = "argument_extraction"
    cases = [
        read_ok(
            "args-order-id",
            cat,
            "cust-ada",
            "Check order number O-5514.",
            "lookup_order",
            {"order_id": "O-5514"},
        ),
        read_ok(
            "args-alias",
            "argument_extraction",
            "omar",
            "Is the scheduler alive?",
            "get_service_status",
            {"service_alias": "scheduler"},
        ),
        read_ok("args-sku", cat, "lee", "Stock of item SKU-8?", "get_inventory", {"sku": "SKU-8"}),
        read_ok(
            "args-po-lines",
            cat,
            "lee",
            "Preview 3 x SKU-7 at 9.99 and 2 x SKU-8 at 20 from V-101.",
            "preview_purchase_order",
            {
                "vendor_id": "V-101",
                "line_items": [
                    {"sku": "SKU-7", "quantity": 3, "unit_price_cents": 999},
                    {"sku": "SKU-8", "quantity": 2, "unit_price_cents": 2000},
                ],
                "currency": "USD",
            },
        ),
    ]
    partial = {"order_id": "O-5512", "amount_cents": 1250, "reason": "damaged"}
    for cid, who, text, tool, args in [
        ("refund-cents", "cust-ada", "Refund $12.50 of O-5512, it was damaged.", "issue_refund", partial),
        (
            "refund-reason",
            "cust-ada",
            "O-5514 never arrived, refund 1999.",
            "issue_refund",
            {"order_id": "O-5514", "amount_cents": 1999, "reason": "not_received"},
        ),
        (
            "restart-reason",
            "sam",
            "Restart worker, jobs are piling up.",
            "restart_service",
            {"service_alias": "worker", "reason": "jobs are piling up"},
        ),
        (
            "inventory-delta",
            "lee",
            "We received 25 SKU-7.",
            "update_inventory",
            {"sku": "SKU-7", "delta": 25, "reason": "received"},
        ),
        (
            "report-dates",
            "lee",
            "Order volume for March 2024.",
            "submit_report_job",
            {"report_type": "order_volume", "date_from": "2024-03-01", "date_to": "2024-03-31"},
        ),
    ]:
        cases.append(
            make(
                f"args-{cid}",
                cat,
                who,
                text,
                [[call(tool, args)]],
                final="That is waiting for approval.",
                tool=tool,
                arguments=args,
                calls={"c1": "proposal"},
                proposals=1,
                status="awaiting_approval",
                operations=["pending_approval"],
            )
        )
    retries = [
        (
            "order-id-digits",
            "cust-ada",
            "lookup_order",
            {"order_id": "5512"},
            {"order_id": "O-5512"},
            "schema_invalid",
        ),
        (
            "alias-case",
            "omar",
            "get_service_status",
            {"service_alias": "Web"},
            {"service_alias": "web"},
            "schema_invalid",
        ),
        ("sku-missing-prefix", "lee", "get_inventory", {"sku": "8"}, {"sku": "SKU-8"}, "schema_invalid"),
        (
            "extra-field",
            "cust-ada",
            "lookup_order",
            {"order_id": "O-5512", "include": "card"},
            {"order_id": "O-5512"},
            "schema_invalid",
        ),
        ("malformed-json", "cust-ada", "lookup_order", None, {"order_id": "O-5512"}, "malformed_arguments"),
        (
            "order-id-as-number",
            "rita",
            "lookup_order",
            {"order_id": 5513},
            {"order_id": "O-5513"},
            "schema_invalid",
        ),
    ]
    for cid, who, tool, bad, good, code in retries:
        first = call(tool, raw='{"order_id": "O-55') if bad is None else call(tool, bad)
        cases.append(
            make(
                f"args-retry-{cid}",
                cat,
                who,
                "Please check it.",
                [[first], [call(tool, good, "c2")]],
                tool=tool,
                arguments=good,
                refusal=code,
                calls={"c1": code, "c2": "accepted"},
                handler_calls={tool: 1},
                note="an invalid first form is refused with a fix; the corrected call runs once",
            )
        )
    return cases


__all__ = ["argument_extraction"]
