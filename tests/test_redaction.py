"""Secret redaction: real secrets go, ordinary numbers and words stay byte-for-byte.

Regression: a bare 13-19 digit pattern turned ``"balance": 123.04999999999999716`` into
``123.[REDACTED]`` in tool results, and fired on order ids and timestamps.
"""

from __future__ import annotations

import hashlib
import json
import math
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolgate.policy.output import REDACTED, count_secrets, redact, redact_personal, redact_text

TEST_CARDS = [
    "4111111111111111",  # Visa
    "4111 1111 1111 1111",
    "4111-1111-1111-1111",
    "5500-0000-0000-0004",  # Mastercard
    "5500 0000 0000 0004",
    "378282246310005",  # Amex
    "3782 822463 10005",
    "6011111111111117",  # Discover
    "6011 1111 1111 1117",
    "2221000000000009",  # Mastercard 2-series
    "4222222222222",  # 13-digit Visa
]


def _luhn_check_digit(body: str) -> str:
    for d in "0123456789":
        digits = body + d
        total = 0
        for i, ch in enumerate(reversed(digits)):
            n = int(ch)
            if i % 2:
                n = n * 2 - 9 if n > 4 else n * 2
            total += n
        if total % 10 == 0:
            return d
    raise AssertionError("unreachable")


@pytest.mark.parametrize("card", TEST_CARDS)
def test_test_card_numbers_are_redacted_in_every_grouping(card: str) -> None:
    assert redact_text(card) == REDACTED
    assert count_secrets(card) == 1
    sentence = f"Charged card {card}, exp 12/28, for order O-5512."
    assert redact_text(sentence) == f"Charged card {REDACTED}, exp 12/28, for order O-5512."
    assert redact_text(f"({card})") == f"({REDACTED})"
    assert redact_text(f"card:{card}.") == f"card:{REDACTED}."
    assert redact({"note": f"paid with {card}"}) == {"note": f"paid with {REDACTED}"}


def test_several_cards_in_one_text_are_each_redacted_and_counted() -> None:
    text = "cards 4111111111111111 5500000000000004; also 4111 1111 1111 1111 12/28"
    assert redact_text(text) == f"cards {REDACTED} {REDACTED}; also {REDACTED} 12/28"
    assert count_secrets(text) == 3


def test_float_repr_from_the_benchmark_is_untouched() -> None:
    for text in (
        '"balance": 123.04999999999999716',
        "123.04999999999999716",
        json.dumps({"balance": 123.04999999999999716, "price": 0.41111111111111111}),
        "0.4111111111111111",  # a card number's digits, but as a fraction
        "4111111111111111.0",  # ... or as the integer part of a float
        "4111111111111111,5",  # decimal comma
        "1,411,111,111,111,111",  # thousands separators
        "4.111111111111111e-05",
    ):
        assert redact_text(text) == text
        assert count_secrets(text) == 0


@settings(max_examples=500)
@given(st.floats(allow_nan=True, allow_infinity=True))
def test_no_float_is_ever_redacted(f: float) -> None:
    assert redact_text(str(f)) == str(f)
    assert redact_text(repr(f)) == repr(f)
    doc = {"balance": f, "items": [f, -f, {"price": f}], "as_text": str(f)}
    text = json.dumps(doc)
    assert redact_text(text) == text
    assert count_secrets(text) == 0
    redacted = redact(doc)
    assert json.dumps(redacted) == text
    if not math.isnan(f):
        assert redacted == doc


@settings(max_examples=300)
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=8))
def test_float_lists_in_prose_and_json_are_untouched(values: list[float]) -> None:
    text = "values: " + ", ".join(map(str, values)) + " | " + json.dumps(values)
    assert redact_text(text) == text


@pytest.mark.parametrize(
    "number",
    [
        "4111111111111112",  # card-shaped, fails Luhn
        "4111 1111 1111 1112",
        "5500-0000-0000-0005",
        "1234567890123",
        "9999999999999999999",
        "2026120114335400",  # an order id in digits (fails Luhn)
        "1733066034120",  # epoch milliseconds: passes Luhn, but no card network starts with 1
        "20261201143354000",  # a dated id
    ],
)
def test_long_numbers_that_are_not_cards_stay(number: str) -> None:
    for text in (number, f"order {number} shipped", f"O-{number}"):
        assert redact_text(text) == text
        assert count_secrets(text) == 0


@pytest.mark.parametrize(
    "text",
    [
        "O-5512",
        "order O-5512 and O-2026120114335400",
        "2026-12-01T14:33:54.123456+00:00",
        "2026-12-01 14:33:54Z",
        "20261201T143354Z",
        "+1 415 555 0100",
        "+14155550100",
        "+86 138 0013 8000",
        "+8613800138000",
        "(415) 555-0100",
        "123e4567-e89b-12d3-a456-426614174000",
        "12345678-1234-1234-1234-123456789012",
        "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20",
        "4111111111111111abcdef0123456789abcdef0123456789abcdef0123456789",  # hex, digits first
        "build_4111111111111111",
        "v4111111111111111",
        "1234 5678 4111 1111 1111 1111",  # a longer grouped run, not a card
    ],
)
def test_ids_timestamps_phones_and_digests_stay(text: str) -> None:
    assert redact_text(text) == text
    assert count_secrets(text) == 0


@settings(max_examples=200)
@given(st.binary(max_size=64))
def test_hex_digests_and_uuids_stay(data: bytes) -> None:
    for text in (
        hashlib.sha256(data).hexdigest(),
        hashlib.sha1(data).hexdigest(),
        str(uuid.UUID(bytes=hashlib.md5(data).digest())),
        f"sha256:{hashlib.sha256(data).hexdigest()}",
    ):
        assert redact_text(text) == text


@settings(max_examples=300)
@given(st.integers(min_value=0, max_value=10**19), st.integers(min_value=0, max_value=10**9))
def test_integers_as_fraction_of_a_decimal_stay(whole: int, frac: int) -> None:
    text = f"{frac}.{whole:019d}"
    assert redact_text(text) == text


@settings(max_examples=300)
@given(
    st.sampled_from(["4", "51", "55", "34", "37", "6011", "65", "2221", "2720"]),
    st.integers(min_value=13, max_value=19),
    st.integers(min_value=0),
    st.sampled_from(["", " ", "-"]),
)
def test_luhn_valid_network_numbers_are_redacted(prefix: str, length: int, seed: int, sep: str) -> None:
    body = (prefix + str(seed).rjust(length, "0"))[: length - 1]
    card = body + _luhn_check_digit(body)
    if sep and length == 16:
        card = sep.join(card[i : i + 4] for i in range(0, 16, 4))
    text = f"pay with {card} today"
    assert redact_text(text) == f"pay with {REDACTED} today"
    assert count_secrets(text) == 1


JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0"
    ".dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
)


@pytest.mark.parametrize(
    "secret",
    [
        "sk-" + "Ab3dEfGh1jKlMn0pQrSt",
        "sk-abcdefghijklmnopqrstuvwxyz123456",
        "sk-live-abcdefghijklmnopqrstuvwxyz",
        "sk-proj-Xy9_aB-cD3eF4gH5iJ6kL7mN8",
        "AKIAIOSFODNN7EXAMPLE",
        "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
        JWT,
        "Bearer abcdefghijklmnop",
        "BEARER abcdefghijklmnop",
        "bearer abc123def456ghi789",
        "Bearer abc/def+ghi~jkl.mno==",
        "password=hunter2",
        "password: hunter2",
        "Password = hunter2-PLANTED",
        "passwd=s3cr3t",
        "pwd=hunter2",
        "secret: xyzzy",
        "api_key=abc123",
        "API-KEY: abc123",
        "apikey=abc123",
        "token=abc123",
        "token: 493817",  # a one-time code is still a secret
    ],
)
def test_keys_and_tokens_are_still_redacted(secret: str) -> None:
    text = f"use {secret} now"
    out = redact_text(text)
    assert out == f"use {REDACTED} now", out
    assert count_secrets(text) == 1
    assert count_secrets(out) == 0
    assert redact_text(out) == out


def test_authorization_header_loses_the_whole_token() -> None:
    out = redact_text("Authorization: Bearer abcdefghijklmnop/QRST+uvw==")
    assert "QRST" not in out and "abcdefghijklmnop" not in out


@pytest.mark.parametrize(
    "text",
    [
        "payable to the bearer notwithstanding any notice",
        "the bearer responsibilities",
        "sk-1234-5678-9012-3456",  # an id that merely starts with sk-
        "secret: false",
        "token: null",
        "password: none",
        "PWD=/home/sam",
        "pwd: ~/projects",
        "max_tokens=1024 total_tokens: 2048",
        "passwords: 3",
        "tokens=12",
        "password=[REDACTED]",
        '{"total_tokens": 2048, "max_tokens": 4096}',
        "preview_token: pv-123",
        '{"secret": false, "password": null}',
        "secretary: Ada",
        "PWD=/home/ada OLDPWD=~/src",
        "see https://example.com:8080/path?x=a@b for details",
        "Basic information about the order",
        "token_count: 12",
    ],
)
def test_plain_words_and_numbers_next_to_keywords_stay(text: str) -> None:
    assert redact_text(text) == text
    assert count_secrets(text) == 0


def test_redact_by_key_spares_counts_and_plain_words() -> None:
    doc = {
        "usage": {"total_tokens": 2048, "prompt_tokens": 1000, "max_tokens": 4096},
        "tokenizer": "cl100k",
        "cardinality": 12,
        "discard_reason": "duplicate",
        "secretary": "Ada",
        "className": "Order",
        "businessName": "Acme",
        "preview_token": "pv-123",
    }
    assert redact(doc) == doc


def test_redact_by_key_still_hides_sensitive_fields() -> None:
    doc = {
        "password": "x",
        "api_token": "abc",
        "access_token": "abc",
        "client_secret": "abc",
        "apiKey": "abc",
        "card": "visa",
        "card_number": "4111111111111111",
        "accountNumber": "12345678",
        "iban": "DE89370400440532013000",
        "ssn": "078-05-1120",
        "customerSSN": "078-05-1120",
        "customer_ssn": "078-05-1120",
        "cards": ["4111111111111111"],
    }
    out = redact(doc)
    assert out["cards"] == [REDACTED]
    assert all(v == REDACTED for k, v in out.items() if k != "cards")


_PIECES = st.sampled_from(
    [
        "4111 1111 1111 1111",
        "4111111111111112",
        "123.04999999999999716",
        "sk-live-abcdefghijklmnopqrstuvwxyz",
        "password=hunter2",
        "Bearer abcdefghijklmnop",
        JWT,
        "O-5512",
        "2026-12-01T14:33:54Z",
        "+1 415 555 0100",
        "hello",
        ",",
        ".",
        "\n",
        "=",
        ":",
    ]
)


@settings(max_examples=300)
@given(st.lists(_PIECES, max_size=12), st.sampled_from([" ", "", "\t"]))
def test_count_secrets_counts_exactly_what_redact_text_replaces(pieces: list[str], glue: str) -> None:
    text = glue.join(pieces)
    out = redact_text(text)
    count = count_secrets(text)
    assert (count == 0) == (out == text)
    # glued without a space, "password=hunter2,sk-..." is two secrets under one marker
    assert count == out.count(REDACTED) if glue else count >= out.count(REDACTED)
    assert count_secrets(out) == 0
    assert redact_text(out) == out


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("access_token=abcdef123456", ""),
        ("client_secret: s3cr3tvalue", ""),
        ("DB_PASSWORD=hunter2 retrying", " retrying"),
        ("spring.datasource.password=hunter2", ""),
        ("accessToken: abcdef123456", ""),
        ("aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""),
        ('{"password": "hunter 2", "user": "bob"}', ', "user": "bob"}'),
        ('{"api_key":"abc123def456"}', "}"),
        ("passphrase=hunter2", ""),
        ("connect to postgresql://app:hunter2@db:5432/x failed", "@db:5432/x failed"),
        ("Authorization: Basic dXNlcjpodW50ZXIy", ""),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----\nnext", "\nnext"),
    ],
)
def test_secrets_written_as_configuration_json_urls_and_headers_are_redacted(text: str, kept: str) -> None:
    """What a handler's exception or a raw body says: compound and JSON-quoted key names, a
    password in a URL, a Basic credential, a PEM private key."""
    out = redact_text(text)
    assert REDACTED in out and out.endswith(kept)
    for secret in ("abcdef123456", "s3cr3tvalue", "hunter", "wJalrXUtnFEMI", "abc123def456", "dXNlcjpodW50ZXIy", "MIIE"):
        assert secret not in out
    assert count_secrets(text) == out.count(REDACTED)
    assert redact_text(out) == out and count_secrets(out) == 0


def test_secrets_in_keys_tuples_and_structures_under_a_secret_key_are_redacted() -> None:
    """Keys are text the model reads too; a tuple is a list (a streamed chunk may be one); a
    structure under a secret key is secret all through."""
    out = redact(
        {
            "sk-live-abcdefghijklmnopqrstuvwxyz": 1,
            "env": {"password=hunter2": "x"},
            "api_key": {"value": "abc", "rotated": ["def"]},
            "pair": ("password=hunter2", {"password": "hunter2"}),
            "usage": {"total_tokens": 12},
        }
    )
    text = json.dumps(out)
    assert "sk-live" not in text and "hunter2" not in text and "abc" not in text and "def" not in text
    assert out["api_key"] == {"value": REDACTED, "rotated": [REDACTED]}
    assert out["pair"] == [REDACTED, {"password": REDACTED}]
    assert out["usage"] == {"total_tokens": 12}


@pytest.mark.parametrize(
    "text",
    [
        "pa\u017f\u017fword=hunter2",
        "API_\u212aEY: hunter2",
        "TO\u212aEN=hunter2",
        "pr\u0131vate_key=hunter2",
        "SECRET=hunter2",
    ],
)
def test_case_insensitive_keywords_are_found_whatever_letters_spell_them(text: str) -> None:
    """The pattern's ``(?i)`` matches the long s, the Kelvin sign and the dotless i; the cheap
    check before it must find them too."""
    assert "hunter2" not in redact_text(text) and count_secrets(text) == 1


def test_kept_records_lose_personal_data_and_secrets_in_keys_tuples_and_nested_values() -> None:
    out = redact_personal(
        {"ada@example.com": {"note": "password=hunter2"}, "pair": ("ada@example.com",), "secret": {"v": "x"}}
    )
    assert out == {REDACTED: {"note": REDACTED}, "pair": [REDACTED], "secret": {"v": REDACTED}}
