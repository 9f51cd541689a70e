"""The canonical JSON form is frozen: approval digests, operation keys and audit hashes already
stored were computed over it, so these exact bytes must never change (see `toolgate.canonical`).

Each case is one place where the form differs from RFC 8785 or where an encoder change would
most likely slip in; a failure here means stored digests would no longer verify."""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

import pytest

from toolgate.canonical import canonical_json, digest, idempotency_key_for, operation_key

PINNED: list[tuple[Any, str]] = [
    # integers keep every digit (RFC 8785 rounds beyond 2**53 through a double)
    (2**64, "18446744073709551616"),
    (-(2**63), "-9223372036854775808"),
    # an integral float is written as that integer (RFC 8785: 1e+21)
    (1e21, "1000000000000000000000"),
    (1.0, "1"),
    (-0.0, "0"),
    (Decimal("2"), "2"),
    # other floats in Python's shortest round-trip form (RFC 8785: 1e-7)
    (0.1, "0.1"),
    (Decimal("0.1"), "0.1"),
    (1e-7, "1e-07"),
    (123456789.125, "123456789.125"),
    # keys by code point: U+FB01 before U+1F600 (RFC 8785's UTF-16 order puts the emoji first)
    ({"\U0001f600": 1, "\ufb01": 2, "a": 3}, '{"a":3,"\ufb01":2,"\U0001f600":1}'),
    # nested keys sorted at every depth, compact separators, characters kept, tuples as arrays
    (
        {"b": {"z": 1, "a": [{"y": 2, "x": 1}]}, "a": None, "\u00e9": "\u00fc", "t": (True, False)},
        '{"a":null,"b":{"a":[{"x":1,"y":2}],"z":1},"t":[true,false],"\u00e9":"\u00fc"}',
    ),
    # only quote, backslash and control characters are escaped
    ('q"b\\\t\x1f\x7f\u00e9', '"q\\"b\\\\\\t\\u001f\x7f\u00e9"'),
]


@pytest.mark.parametrize(("value", "encoded"), PINNED, ids=[repr(v)[:40] for v, _ in PINNED])
def test_canonical_json_bytes_are_pinned(value: Any, encoded: str) -> None:
    assert canonical_json(value) == encoded


def test_digests_and_keys_are_pinned() -> None:
    document = {
        "b": {"z": 1, "a": [{"y": 2, "x": 1}]},
        "a": None,
        "n": 1e21,
        "f": 0.1,
        "big": 2**64,
        "\U0001f600": "x",
        "\ufb01": "y",
    }
    assert digest(document) == "4af8473f723c0ea61ea193b2173023cd59d086e7be9948ec9773b311a3f317d8"
    key = operation_key(
        tenant_id="t1",
        task_id="thread-1",
        call_id="call_1",
        tool="issue_refund",
        arguments={"order_id": "O-5512", "amount_cents": 2500, "reason": "damaged"},
    )
    assert key == "op_9e6ec5c00acb2cdf64b026acb28eacd8"
    assert idempotency_key_for(key) == "idem_ec829b2567751a1ab99f7775b3e3c2a1"


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf, Decimal("NaN")])
def test_nan_and_infinity_are_refused(number: Any) -> None:
    with pytest.raises(ValueError, match="NaN or infinity"):
        canonical_json({"x": [number]})


def test_other_types_are_refused() -> None:
    with pytest.raises(TypeError, match="set"):
        canonical_json({"x": {1, 2}})


def test_subclasses_of_the_plain_types_encode_as_their_base_types() -> None:
    """Exact types take a shortcut; their subclasses (an IntEnum, a str or dict subclass, a
    non-string key) must still come out in the same form as the plain values."""
    import enum

    class Flag(enum.IntEnum):
        ON = 1

    class Text(str):
        pass

    class Record(dict[Any, Any]):
        pass

    value = Record({Text("b"): [Flag.ON, Text("x"), 2.0], 3: {"a": (True, None)}})
    plain = {"b": [1, "x", 2], "3": {"a": [True, None]}}
    assert canonical_json(value) == canonical_json(plain) == '{"3":{"a":[true,null]},"b":[1,"x",2]}'
