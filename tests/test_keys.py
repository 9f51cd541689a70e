"""The store's keyring: MACs from a prepared key state are the standard HMAC-SHA256."""

from __future__ import annotations

import hmac
import threading
from typing import Any

import pytest

from toolgate.errors import ConfigurationError
from toolgate.store.keys import Keyring, hmac_sha256


@pytest.mark.parametrize("key_bytes", [16, 32, 63, 64, 65, 200])
@pytest.mark.parametrize("message", [b"", b"a", bytes(range(256)) * 3, b"x" * 5000])
def test_a_prepared_key_gives_the_standard_hmac(key_bytes: int, message: bytes) -> None:
    key = bytes((7 * n + 3) % 256 for n in range(key_bytes))  # keys past one block are hashed first
    assert hmac_sha256(key, message) == hmac.digest(key, message, "sha256")


def test_keyring_macs_are_hmac_sha256_under_each_purpose_key() -> None:
    keys = Keyring(b"a store secret of 32 bytes......")
    text = '{"key":"messages","thread":"t-1","v":"5"}'
    assert keys.mac_text("state", text) == hmac.digest(keys.key("state"), text.encode(), "sha256").hex()
    assert (
        keys.mac("proposal", {"b": 1.0, "a": "é"})
        == hmac.digest(keys.key("proposal"), '{"a":"é","b":1}'.encode(), "sha256").hex()
    )
    assert keys.mac_text("state", text) != keys.mac_text("approval", text)  # one key per purpose
    assert keys.verify("proposal", {"a": 1}, keys.mac("proposal", {"a": 1}))
    assert not keys.verify("approval", {"a": 1}, keys.mac("proposal", {"a": 1}))


def test_threads_sharing_a_prepared_key_each_get_their_own_mac() -> None:
    keys = Keyring(b"a store secret of 32 bytes......")
    expected = {n: hmac.digest(keys.key("state"), str(n).encode(), "sha256").hex() for n in range(400)}
    start, got, lock = threading.Barrier(4), {}, threading.Lock()

    def work(offset: int) -> None:
        start.wait()
        for n in range(offset, 400, 4):
            mac = keys.mac_text("state", str(n))
            with lock:
                got[n] = mac

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == expected


def test_a_short_secret_is_refused() -> None:
    with pytest.raises(ConfigurationError):
        Keyring(b"short")


def test_a_stored_row_is_judged_once_and_a_changed_byte_or_mac_is_judged_afresh() -> None:
    """`Keyring.verify_row` remembers its answer per row as stored and MAC: the same row read
    again costs no MAC; a row changed in any column, a copied MAC, or another purpose is judged
    again, and answers as `verify` does."""
    keys = Keyring(b"a store secret of 32 bytes......")
    made: list[str] = []

    def value_of(row: tuple[tuple[str, str], ...]) -> Any:
        made.append(dict(row)["amount"])
        return dict(row)

    row = (("id", "p1"), ("amount", "100"))
    mac = keys.mac("proposal", dict(row))
    assert keys.verify_row("proposal", row, mac, lambda: value_of(row)) is True
    assert keys.verify_row("proposal", row, mac, lambda: value_of(row)) is True
    assert made == ["100"]  # judged once
    changed = (("id", "p1"), ("amount", "900"))
    assert keys.verify_row("proposal", changed, mac, lambda: value_of(changed)) is False
    assert keys.verify_row("proposal", changed, mac, lambda: value_of(changed)) is False
    assert keys.verify_row("proposal", row, None, lambda: value_of(row)) is False  # no MAC
    assert keys.verify_row("proposal", row, "0" * 64, lambda: value_of(row)) is False
    assert keys.verify_row("approval", row, mac, lambda: value_of(row)) is False  # another purpose
    assert made == ["100", "900", "100", "100", "100"]
    other = Keyring(b"another secret of 32 bytes......")
    assert other.verify_row("proposal", row, mac, lambda: value_of(row)) is False  # another key
    unhashable = (("id", "p1"), ("amount", ["100"]))
    assert keys.verify_row("proposal", unhashable, mac, lambda: {"id": "p1", "amount": "100"}) is True


def test_the_rows_judged_are_bounded_and_forget_the_least_recently_used_first() -> None:
    from toolgate.store.keys import VerifiedRows

    rows = VerifiedRows()
    for n in range(VerifiedRows.SIZE):
        rows.put(n, True)
    assert rows.get(0) is True  # used: now the most recent
    rows.put("new", False)
    assert rows.get(1) is None and rows.get(0) is True and rows.get("new") is False
    assert len(rows._items) == VerifiedRows.SIZE
