"""Settings from the environment. Every variable toolgate reads is listed here (and in the README).

| variable | default | meaning |
| --- | --- | --- |
| TOOLGATE_DATA_DIR | ./.toolgate | where embedded SQLite files and the store secret (audit.key) live |
| TOOLGATE_DATABASE_URL | (unset: SQLite in the data dir) | ``postgresql://...`` for PostgreSQL, or ``sqlite:///PATH`` |
| TOOLGATE_MODEL | offline | ``offline`` (deterministic demo model) or ``provider:model``, e.g. ``openai:gpt-4.1-mini`` |
| TOOLGATE_MODEL_BASE_URL | (unset) | base URL of an OpenAI-compatible endpoint |
| TOOLGATE_MODEL_MAX_TOKENS | 800 | bound on the model's output tokens per turn |
| TOOLGATE_RELEASE | ops-tools/1.1.0 | tool release to load (ops-tools/1.0.0 is the refund-only bundle) |
| TOOLGATE_AUDIT_KEY | (generated into DATA_DIR/audit.key) | the store's secret (16+ bytes): every MAC, token hash |
| TOOLGATE_TOKEN | (unset) | the acting person's token (``run``, ``approve``, ``identities``, ...) |
| TOOLGATE_ALLOW_MODEL_REQUESTS | 1 | ``0`` refuses to construct a real provider model (tests set it) |
| TOOLGATE_MAX_MODEL_TURNS, TOOLGATE_MAX_TOOL_CALLS | 24, 40 | task budgets (kept by each thread from its start) |
| TOOLGATE_MAX_CALLS_PER_TURN | 32 | calls judged in one model turn; the rest are refused as one batch |
| TOOLGATE_CLAIM_LEASE_S, TOOLGATE_DUPLICATE_WAIT_S | 60, 30 | claim lease; wait of a duplicate for the stored result |
| TOOLGATE_DEADLINE_S, TOOLGATE_MAX_VALIDATION_RETRIES, TOOLGATE_MAX_IDENTICAL_CALLS | 300, 2, 2 | task limits |
| TOOLGATE_RECONCILE_DELAYS | 1,2,4,8,16 | waits between status checks of an unknown outcome |
| TOOLGATE_MAX_PARALLEL_CALLS, TOOLGATE_BATCH_DEADLINE_S | 5, 120 | parallel batch limits |
| TOOLGATE_AUDIT_RETENTION_DAYS | 90 | default age for ``toolgate audit retention`` |
| TOOLGATE_WAKER_INTERVAL_S | 2 | the server's background waker (``0``: off) |
| OPENAI_API_KEY | (unset) | read by langchain-openai when TOOLGATE_MODEL names an OpenAI model; never logged |
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from toolgate.errors import ConfigurationError
from toolgate.tools.registry import DEFAULT_RELEASE


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Resolved configuration of one toolgate process."""

    data_dir: Path
    """Directory for embedded data (created on demand)."""
    database_url: str | None = field(default=None, repr=False)
    """PostgreSQL or SQLite URL; None means SQLite in ``data_dir`` (repr hides credentials)."""
    model: str = "offline"
    """``offline`` or ``provider:model``."""
    model_base_url: str | None = None
    """OpenAI-compatible endpoint override."""
    model_max_tokens: int = 800
    """Output token bound per model turn."""
    release: str = DEFAULT_RELEASE
    """Release id."""
    audit_key_value: str | None = field(default=None, repr=False)
    """Explicit store secret (``TOOLGATE_AUDIT_KEY``)."""
    allow_model_requests: bool = True
    """False refuses real provider models."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Settings from ``env`` (default: the process environment)."""
        env = os.environ if env is None else env
        data_dir = Path(env.get("TOOLGATE_DATA_DIR") or ".toolgate").expanduser()
        try:
            max_tokens = int(env.get("TOOLGATE_MODEL_MAX_TOKENS", "800"))
        except ValueError as exc:
            raise ConfigurationError("TOOLGATE_MODEL_MAX_TOKENS must be an integer") from exc
        return cls(
            data_dir=data_dir,
            database_url=env.get("TOOLGATE_DATABASE_URL") or None,
            model=env.get("TOOLGATE_MODEL") or "offline",
            model_base_url=env.get("TOOLGATE_MODEL_BASE_URL") or None,
            model_max_tokens=max_tokens,
            release=env.get("TOOLGATE_RELEASE") or DEFAULT_RELEASE,
            audit_key_value=env.get("TOOLGATE_AUDIT_KEY") or None,
            allow_model_requests=env.get("TOOLGATE_ALLOW_MODEL_REQUESTS", "1") != "0",
        )

    def audit_key(self, *, create: bool = True) -> bytes:
        """The store's secret: explicit, or generated once into ``data_dir/audit.key`` (mode 0600).

        ``create=False`` (read-only commands) refuses to generate one."""
        if self.audit_key_value:
            return self.audit_key_value.encode("utf-8")
        path = self.data_dir / "audit.key"
        if not path.exists() and not create:
            raise ConfigurationError(f"no store secret: set TOOLGATE_AUDIT_KEY or create {path}")
        if not path.exists():
            self.data_dir.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                pass  # another process created it first
            else:
                with os.fdopen(fd, "w") as handle:
                    handle.write(secrets.token_hex(32))
        return path.read_bytes().strip()


__all__ = ["Settings"]
