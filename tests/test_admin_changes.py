"""Administrative changes name their actor (issue 15, item 2): a role change is audited with the
administrator and the roles before and after; only an administrator of the person's own tenant
may make it, a tampered identity row is never re-signed, and applying audit retention (which
deletes every tenant's payloads) needs an all-tenant auditor. SQLite and PostgreSQL, through the
real CLI."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support import cli_env, kv_lines, open_test_store, seed_people, toolgate

from toolgate.store import Store
from toolgate.store.audit import Auditor

pytestmark = pytest.mark.slow


@pytest.fixture
def env_and_store(tmp_path: Path, database_url: str | None) -> Iterator[tuple[dict[str, str], Store]]:
    seed_people(tmp_path, database_url)
    store = open_test_store(tmp_path, database_url)
    yield cli_env(tmp_path, database_url), store
    store.close()


def _events(store: Store, name: str) -> list[tuple[str | None, str | None, dict[str, object]]]:
    """(result, actor, detail) of every ``name`` event, in order."""
    return [(e.result, e.actor_id, e.detail) for e in store.audit.events() if e.event == name]


def test_a_role_change_is_audited_with_its_actor_and_both_sets_of_roles(
    env_and_store: tuple[dict[str, str], Store],
) -> None:
    env, store = env_and_store
    before = store.identities.get("rita")
    assert before is not None and "finance" not in before.roles
    changed = toolgate(
        [
            "identities",
            "set-roles",
            "rita",
            "--roles",
            "support,finance",
            "--scopes",
            "orders:read",
            "--as",
            "ivy",
        ],
        env,
    )
    assert kv_lines(changed.stdout) == [
        {"identity": "rita", "roles": "finance,support", "scopes": "orders:read"}
    ]
    after = store.identities.get("rita")
    assert after is not None and after.authentic and after.roles == ("finance", "support")
    auditor = Auditor(store, "x")
    [(result, actor, detail)] = _events(store, "identity.roles_changed")
    assert (result, actor) == ("active", auditor.actor("ivy"))
    assert detail["identity"] == auditor.actor("rita") and detail["tenant_id"] == "acme"
    assert (detail["roles_before"], detail["roles"]) == (list(before.roles), ["finance", "support"])
    assert (detail["scopes_before"], detail["scopes"]) == (list(before.scopes), ["orders:read"])
    exported = toolgate(["audit", "export", "--as", "audrey"], env).stdout
    assert '"event": "identity.roles_changed"' in exported  # the tenant's auditor sees the change


@pytest.mark.parametrize(
    ("acting", "token", "code"),
    [
        ("ivy", "", "missing_token"),  # no credential
        ("ivy", "demo-token-rita", "authentication_failed"),  # someone else's token
        ("rita", None, "not_admin"),  # authentic, but not an administrator
        ("glen", None, "not_admin"),  # another tenant's person
    ],
)
def test_a_role_change_without_an_administrators_credential_changes_nothing(
    env_and_store: tuple[dict[str, str], Store], acting: str, token: str | None, code: str
) -> None:
    env, store = env_and_store
    if token is not None:
        env = {**env, "TOOLGATE_TOKEN": token}
    before = store.identities.get("fiona")
    refused = toolgate(
        ["identities", "set-roles", "fiona", "--roles", "admin", "--as", acting], env, check=False
    )
    assert refused.returncode == 2 and refused.stderr.startswith(f"error={code} "), refused.stderr
    assert store.identities.get("fiona") == before
    assert _events(store, "identity.roles_changed") == []
    assert [e.code for e in store.audit.events() if e.event == "identity.refused"][-1] == code


def test_a_tenant_administrator_cannot_grant_every_tenants_evidence(
    env_and_store: tuple[dict[str, str], Store],
) -> None:
    env, store = env_and_store
    refused = toolgate(
        ["identities", "set-roles", "audrey", "--roles", "auditor:all", "--as", "ivy"], env, check=False
    )
    assert refused.returncode == 2 and refused.stderr.startswith("error=cross_tenant "), refused.stderr
    audrey = store.identities.get("audrey")
    assert audrey is not None and audrey.roles == ("auditor",)


def test_a_tampered_identity_row_is_not_re_signed_by_a_role_change(
    env_and_store: tuple[dict[str, str], Store],
) -> None:
    env, store = env_and_store
    with store.transaction() as tx:  # an attacker with database access makes rita an administrator
        tx.execute("UPDATE identities SET roles = ? WHERE user_id = ?", ('["admin", "support"]', "rita"))
    refused = toolgate(
        ["identities", "set-roles", "rita", "--roles", "support", "--as", "ivy"], env, check=False
    )
    assert refused.returncode == 2 and "forged_identity" in refused.stderr, refused.stderr
    rita = store.identities.get("rita")
    assert rita is not None and not rita.authentic  # still refused everywhere, never laundered
    assert _events(store, "identity.roles_changed") == []


def test_retention_needs_an_all_tenant_auditor_and_names_them(
    env_and_store: tuple[dict[str, str], Store],
) -> None:
    env, store = env_and_store
    no_token = {k: v for k, v in env.items() if k != "TOOLGATE_TOKEN"}
    for args, case_env, code in (
        (["audit", "retention"], no_token, "missing_token"),
        (
            ["audit", "retention", "--as", "otto"],
            {**env, "TOOLGATE_TOKEN": "demo-token-audrey"},
            "authentication_failed",
        ),
        (["audit", "retention", "--as", "audrey"], env, "not_all_tenants"),  # one tenant's auditor
        (["audit", "retention", "--as", "ivy"], env, "not_auditor"),
    ):
        refused = toolgate(args, case_env, check=False)
        assert refused.returncode == 2 and refused.stderr.startswith(f"error={code} "), (args, refused.stderr)
    assert _events(store, "audit.retention_applied") == []
    applied = toolgate(["audit", "retention", "--older-than-days", "0", "--as", "otto"], env)
    assert kv_lines(applied.stdout)[0]["tamper_check"] == "PASS"
    [(result, actor, detail)] = _events(store, "audit.retention_applied")
    assert (result, actor, detail["older_than_days"]) == ("applied", Auditor(store, "x").actor("otto"), 0.0)


def test_adding_a_user_id_that_exists_is_refused_and_audited(env_and_store: tuple[dict[str, str], Store]) -> None:
    """An administrator's add of a user id that exists (of their tenant or another's: user ids
    are one namespace) is a refusal like the others: exit 2, ``exists``, audited with its actor,
    the existing row untouched."""
    env, store = env_and_store
    before = store.identities.get("gina")
    refused = toolgate(
        ["identities", "add", "gina", "--tenant", "acme", "--roles", "finance", "--as", "ivy"], env, check=False
    )
    assert refused.returncode == 2 and refused.stderr.startswith("error=exists "), refused.stderr
    assert store.identities.get("gina") == before
    last = [e for e in store.audit.events() if e.event == "identity.refused"][-1]
    assert (last.code, last.actor_id) == ("exists", Auditor(store, "x").actor("ivy"))
