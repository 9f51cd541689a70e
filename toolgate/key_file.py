"""The generated store secret file (``audit.key``): made once, whole, however many processes start.

Several processes may start at the same moment on a fresh data directory (`make demo` beside a
worker, four ``toolgate worker run``). Each must end with the same secret: two secrets would make
one process's MACs, token hashes and audit links fail for every other. The file is therefore
never visible half written: a process writes a complete secret to a private temporary file and
publishes it with ``link``, which fails when the name already exists. The process that lost the
race reads the winner's secret. A file that exists but is still empty (written in place by an
older toolgate, or on a file system without hard links) is waited for briefly, then refused.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from toolgate.errors import ConfigurationError

KEY_WAIT_S = 10.0
"""How long a process waits for another to finish writing an empty ``audit.key``."""


def new_secret() -> str:
    """A fresh secret: 32 random bytes, hex."""
    return secrets.token_hex(32)


def publish_secret(path: Path) -> None:
    """Create ``path`` holding a new secret (mode 0600) unless it exists: whole or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    secret = new_secret()
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # mode 0600
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(secret)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(temporary, path)  # atomic, and refused when another process published first
        except FileExistsError:
            pass
        except OSError:  # no hard links here: create it exclusively (readers wait while it is empty)
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
            with contextlib.suppress(FileExistsError), os.fdopen(os.open(path, flags, 0o600), "w") as handle:
                handle.write(secret)
    finally:
        os.unlink(temporary)


def read_secret(
    path: Path,
    *,
    wait_s: float = KEY_WAIT_S,
    poll_s: float = 0.02,
    sleep: Callable[[float], None] = time.sleep,
) -> bytes:
    """The secret in ``path``; an empty file is waited for up to ``wait_s``, then refused."""
    deadline = time.monotonic() + wait_s
    while True:
        secret = path.read_bytes().strip()
        if secret:
            return secret
        if time.monotonic() > deadline:
            raise ConfigurationError(
                f"{path} is empty: remove it (a new secret is generated) or set TOOLGATE_AUDIT_KEY"
            )
        sleep(poll_s)


def load_secret(path: Path, *, create: bool) -> bytes:
    """The secret in ``path``, generated first when missing and ``create`` (one for every process)."""
    if not path.exists():
        if not create:
            raise ConfigurationError(f"no store secret: set TOOLGATE_AUDIT_KEY or create {path}")
        publish_secret(path)
    return read_secret(path)


__all__ = ["KEY_WAIT_S", "load_secret", "new_secret", "publish_secret", "read_secret"]
