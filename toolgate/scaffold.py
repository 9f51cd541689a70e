"""``toolgate release init NAME``: a new release package with one read and one write tool.

The generated package is the shortest complete path from a function to an approved execution:
two typed functions (`toolgate.tools.shapes.from_function`) over a small system of record kept in
the toolgate store, the operator policy of each (risk, approval, ownership), the release's
``policy.json``, its reviewed ``manifest.json`` (written here, from the generated code), a seed
file of people, and a test that passes as generated. Nothing in it is toolgate-internal: it uses
only the public API a team's own package would.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from string import Template

from toolgate.errors import ConfigurationError

_NAME = re.compile(r"^[a-z][a-z0-9-]{1,48}[a-z0-9]$")

PYPROJECT = """\
[build-system]
requires = ["setuptools>=69"]
build-backend = "setuptools.build_meta"

[project]
name = "$name"
version = "0.1.0"
description = "The $name tool release for toolgate."
requires-python = ">=3.11"
dependencies = ["langgraph-toolgate"]

[project.optional-dependencies]
dev = ["pytest>=8"]

# installed, the release is found by id: TOOLGATE_RELEASE=$name/0.1.0
[project.entry-points."toolgate.releases"]
"$name/0.1.0" = "$package.release:release"

[tool.setuptools.package-data]
$package = ["*.json"]

[tool.pytest.ini_options]
pythonpath = ["."]
testpaths = ["tests"]
"""

README = """\
# $name: a toolgate release

Two tools behind toolgate's gate: `get_ticket` (a read) and `close_ticket` (a write that a
support reviewer approves before it runs, exactly once). Tickets live in a small system of record
in the toolgate store; a customer reaches only their own tickets, support staff any ticket of
their tenant.

    $package/tools.py      the functions and their operator policy
    $package/records.py    the system of record (tables, ownership)
    $package/release.py    the Release value toolgate loads
    $package/policy.json   business rules and rate limits (pinned by the manifest)
    $package/manifest.json the reviewed hashes; startup refuses a bundle that drifted from it
    identities.json        the people of the example (tokens are issued at import)
    tests/                 a test of the whole path, passing as generated

## Run it

    export TOOLGATE_RELEASE=$$PWD/$package/release.py:release   # or $name/0.1.0 once pip-installed
    export TOOLGATE_DATA_DIR=$$PWD/.toolgate
    toolgate registry audit                   # audit=PASS, manifest=MATCH
    toolgate identities import identities.json   # prints each person's token, once
    TOOLGATE_TOKEN=<ada's token> toolgate run --as ada 'call close_ticket {"ticket_id": "T-100", "resolution": "fixed"}'
    TOOLGATE_TOKEN=<sam's token> toolgate approve <proposal> --as sam
    toolgate resume <thread>
    pytest                                    # the generated test

Change a tool, then `toolgate registry manifest --beside` and review the diff of
`manifest.json`: it is what pins the code, schemas and policy you serve.
"""

INIT = '''\
"""The $name tool release for toolgate."""
'''

RECORDS = '''\
"""The system of record of $name: support tickets, each owned by one customer of one tenant.

Kept in the toolgate store (its own tables, migrated by `setup`); handlers query it with fixed
SQL and bound parameters, never with text a model wrote.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toolgate.errors import ToolExecutionError
from toolgate.store import Migration, Store
from toolgate.tools import HandlerContext, ResourceStatus
from toolgate.tools.spec import ownership

_SCHEMA = """
CREATE TABLE ${package}_tickets (
    ticket_id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    customer_id TEXT NOT NULL,
    title TEXT NOT NULL,
    status TEXT NOT NULL,
    resolution TEXT
);
CREATE TABLE ${package}_closures (
    idempotency_key TEXT PRIMARY KEY,
    ticket_id TEXT NOT NULL
)"""

MIGRATIONS = (Migration(name="tickets", sqlite=_SCHEMA, postgres=_SCHEMA),)

SEED = (
    ("T-100", "acme", "ada", "Blender arrived broken"),
    ("T-101", "acme", "bob", "Invoice address is wrong"),
)


def setup(store: Store) -> None:
    """Create the tables and the example tickets (idempotent)."""
    store.migrate("$package", MIGRATIONS)
    with store.transaction() as tx:
        for ticket_id, tenant_id, customer_id, title in SEED:
            tx.execute(
                "INSERT INTO ${package}_tickets (ticket_id, tenant_id, customer_id, title, status)"
                " VALUES (?, ?, ?, ?, 'open') ON CONFLICT DO NOTHING",
                (ticket_id, tenant_id, customer_id, title),
            )


@dataclass(frozen=True)
class Tickets:
    """Typed access to the tickets."""

    store: Store

    def ownership(self, ticket_id: str, ctx: HandlerContext) -> ResourceStatus:
        """Whose ticket this is, for the authenticated tenant and user (checked by toolgate at
        dispatch and again right before execution)."""
        with self.store.transaction(write=False) as tx:
            row = tx.one("SELECT tenant_id, customer_id FROM ${package}_tickets WHERE ticket_id = ?", (ticket_id,))
        return ownership(row, ctx.tenant_id, ctx.user_id, owner_column="customer_id")

    def get(self, tenant_id: str, ticket_id: str) -> dict[str, Any]:
        """One ticket of the tenant, or a caller error."""
        with self.store.transaction(write=False) as tx:
            row = tx.one(
                "SELECT ticket_id, title, status FROM ${package}_tickets WHERE tenant_id = ? AND ticket_id = ?",
                (tenant_id, ticket_id),
            )
        if row is None:
            raise ToolExecutionError("caller_error", f"no ticket {ticket_id} for this account")
        return dict(row)

    def close(self, tenant_id: str, ticket_id: str, resolution: str, idempotency_key: str) -> dict[str, Any]:
        """Close a ticket once per idempotency key (a redelivery changes nothing)."""
        with self.store.transaction() as tx:
            done = tx.execute(
                "INSERT INTO ${package}_closures (idempotency_key, ticket_id) VALUES (?, ?)"
                " ON CONFLICT DO NOTHING RETURNING ticket_id",
                (idempotency_key, ticket_id),
            )
            if done:
                tx.execute(
                    "UPDATE ${package}_tickets SET status = 'closed', resolution = ? WHERE tenant_id = ? AND ticket_id = ?",
                    (resolution, tenant_id, ticket_id),
                )
        return self.get(tenant_id, ticket_id)

    def closures(self) -> int:
        """How many closures the system performed (tests count effects here)."""
        with self.store.transaction(write=False) as tx:
            row = tx.one("SELECT COUNT(*) AS n FROM ${package}_closures", ())
        return int(row["n"]) if row else 0
'''

TOOLS = '''\
"""The tools of $name: plain typed functions, each with the operator policy that makes it safe.

The model sees each function's name, docstring and typed parameters. It never sees ``ctx``:
identity (tenant and user) comes from the authenticated session through `HandlerContext`, never
from arguments. Risk, approval, timeout, ownership and rollback are the operator's decisions,
stated here and pinned by the release manifest.
"""

from __future__ import annotations

from toolgate.tools import ApprovalClass, HandlerContext, NoRollback, ResourceRef, ToolSpec
from toolgate.tools.release import ReleaseEnv
from toolgate.tools.shapes import OperatorPolicy, from_function
from toolgate.tools.spec import ToolResult

from $package.records import Tickets

SUPPORT = frozenset({"support"})
"""Staff who may act on any customer's ticket of their own tenant (and review writes)."""


class Ticket(ToolResult):
    """What the tools return about a ticket (only these fields reach the model)."""

    ticket_id: str
    title: str
    status: str


def specs(env: ReleaseEnv) -> list[ToolSpec]:
    """The release's tools, bound to the system of record in ``env``'s store."""
    tickets = Tickets(env.store)

    def get_ticket(ticket_id: str, ctx: HandlerContext) -> Ticket:
        """Read one of the customer's support tickets by id (e.g. 'T-100'): title and status.
        Changes nothing."""
        return Ticket(**tickets.get(ctx.tenant_id, ticket_id))

    def close_ticket(ticket_id: str, resolution: str, ctx: HandlerContext) -> Ticket:
        """Propose closing one of the customer's tickets with a short resolution note. A support
        reviewer approves it before it runs; until then the result says pending_approval."""
        closed = tickets.close(ctx.tenant_id, ticket_id, resolution, ctx.require_idempotency_key())
        return Ticket(**closed)

    def ticket(conflict: bool) -> ResourceRef:
        return ResourceRef(
            kind="ticket", argument="ticket_id", conflict=conflict, owner=tickets.ownership, staff_roles=SUPPORT
        )

    return [
        from_function(
            get_ticket,
            OperatorPolicy(
                risk="read-only",
                owner="$name",
                scopes=frozenset({"tickets:read"}),
                resource=ticket(conflict=False),
                audit_fields=frozenset({"ticket_id"}),
            ),
        ),
        from_function(
            close_ticket,
            OperatorPolicy(
                risk="caution",
                owner="$name",
                scopes=frozenset({"tickets:write"}),
                approval=ApprovalClass.role("support"),
                effect="Closes the ticket and records the resolution; the customer sees it as closed.",
                rollback=NoRollback("a closed ticket is re-opened by a new ticket, not by undoing this one"),
                timeout_s=10,
                resource=ticket(conflict=True),
                audit_fields=frozenset({"ticket_id"}),
            ),
        ),
    ]
'''

RELEASE = '''\
"""The $name release: its tools, system of record, policy and reviewed manifest, as one value.

toolgate loads it from ``TOOLGATE_RELEASE`` (``path/to/$package/release.py:release``, or
``$name/0.1.0`` once the package is installed); ``policy.json`` and ``manifest.json`` live beside
this file.
"""

from __future__ import annotations

from pathlib import Path

from toolgate.tools.release import Release

from $package import records, tools

release = Release.from_directory(
    Path(__file__).resolve().parent,
    id="$name/0.1.0",
    tools=tools.specs,
    setup=records.setup,
)
'''

POLICY = {
    "schema_version": 1,
    "policy_version": "0.1.0",
    "approval_minutes": 30,
    "rules": [],
    "rate_limits": {"per_principal_tool": {"limit": 60, "window_s": 3600}},
}

IDENTITIES = {
    "schema_version": 1,
    "identities": [
        {
            "user_id": "ada",
            "tenant_id": "acme",
            "roles": ["customer"],
            "scopes": ["tickets:read", "tickets:write"],
            "display_name": "Ada (customer)",
        },
        {
            "user_id": "bob",
            "tenant_id": "acme",
            "roles": ["customer"],
            "scopes": ["tickets:read", "tickets:write"],
            "display_name": "Bob (customer)",
        },
        {
            "user_id": "sam",
            "tenant_id": "acme",
            "roles": ["support", "admin"],
            "scopes": ["tickets:read"],
            "display_name": "Sam (support, administrator)",
        },
    ],
}

TEST = '''\
"""The whole path of $name, from a proposed call to an approved, once-only execution."""

from __future__ import annotations

import json
from pathlib import Path

from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from toolgate.graph.bootstrap import initialize_store, release_manifest
from toolgate.graph import Context, build_gateway, build_graph
from toolgate.graph.review import decide
from toolgate.policy.identities import IdentityDirectory, load_seed_file
from toolgate.store import SQLiteStore
from toolgate.testing import ScriptedChatModel, ai, tool_call
from toolgate.tools.manifest import manifest_drift
from toolgate.tools.release import ReleaseEnv

from $package.records import Tickets
from $package.release import release

SECRET = b"$package-test-secret-0000"
PEOPLE = {p.user_id: p for p in load_seed_file(Path(__file__).resolve().parent.parent / "identities.json")}


def gateway_for(tmp_path: Path, model: ScriptedChatModel):  # type: ignore[no-untyped-def]
    store = SQLiteStore(tmp_path / "toolgate.sqlite", key=SECRET)
    initialize_store(store, release)
    directory = IdentityDirectory(store)
    for person in PEOPLE.values():
        directory.add(person, by=None)
    registry = release.registry(ReleaseEnv(store, secret=SECRET))
    return build_gateway(model=model, registry=registry, policy=release.policy, store=store), store


def answers(state: dict) -> dict:  # type: ignore[type-arg]
    return {m.tool_call_id: json.loads(str(m.content)) for m in state["messages"] if isinstance(m, ToolMessage)}


def test_the_manifest_matches_the_code() -> None:
    store = SQLiteStore("unused.sqlite", key=SECRET)  # never connected
    effective = release_manifest(release, release.registry(ReleaseEnv(store, secret=SECRET)))
    assert manifest_drift(release.reviewed_manifest(), effective) == []


def test_a_write_runs_once_after_approval_and_never_for_another_customer(tmp_path: Path) -> None:
    model = ScriptedChatModel(
        responses=[
            ai(
                "",
                tool_call("get_ticket", {"ticket_id": "T-100"}, "read"),
                tool_call("close_ticket", {"ticket_id": "T-100", "resolution": "replaced"}, "close"),
                tool_call("get_ticket", {"ticket_id": "T-101"}, "other"),
            ),
            ai("Your ticket will be closed once support approves."),
        ]
    )
    gateway, store = gateway_for(tmp_path, model)
    graph = build_graph(gateway=gateway, checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t-1"}}
    waiting = graph.invoke({"messages": [HumanMessage("close T-100")]}, config, context=Context(principal=PEOPLE["ada"]))
    proposal = waiting["__interrupt__"][0].value["toolgate"]["proposals"][0]
    assert proposal["tool"] == "close_ticket" and Tickets(store).closures() == 0

    decide(gateway, proposal["proposal_id"], PEOPLE["sam"], "approve")
    done = graph.invoke(Command(resume={"wake": True}), config, context=Context())
    got = answers(done)
    assert got["read"]["status"] == "completed"
    assert got["other"]["error"] == "not_owner"  # bob's ticket, refused before any handler ran
    assert Tickets(store).closures() == 1
    assert Tickets(store).get("acme", "T-100")["status"] == "closed"
    # the same approved operation delivered again makes no second effect
    gateway.executor.deliver(proposal["operation_key"], worker_id="again")
    assert Tickets(store).closures() == 1
'''


def package_name(name: str) -> str:
    """The Python package of release ``name`` (``acme-tools`` -> ``acme_tools``)."""
    return name.replace("-", "_")


def scaffold(name: str, parent: Path) -> Path:
    """Write the release package ``name`` under ``parent``; returns its directory.

    Refuses a name that is not a lowercase distribution name, and an existing directory (nothing
    is overwritten). The reviewed manifest is then computed from the generated code and written
    beside the release."""
    if not _NAME.match(name):
        raise ConfigurationError(f"release name {name!r} must match {_NAME.pattern} (e.g. acme-tools)")
    root = parent / name
    if root.exists():
        raise ConfigurationError(f"{root} already exists; refusing to overwrite it")
    package = package_name(name)
    values = {"name": name, "package": package}
    files = {
        "pyproject.toml": PYPROJECT,
        "README.md": README,
        f"{package}/__init__.py": INIT,
        f"{package}/records.py": RECORDS,
        f"{package}/tools.py": TOOLS,
        f"{package}/release.py": RELEASE,
        f"tests/test_{package}.py": TEST,
    }
    for relative, template in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(Template(template).substitute(values), encoding="utf-8")
    _write_json(root / package / "policy.json", POLICY)
    _write_json(root / "identities.json", IDENTITIES)
    return root


def _write_json(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


__all__ = ["package_name", "scaffold"]
