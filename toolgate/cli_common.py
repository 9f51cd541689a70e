"""What every ``toolgate`` command shares: opening the app, printing facts, authenticating the person.

Every command that acts for a person names them with ``--as`` and proves it with that person's
token in ``TOOLGATE_TOKEN``; `person` is the only way a command gets a `Principal`.
"""

from __future__ import annotations

from typing import Any

import typer

from toolgate.config import Settings
from toolgate.graph.bootstrap import App, open_app
from toolgate.policy.principal import Principal
from toolgate.settings import read_settings

TOKEN_ENV = "TOOLGATE_TOKEN"


def open_from_env(*, read_only: bool = False) -> App:
    """The app configured by the environment; ``read_only`` for commands that only look."""
    return open_app(Settings.from_env(), read_only=read_only)


def kv(**facts: Any) -> None:
    """One ``key=value`` line: the CLI's output style, easy to grep and to parse."""
    typer.echo(" ".join(f"{k}={v}" for k, v in facts.items()))


def person(application: App, user_id: str) -> Principal:
    """The authenticated person acting: ``--as`` names them, ``TOOLGATE_TOKEN`` proves it."""
    token = read_settings().token
    return application.gateway.directory.authenticate(user_id, token.get_secret_value() if token else None)


__all__ = ["TOKEN_ENV", "kv", "open_from_env", "person"]
