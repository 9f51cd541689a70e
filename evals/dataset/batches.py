"""Dataset cases about batches: several calls in one turn, where each gets its own result whatever
happens to the others (refusals, failures, writes decided differently)."""

from __future__ import annotations

from typing import Any

from toolgate.evals.dataset.helpers import (
    PREVIEW_USD,
    WRITE_ARGS,
    approve,
    call,
    make,
    reject,
)
from toolgate.evals.fixtures import EvalCase


def parallel_partial_results() -> list[EvalCase]:
    """Several calls in one turn: each gets its own result, whatever happens to the others."""
    cat = "parallel_partial_results"
    status = {"service_alias": "web"}
    mixes: list[tuple[str, str, list[tuple[str, dict[str, Any], str]]]] = [
        (
            "read-and-unknown",
            "cust-ada",
            [
                ("lookup_order", {"order_id": "O-5512"}, "accepted"),
                ("track_parcel", {"id": "1"}, "unknown_tool"),
            ],
        ),
        (
            "read-and-cross-tenant",
            "rita",
            [
                ("lookup_order", {"order_id": "O-5512"}, "accepted"),
                ("lookup_order", {"order_id": "O-7001"}, "cross_tenant"),
            ],
        ),
        (
            "two-reads",
            "sam",
            [
                ("lookup_order", {"order_id": "O-5512"}, "accepted"),
                ("get_service_status", status, "accepted"),
            ],
        ),
        (
            "read-and-unauthorized",
            "cust-ada",
            [
                ("lookup_order", {"order_id": "O-5514"}, "accepted"),
                ("get_service_status", status, "unauthorized"),
            ],
        ),
        (
            "three-statuses",
            "omar",
            [
                ("get_service_status", {"service_alias": a}, "accepted")
                for a in ("web", "worker", "scheduler")
            ],
        ),
        (
            "read-and-invalid",
            "lee",
            [
                ("get_inventory", {"sku": "SKU-7"}, "accepted"),
                ("get_inventory", {"sku": "seven"}, "schema_invalid"),
            ],
        ),
        (
            "stock-and-preview",
            "lee",
            [
                ("get_inventory", {"sku": "SKU-8"}, "accepted"),
                ("preview_purchase_order", PREVIEW_USD, "accepted"),
            ],
        ),
        (
            "read-waits-with-write",
            "sam",
            [
                ("get_service_status", status, "not_run"),
                ("restart_service", WRITE_ARGS["restart_service"], "proposal"),
            ],
        ),
    ]
    cases = []
    for cid, who, calls in mixes:
        turn = [call(tool, args, f"c{i + 1}") for i, (tool, args, _) in enumerate(calls)]
        outcomes = {f"c{i + 1}": outcome for i, (_, _, outcome) in enumerate(calls)}
        handlers: dict[str, int] = {}
        for tool, _, outcome in calls:
            if outcome == "accepted":
                handlers[tool] = handlers.get(tool, 0) + 1
        proposals = sum(1 for o in outcomes.values() if o == "proposal")
        cases.append(
            make(
                f"par-{cid}",
                cat,
                who,
                "Check these for me.",
                [turn],
                critical=any(o not in ("accepted", "proposal", "not_run") for o in outcomes.values()),
                calls=outcomes,
                handler_calls=handlers,
                proposals=proposals,
                status="awaiting_approval" if proposals else "done",
                operations=["pending_approval"] * proposals,
            )
        )
    cases.append(
        make(
            "par-one-read-fails",
            cat,
            "sam",
            "Order O-5512 and web status?",
            [[call("lookup_order", {"order_id": "O-5512"}), call("get_service_status", status, "c2")]],
            faults=[{"kind": "server_error", "tool": "get_service_status"}],
            # a 503 on a read is retried (issue 32): the second attempt answers
            calls={"c1": "accepted", "c2": "accepted"},
            handler_calls={"lookup_order": 1, "get_service_status": 2},
        )
    )
    cases.append(
        make(
            "par-one-read-fails-stock",
            cat,
            "lee",
            "SKU-8 stock and a V-100 preview?",
            [[call("get_inventory", {"sku": "SKU-8"}), call("preview_purchase_order", PREVIEW_USD, "c2")]],
            faults=[{"kind": "server_error", "tool": "preview_purchase_order"}],
            # a 503 on a read is retried (issue 32): the second attempt answers
            calls={"c1": "accepted", "c2": "accepted"},
            handler_calls={"get_inventory": 1, "preview_purchase_order": 2},
        )
    )
    two = [
        call("restart_service", WRITE_ARGS["restart_service"]),
        call("restart_service", {"service_alias": "worker", "reason": "stuck jobs"}, "c2"),
    ]
    for cid, steps, ops, runs in [
        (
            "approve-one-reject-other",
            [approve("c1", "omar"), reject("c2", "omar", "worker is fine")],
            ["rejected", "succeeded"],
            1,
        ),
        ("approve-both", [approve("c1", "omar"), approve("c2", "omar")], ["succeeded", "succeeded"], 2),
        ("approve-one-other-waits", [approve("c1", "omar")], ["pending_approval", "succeeded"], 1),
    ]:
        cases.append(
            make(
                f"par-two-writes-{cid}",
                cat,
                "sam",
                "Restart web and worker.",
                [two],
                critical=True,
                approvals=steps,
                calls={"c1": "proposal", "c2": "proposal"},
                proposals=2,
                handler_calls={"restart_service": runs},
                status="awaiting_approval" if "pending_approval" in ops else "done",
                operations=ops,
            )
        )
    cases.append(
        make(
            "par-write-and-refused-write",
            cat,
            "sam",
            "Restart web and scheduler.",
            [
                [
                    call("restart_service", WRITE_ARGS["restart_service"]),
                    call("restart_service", {"service_alias": "scheduler", "reason": "stuck"}, "c2"),
                ]
            ],
            critical=True,
            approvals=[approve("c1", "omar")],
            calls={"c1": "proposal", "c2": "policy_violation"},
            proposals=1,
            handler_calls={"restart_service": 1},
            operations=["succeeded"],
        )
    )
    return cases


__all__ = ["parallel_partial_results"]
