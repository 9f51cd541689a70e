"""What every ``toolgate`` command shares: opening the app, printing facts, authenticating the person.

Every command that acts for a person names them with ``--as`` and proves it with that person's
token in ``TOOLGATE_TOKEN``; `person` is the only way a command gets a `Principal`.
"""

from __future__ import annotations

from typing import Any

import click
import typer
from langchain_core.messages import HumanMessage

from toolgate.config import Settings
from toolgate.graph.bootstrap import App, open_app
from toolgate.policy.admission import Overloaded
from toolgate.policy.principal import Principal
from toolgate.settings import read_settings

TOKEN_ENV = "TOOLGATE_TOKEN"


def open_from_env(*, read_only: bool = False) -> App:
    """The app configured by the environment; ``read_only`` for commands that only look. It is
    closed when the command ends (`closed_at_exit`)."""
    return closed_at_exit(open_app(Settings.from_env(), read_only=read_only))


def closed_at_exit(application: App) -> App:
    """``application``, closed when the running command ends (whatever way it ends), so its
    store's connections are given back by the command, not only by the process's exit."""
    context = click.get_current_context(silent=True)
    if context is not None:
        context.call_on_close(application.close)
    return application


def kv(**facts: Any) -> None:
    """One ``key=value`` line: the CLI's output style, easy to grep and to parse."""
    typer.echo(" ".join(f"{k}={v}" for k, v in facts.items()))


def person(application: App, user_id: str) -> Principal:
    """The authenticated person acting: ``--as`` names them, ``TOOLGATE_TOKEN`` proves it."""
    token = read_settings().token
    return application.gateway.directory.authenticate(user_id, token.get_secret_value() if token else None)


def invoke(graph: Any, payload: Any, config: Any, **kwargs: Any) -> dict[str, Any]:
    """``graph.invoke``, except that a model request refused for load ends the command with
    ``thread=... status=overloaded retry_after_s=...`` and exit code 75 (try again later: the
    thread's checkpoint before the refused request is intact; the same command with
    ``--thread THREAD`` retries it, see `refused_turn_retried`)."""
    try:
        return dict(graph.invoke(refused_turn_retried(graph, payload, config), config, **kwargs))
    except Overloaded as exc:
        thread = config["configurable"]["thread_id"]
        kv(
            thread=thread,
            status="overloaded",
            retry_after_s=exc.retry_after_s,
            kind=exc.kind,
            scope=exc.scope,
        )
        raise typer.Exit(EXIT_OVERLOADED) from None


def refused_turn_retried(graph: Any, payload: Any, config: Any) -> Any:
    """``None`` (continue from the checkpoint) when ``payload`` sends again the message whose model
    request was refused (the thread waits at ``model`` with that message last), so running the
    same ``toolgate run --thread THREAD`` again retries the turn instead of adding a second copy of
    the message; else ``payload``."""
    sent = payload.get("messages") if isinstance(payload, dict) else None
    if not sent or not isinstance(sent[-1], HumanMessage):
        return payload
    snapshot = graph.get_state(config)
    history = snapshot.values.get("messages") or []
    pending = snapshot.next == ("model",) and not getattr(snapshot, "interrupts", ())
    if (
        pending
        and history
        and isinstance(history[-1], HumanMessage)
        and history[-1].content == sent[-1].content
    ):
        return None
    return payload


EXIT_OVERLOADED = 75
"""Exit code of a command refused for load (EX_TEMPFAIL: try again later)."""

__all__ = [
    "EXIT_OVERLOADED",
    "TOKEN_ENV",
    "closed_at_exit",
    "invoke",
    "kv",
    "open_from_env",
    "person",
    "refused_turn_retried",
]
