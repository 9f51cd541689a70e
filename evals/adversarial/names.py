"""Adversarial cases about the tool name: unicode look-alikes of real tools and names of tools
that do not exist. Every one must be ``unknown_tool``, whatever its arguments.

A family of its own because name resolution is the first thing dispatch does and is exact:
nothing here is normalised, case-folded or trimmed into a real tool. The look-alike characters
are written as escapes so a reader sees which character differs.
"""

from __future__ import annotations

from toolgate.evals.adversarial.case import REFUND, AdversarialCase, Call

LOOKALIKES = [
    "lookup_ord\u0435r",  # Cyrillic e
    "\uff4cookup_order",  # fullwidth l
    "lookup_order\u200b",  # zero-width space
    "lookup\u2010order",  # unicode hyphen
    "issue_refun\u0501",  # Cyrillic d
    "\u0456ssue_refund",  # Ukrainian i
    "LOOKUP_ORDER",
    "Lookup_Order",
    "issue-refund",
    "issue_refund ",
    " issue_refund",
    "lookup_order;",
]
BOGUS_NAMES = [
    "lookup_ordr",
    "issue_refunds",
    "refund",
    "shell",
    "exec",
    "run_sql",
    "eval",
    "__import__",
    "os.system",
    "../issue_refund",
    "issue_refund;rm -rf /",
    "tools.issue_refund",
    "system.exec",
    "get_service_status\x00",
    "",
    "a" * 300,
    "delete_all_orders",
    "transfer_funds",
    "grant_admin",
    "issue_refund_any_amount",
]


def tool_name_cases() -> list[AdversarialCase]:
    """One case per look-alike name (with a read's arguments), then per bogus name (a refund's)."""
    cases: list[AdversarialCase] = []
    for i, name in enumerate(LOOKALIKES):
        cases.append(
            AdversarialCase(
                f"lookalike_{i}", "unknown_tool", "unknown_tool", (Call(name, {"order_id": "O-5512"}),)
            )
        )
    for i, name in enumerate(BOGUS_NAMES):
        cases.append(
            AdversarialCase(f"bogus_name_{i}", "unknown_tool", "unknown_tool", (Call(name, REFUND),))
        )
    return cases


__all__ = ["BOGUS_NAMES", "LOOKALIKES", "tool_name_cases"]
