"""``toolgate deadletter``: the people's queue of operations whose outcome nobody could determine
(the rules of settling one are `toolgate.graph.delivery.dead_letters`)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from toolgate.cli.common import kv, open_from_env, person
from toolgate.graph.delivery.dead_letters import resolve_dead_letter

deadletter_app = typer.Typer(no_args_is_help=True, help="Operations whose outcome needs a person.")


@deadletter_app.command("list")
def deadletter_list(
    all_: Annotated[bool, typer.Option("--all", help="Include resolved ones.")] = False,
) -> None:
    """Operations waiting for a person, with the context to decide."""
    application = open_from_env(read_only=True)
    for letter in application.store.operations.dead_letters(open_only=not all_):
        kv(
            operation_key=letter.operation_key,
            created_at=letter.created_at,
            reason=json.dumps(letter.reason),
            tool=letter.context.get("tool"),
            resolution=letter.resolution or "open",
            context=json.dumps(letter.context, sort_keys=True),
        )


@deadletter_app.command("resolve")
def deadletter_resolve(
    operation_key: str,
    outcome: Annotated[str, typer.Option(help="succeeded or failed, as verified in the system of record.")],
    as_user: Annotated[str, typer.Option("--as", help="Reviewer (token in TOOLGATE_TOKEN).")],
    note: Annotated[str, typer.Option(help="Evidence for the decision (e.g. the payment id found).")],
) -> None:
    """Record a person's verified outcome for a dead-lettered operation (once; never by its requester)."""
    application = open_from_env()
    reviewer = person(application, as_user)
    settled = resolve_dead_letter(application.gateway, reviewer, operation_key, outcome, note)
    kv(operation_key=operation_key, resolution=outcome, reviewer=as_user, status=settled.status)


__all__ = ["deadletter_app"]
