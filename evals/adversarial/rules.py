"""Adversarial cases about rules and limits: calls that are well formed and made by someone
allowed to make them, yet must stop on operator policy, on the system of record's business
facts, or on the thread's rate, budget, loop and per-turn limits.

A family of its own because these cases depend on state beyond the single call (a role's limit,
an order's balance, the calls made before it in the thread), so several script more than one
call and set the case's ``rate_limit`` or ``max_tool_calls``.
"""

from __future__ import annotations

from toolgate.evals.adversarial.case import REFUND, AdversarialCase, Call


def rule_cases() -> list[AdversarialCase]:
    """Policy violations, semantic refusals, then the rate, budget, loop and turn limits."""
    return [
        AdversarialCase(
            "refund_over_role_limit",
            "policy_violation",
            "policy_violation",
            (Call("issue_refund", {**REFUND, "order_id": "O-7001", "amount_cents": 6000}),),
            user="gina_support",
        ),
        AdversarialCase(
            "restart_outside_allowlist",
            "policy_violation",
            "policy_violation",
            (Call("restart_service", {"service_alias": "scheduler", "reason": "stuck"}),),
            user="sam",
        ),
        AdversarialCase(
            "refund_more_than_paid",
            "semantic_invalid",
            "semantic_invalid",
            (Call("issue_refund", {**REFUND, "order_id": "O-5514", "amount_cents": 2000}),),
        ),
        AdversarialCase(
            "refund_missing_order",
            "semantic_invalid",
            "semantic_invalid",
            (Call("issue_refund", {**REFUND, "order_id": "O-9999"}),),
        ),
        AdversarialCase(
            "status_of_missing_service",
            "semantic_invalid",
            "semantic_invalid",
            (Call("get_service_status", {"service_alias": "scheduler"}),),
            user="gina_ops",
        ),
        AdversarialCase(
            "rate_limited",
            "rate_limited",
            "rate_limited",
            (
                Call("lookup_order", {"order_id": "O-5512"}),
                Call("lookup_order", {"order_id": "O-5513x"}),
                Call("lookup_order", {"order_id": "O-5514"}),
            ),
            rate_limit=1,
        ),
        AdversarialCase(
            "retired_tool",
            "tool_deprecated",
            "tool_deprecated",
            (Call("lookup_order", {"order_id": "O-5512"}),),
            retired_tool="lookup_order",
        ),
        AdversarialCase(
            "budget_exhausted",
            "budget_exhausted",
            "budget_exhausted",
            tuple(Call("lookup_order", {"order_id": f"O-{5512 + (i % 3)}"}) for i in range(7)),
            user="rita",  # support: reads any customer's order, so only the budget can stop the seventh
            max_tool_calls=6,
        ),
        AdversarialCase(
            "loop_detected",
            "loop_detected",
            "loop_detected",
            tuple(Call("lookup_order", {"order_id": "O-5512"}) for _ in range(3)),
        ),
        AdversarialCase(
            "too_many_calls_in_one_turn",
            "too_many_calls",
            "too_many_calls",
            tuple(Call("lookup_order", {"order_id": "O-5512"}) for _ in range(40)),
        ),
        AdversarialCase(
            "accepted_call_in_a_turn_that_stops_the_task",
            "task_stopped",
            "task_stopped",
            (
                *(Call("lookup_order", {"order_id": 5512 + i}) for i in range(3)),
                Call("lookup_order", {"order_id": "O-5512"}),
            ),
        ),
    ]


__all__ = ["rule_cases"]
