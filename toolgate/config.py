"""The resolved configuration of one toolgate process: data directory, store, model, release.

Built from the environment by `Settings.from_env`; every variable it reads is declared, with its
type, default and meaning, in `toolgate.settings` (and listed in the README).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from toolgate.errors import StoreMissingError
from toolgate.key_file import load_secret
from toolgate.settings import DEFAULT_RELEASE, read_settings
from toolgate.store.factory import is_postgres_url

DATA_DIR = Path(".toolgate")
"""The data directory when ``TOOLGATE_DATA_DIR`` is unset (relative to the working directory)."""


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
    model_thinking_tokens: int = 0
    """Extended-thinking budget per turn (``anthropic:`` models; 0: off)."""
    openai_api: str = "responses"
    """``responses`` or ``chat``: the OpenAI API ``openai:`` models use."""
    release: str = DEFAULT_RELEASE
    """Release id."""
    audit_key_value: str | None = field(default=None, repr=False)
    """Explicit store secret (``TOOLGATE_AUDIT_KEY``)."""
    allow_model_requests: bool = True
    """False refuses real provider models."""
    service_signing_key_file: Path | None = None
    """Private key that signs service credentials (``TOOLGATE_SERVICE_SIGNING_KEY_FILE``); None:
    the built-in HS256 tokens."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *, default_data_dir: Path = DATA_DIR) -> Settings:
        """Settings from ``env`` (default: the process environment); ``default_data_dir`` when
        ``TOOLGATE_DATA_DIR`` is unset.

        Raises:
            InvalidSetting: any ``TOOLGATE_*`` variable, also one this object does not hold, has a
                value of the wrong form (`toolgate.settings.read_settings`).
        """
        values = read_settings(env)
        return cls(
            data_dir=(values.data_dir or default_data_dir).expanduser(),
            database_url=values.database_url,
            model=values.model,
            model_base_url=values.model_base_url,
            model_max_tokens=values.model_max_tokens,
            model_thinking_tokens=values.model_thinking_tokens,
            openai_api=values.openai_api,
            release=values.release,
            audit_key_value=values.audit_key.get_secret_value() if values.audit_key else None,
            allow_model_requests=values.allow_model_requests,
            service_signing_key_file=values.service_signing_key_file,
        )

    def audit_key(self, *, create: bool = True) -> bytes:
        """The store's secret: explicit, or generated once into ``data_dir/audit.key`` (mode 0600;
        one secret however many processes start together: `toolgate.key_file`).

        ``create=False`` (read-only commands) refuses to generate one."""
        if self.audit_key_value:
            return self.audit_key_value.encode("utf-8")
        return load_secret(self.data_dir / "audit.key", create=create)

    @property
    def sqlite_path(self) -> Path | None:
        """The embedded store's file (``TOOLGATE_DATABASE_URL=sqlite:///PATH`` or the data
        directory's ``toolgate.sqlite``); None for PostgreSQL."""
        url = self.database_url
        if is_postgres_url(url):
            return None
        if url and url.startswith("sqlite:///"):
            return Path(url[len("sqlite:///") :])
        return self.data_dir / "toolgate.sqlite"

    def require_store(self) -> None:
        """Refuse (`StoreMissingError`) when the store this process is configured for, or the
        secret that opens it, does not exist yet, so that a command run from the wrong directory
        creates nothing. A PostgreSQL database is the operator's to create; its schema is
        migrated by whichever process opens it first.

        Raises:
            StoreMissingError: naming the missing path and the commands that create a store."""
        fix = "run 'toolgate demo' or 'toolgate init' (or set TOOLGATE_DATA_DIR)"
        path = self.sqlite_path
        if path is not None and not path.exists():
            raise StoreMissingError(f"no toolgate store at {path.absolute()}; {fix}")
        key = self.data_dir / "audit.key"
        if not self.audit_key_value and not key.exists():
            if path is not None:  # the store is there and its secret is not: a new one would verify nothing
                raise StoreMissingError(
                    f"no store secret for the store at {path.absolute()} (expected at {key.absolute()}):"
                    " restore that file or set TOOLGATE_AUDIT_KEY to the store's secret"
                )
            raise StoreMissingError(
                f"no store secret at {key.absolute()}: set TOOLGATE_AUDIT_KEY to the store's secret, "
                "or run 'toolgate init' for a new store"
            )


__all__ = ["DATA_DIR", "Settings"]
