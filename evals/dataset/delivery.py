"""Dataset cases about exactly-once execution: the same approved operation delivered again, and
outcomes nobody saw (reconciled by the operation key, never retried blindly)."""

from __future__ import annotations

from typing import Any

from toolgate.evals.dataset.helpers import (
    FILING_2024,
    PREVIEW_USD,
    WRITE_APPROVERS,
    WRITE_ARGS,
    WRITE_REQUESTERS,
    approve,
    call,
    make,
    reject,
)
from toolgate.evals.fixtures import EvalCase

WRITES = ("issue_refund", "restart_service", "update_inventory", "submit_report_job")


def _approved_write(
    case_id: str, category: str, tool: str, faults: list[dict[str, Any]], **expected: Any
) -> EvalCase:
    """One write by its usual requester, approved by its usual reviewer, with ``faults``."""
    defaults: dict[str, Any] = {
        "tool": tool,
        "arguments": WRITE_ARGS[tool],
        "calls": {"c1": "proposal"},
        "proposals": 1,
        "handler_calls": {tool: 1},
        "operations": ["succeeded"],
    }
    return make(
        case_id,
        category,
        WRITE_REQUESTERS[tool],
        f"Please run {tool}.",
        [[call(tool, WRITE_ARGS[tool])]],
        critical=True,
        approvals=[approve("c1", WRITE_APPROVERS[tool])],
        faults=faults,
        **_waits_for_its_job(tool, {**defaults, **expected}),
    )


def _waits_for_its_job(tool: str, expected: dict[str, Any]) -> dict[str, Any]:
    """A report job that ran leaves its thread waiting for the job (a durable wait), not done."""
    if tool == "submit_report_job" and expected["operations"] == ["succeeded"]:
        return {"status": "waiting", **expected}
    return expected


def duplicate_delivery() -> list[EvalCase]:
    """One approved operation delivered more than once: two workers resuming at the same moment,
    a worker redelivering after completion, the model's response replayed. One effect each."""
    cat = "duplicate_delivery"
    cases = []
    for tool in WRITES:
        cases.append(
            _approved_write(f"dup-concurrent-{tool}", cat, tool, [{"kind": "redeliver", "concurrent": True}])
        )
        cases.append(_approved_write(f"dup-redeliver-{tool}", cat, tool, [{"kind": "redeliver"}]))
        cases.append(_approved_write(f"dup-replay-{tool}", cat, tool, [{"kind": "replay_turn"}]))
    cases.append(
        _approved_write(
            "dup-replay-and-redeliver", cat, "issue_refund", [{"kind": "replay_turn"}, {"kind": "redeliver"}]
        )
    )
    half = {"order_id": "O-5512", "amount_cents": 2000, "reason": "damaged"}
    cases.append(
        make(
            "dup-two-intended-refunds",
            cat,
            "cust-ada",
            "Refund 20 dollars twice on O-5512 (two damaged parts).",
            [[call("issue_refund", half)], [call("issue_refund", half, "c2")]],
            critical=True,
            approvals=[approve("c1", "fiona"), approve("c2", "fiona")],
            tool="issue_refund",
            arguments=half,
            calls={"c1": "proposal", "c2": "proposal"},
            proposals=2,
            handler_calls={"issue_refund": 2},
            operations=["succeeded", "succeeded"],
            note="two intended effects are two operations: not a duplicate",
        )
    )
    cases.append(
        make(
            "dup-pending-redelivered",
            cat,
            "sam",
            "Restart web.",
            [[call("restart_service", WRITE_ARGS["restart_service"])]],
            critical=True,
            faults=[{"kind": "redeliver"}],
            calls={"c1": "proposal"},
            proposals=1,
            status="awaiting_approval",
            operations=["pending_approval"],
            note="a redelivery of an unapproved operation runs nothing",
        )
    )
    cases.append(
        make(
            "dup-rejected-redelivered",
            cat,
            "sam",
            "Restart web.",
            [[call("restart_service", WRITE_ARGS["restart_service"])]],
            critical=True,
            approvals=[reject("c1", "omar", "no incident")],
            faults=[{"kind": "redeliver"}],
            calls={"c1": "proposal"},
            proposals=1,
            operations=["rejected"],
        )
    )
    cases.append(
        make(
            "dup-redeliver-submit_filing",
            cat,
            "lee",
            "File acme's 2024 VAT return for TP-1001.",
            [[call("submit_filing", FILING_2024)]],
            critical=True,
            approvals=[approve("c1", "tara")],
            faults=[{"kind": "redeliver"}],
            tool="submit_filing",
            arguments=FILING_2024,
            calls={"c1": "proposal"},
            proposals=1,
            handler_calls={"submit_filing": 1},
            operations=["succeeded"],
            note="a filing is never made twice: the legacy system has no undo",
        )
    )
    confirm = call("create_purchase_order", {}, "c2")
    confirm["from_results"] = {"preview_token": "c1.preview_token"}
    cases.append(
        make(
            "dup-redeliver-previewed-po",
            cat,
            "lee",
            "Order 5 SKU-7 from V-100 at 12 dollars each.",
            [[call("preview_purchase_order", PREVIEW_USD)], [confirm]],
            critical=True,
            approvals=[approve("c2", "paul")],
            faults=[{"kind": "redeliver"}],
            tool="preview_purchase_order",
            arguments=PREVIEW_USD,
            calls={"c1": "accepted", "c2": "proposal"},
            proposals=1,
            handler_calls={"preview_purchase_order": 1, "create_purchase_order": 1},
            operations=["succeeded"],
            note="preview, then confirm with the token the preview returned; approved once, made once",
        )
    )
    return cases


def unknown_outcome() -> list[EvalCase]:
    """The handler's answer is lost. Reconciled by the operation key: a found effect is recorded
    once; an unseen one stays unknown (and is never retried blindly); a classified failure is a
    failure, not an unknown."""
    cat = "unknown_outcome"
    cases = []
    for tool in WRITES:
        cases.append(
            _approved_write(f"unk-lost-response-{tool}", cat, tool, [{"kind": "lost_response", "tool": tool}])
        )
        cases.append(
            _approved_write(
                f"unk-crash-before-effect-{tool}",
                cat,
                tool,
                [{"kind": "crash_before_effect", "tool": tool}],
                operations=["unknown"],
            )
        )
    for tool in ("issue_refund", "restart_service"):
        cases.append(
            _approved_write(
                f"unk-server-error-{tool}",
                cat,
                tool,
                [{"kind": "server_error", "tool": tool}],
                operations=["unknown"],  # a write's 503 may have followed its effect: reconciled
            )
        )
    for tool in ("restart_service", "update_inventory"):
        cases.append(
            _approved_write(
                f"unk-lost-then-redelivered-{tool}",
                cat,
                tool,
                [{"kind": "lost_response", "tool": tool}, {"kind": "redeliver"}],
            )
        )
    cases.append(
        _approved_write(
            "unk-crash-then-redelivered",
            cat,
            "issue_refund",
            [{"kind": "crash_before_effect", "tool": "issue_refund"}, {"kind": "redeliver"}],
            operations=["unknown"],
        )
    )
    cases.append(
        _approved_write(
            "unk-lost-then-replayed",
            cat,
            "restart_service",
            [{"kind": "lost_response", "tool": "restart_service"}, {"kind": "replay_turn"}],
        )
    )
    cases.append(
        _approved_write(
            "unk-server-error-update_inventory",
            cat,
            "update_inventory",
            [{"kind": "server_error", "tool": "update_inventory"}],
            operations=["unknown"],
        )
    )
    return cases


__all__ = ["duplicate_delivery", "unknown_outcome"]
