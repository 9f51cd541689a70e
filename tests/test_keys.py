"""The store's keyring: MACs from a prepared key state are the standard HMAC-SHA256."""

from __future__ import annotations

import hmac
import threading

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
