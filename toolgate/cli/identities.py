"""``toolgate identities``: the people who may act, kept in the store.

An administrator (role ``admin``) of a tenant manages that tenant's identities, authenticated
like everyone else (``--as`` and ``TOOLGATE_TOKEN``). Only on an empty store may a seed file be
imported, or a first identity added, without one: that is how the first administrator exists.
New tokens are printed once; the store keeps only their keyed hashes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from toolgate.cli.common import kv, open_from_env, person
from toolgate.errors import IdentityError
from toolgate.graph.bootstrap import App
from toolgate.policy.principal import Principal
from toolgate.tools.demo.identities import demo_token, seed_demo_identities

identities_app = typer.Typer(no_args_is_help=True, help="Manage the people who may act (admins only).")

AsAdmin = Annotated[
    str | None,
    typer.Option("--as", help="Acting administrator (token in TOOLGATE_TOKEN); omit only on an empty store."),
]


def _admin(application: App, as_user: str | None) -> Principal | None:
    """The authenticated administrator, or None for the bootstrap of an empty store."""
    if as_user is not None:
        return person(application, as_user)
    if application.gateway.directory.is_empty():
        return None
    application.gateway.auditor.record("identity.refused", "refused", code="missing_admin")
    raise IdentityError("this store already has identities: act --as an administrator", code="missing_admin")


def _split(values: str) -> frozenset[str]:
    return frozenset(v.strip() for v in values.split(",") if v.strip())


@identities_app.command("add")
def identities_add(
    user_id: Annotated[str, typer.Argument(help="The new person's user id.")],
    tenant: Annotated[str, typer.Option(help="Tenant the person acts in.")],
    roles: Annotated[str, typer.Option(help="Comma-separated roles, e.g. support,finance.")] = "",
    scopes: Annotated[str, typer.Option(help="Comma-separated scopes, e.g. orders:read.")] = "",
    name: Annotated[str, typer.Option(help="Display name for reviewer screens.")] = "",
    review_tenants: Annotated[
        str, typer.Option(help="Staff reviewers: comma-separated further tenants they review for.")
    ] = "",
    as_user: AsAdmin = None,
) -> None:
    """Add a person and print their token (shown once)."""
    application = open_from_env()
    admin = _admin(application, as_user)
    principal = Principal(
        user_id=user_id,
        tenant_id=tenant,
        roles=_split(roles),
        scopes=_split(scopes),
        display_name=name,
        review_tenants=_split(review_tenants) - {tenant},
    )
    token = application.gateway.directory.add(principal, by=admin)
    if token is None:  # refused like any other: audited with who asked
        application.gateway.auditor.record(
            "identity.refused", "refused", user_id=admin.user_id if admin else None, code="exists"
        )
        raise IdentityError(f"identity {user_id!r} already exists", code="exists")
    kv(identity=user_id, tenant=tenant, roles=",".join(sorted(principal.roles)) or "-", token=token)


@identities_app.command("import")
def identities_import(
    path: Annotated[Path, typer.Argument(help="Seed file (schema_version 1, no tokens).")],
    as_user: AsAdmin = None,
) -> None:
    """Add every identity of a seed file; print each new token once."""
    application = open_from_env(create=True)  # seeding a new store's people may create it
    admin = _admin(application, as_user)
    for user_id, token in application.gateway.directory.import_file(path, by=admin):
        kv(identity=user_id, status="added" if token else "exists", token=token or "-")


@identities_app.command("seed-demo")
def identities_seed_demo() -> None:
    """Add the demo people with their WELL-KNOWN demo tokens (``demo-token-<user>``): for a local
    demo store only, and only while it has no identities yet."""
    application = open_from_env(create=True)
    if not application.gateway.directory.is_empty():
        raise IdentityError("seed-demo works only on a store without identities", code="not_empty")
    seed_demo_identities(application.gateway.directory)
    for record in application.store.identities.list():
        kv(
            identity=record.user_id,
            tenant=record.tenant_id,
            roles=",".join(record.roles) or "-",
            token=demo_token(record.user_id),
        )
    typer.echo("warning=demo tokens are public; never use seed-demo on a store that matters", err=True)


@identities_app.command("list")
def identities_list(
    as_user: Annotated[str, typer.Option("--as", help="Acting administrator (token in TOOLGATE_TOKEN).")],
) -> None:
    """The identities of the administrator's tenant (never their tokens)."""
    application = open_from_env()
    admin = person(application, as_user)
    for record in application.gateway.directory.visible_to(admin):
        kv(
            identity=record.user_id,
            tenant=record.tenant_id,
            roles=",".join(record.roles) or "-",
            scopes=",".join(record.scopes) or "-",
            review_tenants=",".join(record.review_tenants) or "-",
            status=record.status,
            authentic=str(record.authentic).lower(),
        )


@identities_app.command("revoke")
def identities_revoke(
    user_id: Annotated[str, typer.Argument(help="The person to revoke.")],
    as_user: Annotated[str, typer.Option("--as", help="Acting administrator (token in TOOLGATE_TOKEN).")],
) -> None:
    """Revoke a person: they can no longer act, and their pending approvals stop counting."""
    application = open_from_env()
    record = application.gateway.directory.revoke(user_id, by=person(application, as_user))
    kv(identity=record.user_id, status=record.status)


@identities_app.command("set-roles")
def identities_set_roles(
    user_id: Annotated[str, typer.Argument(help="Whose roles to replace.")],
    roles: Annotated[str, typer.Option(help="The complete new comma-separated roles ('' for none).")],
    as_user: Annotated[str, typer.Option("--as", help="Acting administrator (token in TOOLGATE_TOKEN).")],
    scopes: Annotated[
        str | None, typer.Option(help="The complete new comma-separated scopes (unchanged when omitted).")
    ] = None,
) -> None:
    """Replace a person's roles (and scopes); the change is audited with who made it."""
    application = open_from_env()
    record = application.gateway.directory.change_roles(
        user_id,
        roles=_split(roles),
        scopes=None if scopes is None else _split(scopes),
        by=person(application, as_user),
    )
    kv(identity=record.user_id, roles=",".join(record.roles) or "-", scopes=",".join(record.scopes) or "-")


@identities_app.command("rotate-token")
def identities_rotate(
    user_id: Annotated[str, typer.Argument(help="Whose token to replace.")],
    as_user: Annotated[str, typer.Option("--as", help="Acting administrator (token in TOOLGATE_TOKEN).")],
) -> None:
    """Issue a new token (shown once); the old one stops working at once."""
    application = open_from_env()
    token = application.gateway.directory.rotate_token(user_id, by=person(application, as_user))
    kv(identity=user_id, token=token)


__all__ = ["identities_app"]
