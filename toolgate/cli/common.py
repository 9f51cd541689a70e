"""What every ``toolgate`` command shares: opening the app, printing facts, authenticating the person.

Every command that acts for a person names them with ``--as`` and proves it with that person's
token in ``TOOLGATE_TOKEN``; `person` is the only way a command gets a `Principal`.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import typer

from toolgate.cli.lines import kv_line
from toolgate.errors import IdentityError, InvalidFilter

if TYPE_CHECKING:  # the gateway stack is imported by the commands that open it, never by --help
    from toolgate.graph.bootstrap import App
    from toolgate.policy.principal import Principal
    from toolgate.store.base import Store

TOKEN_ENV = "TOOLGATE_TOKEN"


def open_from_env(*, read_only: bool = False, create: bool = False) -> App:
    """The app configured by the environment; ``read_only`` for commands that only look. It is
    closed when the command ends (`closed_at_exit`).

    Only a command that creates a store on purpose passes ``create`` (``toolgate init``, seeding
    an empty store's people); any other refuses with ``store_missing`` when the configured store
    or its secret does not exist (`Settings.require_store`), and creates nothing."""
    from toolgate.config import Settings
    from toolgate.graph.bootstrap import open_app

    settings = Settings.from_env()
    if not create:
        settings.require_store()
    return closed_at_exit(open_app(settings, read_only=read_only))


@contextmanager
def open_store_from_env() -> Iterator[Store]:
    """The configured store alone, read-only, closed on leaving: for commands that only list
    records (``proposals list``), which need no release, model or graph. Refused
    ``store_missing`` like `open_from_env`."""
    from toolgate.config import Settings
    from toolgate.store.factory import open_store

    settings = Settings.from_env()
    settings.require_store()
    key = settings.audit_key(create=False)
    store = open_store(settings.database_url, settings.data_dir, key=key, read_only=True)
    try:
        yield store
    finally:
        store.close()


_opened: list[App] = []
"""Apps the running command opened, closed by `close_opened` when it ends."""


def closed_at_exit(application: App) -> App:
    """``application``, closed when the running command ends (whatever way it ends: `main` calls
    `close_opened`), so its store's connections are given back by the command, not only by the
    process's exit. (It was handed to click's context, which Typer 0.29's vendored click never
    had current here: nothing was ever closed.)"""
    _opened.append(application)
    return application


def close_opened() -> None:
    """Close every app the command opened, newest first; a failing close does not stop the others."""
    while _opened:
        try:
            _opened.pop().close()
        except Exception:
            continue


def checked_filter(option: str, value: str | None, valid: Sequence[str]) -> str | None:
    """``value`` of a list command's filter ``option`` when it is one of ``valid`` (or unset);
    anything else is refused `InvalidFilter` naming the valid values (and the closest one), so a
    misspelt filter never reads as "nothing matches"."""
    if value is None or value in valid:
        return value
    close = difflib.get_close_matches(value, valid, n=1, cutoff=0.5)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise InvalidFilter(f"{option} {value!r} is not one of {', '.join(valid)}{hint}")


def kv(**facts: Any) -> None:
    """One ``key=value`` line: the CLI's output style, easy to grep and to parse; values escaped
    (`toolgate.cli.lines`), so no value can start a line or a fact of its own."""
    typer.echo(kv_line(**facts))


def person(application: App, user_id: str) -> Principal:
    """The authenticated person acting: ``--as`` names them, ``TOOLGATE_TOKEN`` proves it.

    A store with nobody in it is refused ``no_identities`` with the likely fix (the wrong data
    directory, or people not imported yet) rather than a bare ``authentication_failed``."""
    from toolgate.settings import read_settings

    directory = application.gateway.directory
    if directory.is_empty():
        raise IdentityError(NO_IDENTITIES, code="no_identities")
    token = read_settings().token
    return directory.authenticate(user_id, token.get_secret_value() if token else None)


def signed_in(application: App, as_user: str | None, command: str, needs: str) -> Principal:
    """The person a command acts for, proven: ``--as USER`` with that person's ``TOOLGATE_TOKEN``,
    or the token alone (its holder). Neither is refused ``missing_token`` (``needs``: what for),
    audited ``identity.refused`` naming ``command``; a wrong or revoked token is refused, and
    audited, by the directory."""
    from toolgate.settings import read_settings

    token = read_settings().token
    secret = token.get_secret_value() if token else None
    directory = application.gateway.directory
    if as_user is None and not secret:
        application.gateway.auditor.record(
            "identity.refused", "refused", code="missing_token", detail={"command": command}
        )
        raise IdentityError(f"{needs}: --as USER with that person's {TOKEN_ENV}", code="missing_token")
    return directory.authenticate(as_user, secret) if as_user else directory.authenticate_bearer(secret)


NO_IDENTITIES = (
    "this store has no people yet: point TOOLGATE_DATA_DIR at the store you meant (the demo's is "
    ".toolgate/demo), or add people with 'toolgate identities import FILE' "
    "(or 'toolgate identities seed-demo' for a local demo)"
)
"""What a command acting for a person says on a store without identities."""


def invoke(graph: Any, payload: Any, config: Any, **kwargs: Any) -> dict[str, Any]:
    """``graph.invoke``, except that a model request refused for load ends the command with
    ``thread=... status=overloaded retry_after_s=...`` and exit code 75 (try again later: the
    thread's checkpoint before the refused request is intact; the same command with
    ``--thread THREAD`` retries it, see `refused_turn_retried`)."""
    from toolgate.policy.admission import Overloaded

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
    from langchain_core.messages import HumanMessage

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
    "NO_IDENTITIES",
    "TOKEN_ENV",
    "checked_filter",
    "close_opened",
    "closed_at_exit",
    "invoke",
    "kv",
    "open_from_env",
    "open_store_from_env",
    "person",
    "refused_turn_retried",
]
