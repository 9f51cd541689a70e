"""The toolgate of one LangGraph server process, built once and shared by its three entry points.

``langgraph.json`` names three objects the server imports separately: the graph
(`toolgate.graph.server.app:graph`), the auth handler (`toolgate.graph.server.auth:auth`) and the HTTP routes
of the approval API and reviewer console (`toolgate.graph.server.http:app`). All three use the one
`App` built here by the same bootstrap as the CLI and the worker (`toolgate.graph.bootstrap.open_app`),
from the same ``TOOLGATE_*`` environment: one store (and its secret), one verified release, one
gateway. Nothing connects at import: the store opens, migrates and records the release on first
use.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from toolgate.config import Settings
from toolgate.graph.bootstrap import App, open_app
from toolgate.telemetry.otel_env import configure_from_env

SERVER_DATA_DIR = Path(".toolgate") / "server"
"""Where the server keeps its embedded data unless ``TOOLGATE_DATA_DIR`` says otherwise: apart from
the CLI's ``.toolgate`` so demo runs of one never change the other. Point both at one directory
(or one PostgreSQL database) to let the CLI review the server's proposals."""


@cache
def server_parts() -> App:
    """The toolgate of this server process (built on first use, then shared).

    Raises:
        InvalidSetting: a ``TOOLGATE_*`` variable has a value of the wrong form; its message is one
            line naming the variable and the form it expects, and nothing was opened.
    """
    settings = Settings.from_env(default_data_dir=SERVER_DATA_DIR)
    configure_from_env()  # OTEL_* variables: the server's spans and metrics to an OTLP endpoint
    return open_app(settings, server_mode=True)


__all__ = ["SERVER_DATA_DIR", "server_parts"]
