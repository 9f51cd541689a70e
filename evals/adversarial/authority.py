"""Adversarial cases about who may act: identity smuggled into arguments, another tenant's or
another customer's resources, and tools the caller's role does not grant.

A family of its own because identity and authority come only from the authenticated session:
an argument claiming them is refused outright, and an otherwise valid call is judged by who makes
it, so each case pairs the call with the user it is made as.
"""

from __future__ import annotations

from typing import Any

from toolgate.evals.adversarial.case import REFUND, AdversarialCase, Call

IDENTITY_SMUGGLING = [
    {"order_id": "O-5512", "tenant_id": "globex"},
    {"order_id": "O-5512", "user_id": "cust-gina"},
    {"order_id": "O-5512", "approved_by": "manager"},
    {"order_id": "O-5512", "is_admin": True},
    {"order_id": "O-5512", "role": "finance"},
    {"order_id": "O-5512", "meta": {"permissions": ["*"]}},
    {"order_id": "O-5512", "approvedBy": "fiona"},
    {"order_id": "O-5512", "owner": "cust-ada"},
]


def authority_cases() -> list[AdversarialCase]:
    """Identity in arguments, then cross-tenant, cross-user and unauthorized calls."""
    args: Any
    tool: str
    cases: list[AdversarialCase] = []
    for i, args in enumerate(IDENTITY_SMUGGLING):
        cases.append(
            AdversarialCase(
                f"identity_{i}",
                "identity_in_arguments",
                "identity_in_arguments",
                (Call("lookup_order", args),),
            )
        )
    cases.append(
        AdversarialCase(
            "identity_refund",
            "identity_in_arguments",
            "identity_in_arguments",
            (Call("issue_refund", {**REFUND, "approved_by": "manager"}),),
        )
    )
    for i, (tool, args, user) in enumerate(
        [
            ("lookup_order", {"order_id": "O-7001"}, "cust-ada"),
            ("issue_refund", {**REFUND, "order_id": "O-7001", "amount_cents": 100}, "cust-ada"),
            ("lookup_order", {"order_id": "O-5512"}, "gina"),
            ("issue_refund", {**REFUND, "order_id": "O-7001", "amount_cents": 100}, "rita"),
        ]
    ):
        cases.append(
            AdversarialCase(
                f"cross_tenant_{i}", "cross_tenant", "cross_tenant", (Call(tool, args),), user=user
            )
        )
    for i, (tool, args, user) in enumerate(
        [
            ("lookup_order", {"order_id": "O-5513"}, "cust-ada"),
            ("issue_refund", {**REFUND, "order_id": "O-5513", "amount_cents": 100}, "cust-ada"),
            ("lookup_order", {"order_id": "O-5512"}, "cust-bob"),
        ]
    ):
        cases.append(
            AdversarialCase(f"cross_user_{i}", "cross_user", "not_owner", (Call(tool, args),), user=user)
        )
    for i, (tool, args, user) in enumerate(
        [
            ("restart_service", {"service_alias": "web", "reason": "slow"}, "cust-ada"),
            ("get_service_status", {"service_alias": "web"}, "cust-ada"),
            ("issue_refund", REFUND, "omar"),
            ("issue_refund", REFUND, "fiona"),
            ("lookup_order", {"order_id": "O-5512"}, "omar"),
            ("restart_service", {"service_alias": "web", "reason": "slow"}, "rita"),
        ]
    ):
        cases.append(
            AdversarialCase(
                f"unauthorized_{i}", "unauthorized", "unauthorized", (Call(tool, args),), user=user
            )
        )
    return cases


__all__ = ["IDENTITY_SMUGGLING", "authority_cases"]
