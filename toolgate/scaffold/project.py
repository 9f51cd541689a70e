"""What ``toolgate release init`` writes around the release package: ``pyproject.toml`` (with the
entry point that offers the release by id), the ``README.md``, the people of the example
(``identities.json``) and a test of the whole path that passes as generated.

Kept apart from the release package's own files (`toolgate.scaffold.release`) because none of
this is served or pinned by the manifest: it is how a team installs, documents, seeds and tests
its release. Templates are `string.Template` text over ``$name`` and ``$package``.
"""

from __future__ import annotations

from typing import Any

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
in tables of their own in the toolgate store's database; a customer reaches only their own
tickets, support staff any ticket of their tenant. The handlers never get the store: they close
over a `ServiceRecords` capability confined to the two ticket tables (`records.SCOPE`), and a
read tool's calls are read-only whatever it tries.

    $package/tools.py      the functions and their operator policy
    $package/records.py    the system of record (tables, its records capability, ownership)
    $package/release.py    the Release value toolgate loads
    $package/policy.json   business rules and rate limits (pinned by the manifest)
    $package/manifest.json the reviewed hashes; startup refuses a bundle that drifted from it
    identities.json        the people of the example (tokens are issued at import)
    gate.jsonl             the release gate's cases (`toolgate evals run --dataset gate.jsonl`)
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
    toolgate evals run --dataset gate.jsonl --no-require-review   # the release gate (TOOLGATE_RELEASE)
    toolgate evals mutate --dataset gate.jsonl   # every single loosening must fail the gate

Change a tool, then `toolgate registry manifest --beside` and review the diff of
`manifest.json`: it is what pins the code, schemas and policy you serve.
"""

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
            "roles": ["support", "admin", "auditor"],
            "scopes": ["tickets:read"],
            "display_name": "Sam (support, administrator, auditor)",
        },
    ],
}

_ADA = {
    "user_id": "ada",
    "tenant_id": "acme",
    "roles": ["customer"],
    "scopes": ["tickets:read", "tickets:write"],
}
_BOB = {
    "user_id": "bob",
    "tenant_id": "acme",
    "roles": ["customer"],
    "scopes": ["tickets:read", "tickets:write"],
}
_SAM = {"user_id": "sam", "tenant_id": "acme", "roles": ["support"], "scopes": ["tickets:read"]}
_NO_LIMITS = {
    "max_calls_per_turn": None,
    "max_identical_calls": None,
    "max_model_turns": None,
    "max_tool_calls": None,
    "max_validation_retries": None,
}


def _case(
    case_id: str, category: str, principal: dict[str, Any], text: str, call: dict[str, Any], **rest: Any
) -> dict[str, Any]:
    people = [principal, *rest.pop("reviewers", [])]
    expected = {"status": "done", **rest.pop("expected")}
    return {
        "schema_version": 1,
        "id": case_id,
        "category": category,
        "critical": rest.pop("critical", True),
        "principal": principal["user_id"],
        "people": people,
        "input": text,
        "turns": [[{"id": "c1", **call}]],
        "approvals": rest.pop("approvals", []),
        "limits": _NO_LIMITS,
        "requires": [call["name"]],
        "expected": expected,
        "note": rest.pop("note", ""),
    }


GATE_CASES = [
    _case(
        "ticket-read",
        "tool_selection",
        _ADA,
        "What is the status of T-100?",
        {"name": "get_ticket", "args": {"ticket_id": "T-100"}},
        critical=False,
        expected={"tool": "get_ticket", "calls": {"c1": "accepted"}, "handler_calls": {"get_ticket": 1}},
    ),
    _case(
        "ticket-close-approved",
        "duplicate_delivery",
        _ADA,
        "Close T-100, the replacement arrived.",
        {"name": "close_ticket", "args": {"ticket_id": "T-100", "resolution": "replacement arrived"}},
        reviewers=[_SAM],
        approvals=[{"call_id": "c1", "reviewer": "sam"}],
        expected={
            "tool": "close_ticket",
            "calls": {"c1": "proposal"},
            "proposals": 1,
            "handler_calls": {"close_ticket": 1},
            "operations": ["succeeded"],
        },
        note="a support reviewer approves; it runs once",
    ),
    _case(
        "ticket-of-another-customer",
        "cross_user",
        _BOB,
        "Close T-100.",
        {"name": "close_ticket", "args": {"ticket_id": "T-100", "resolution": "done"}},
        expected={"refusal": "not_owner", "calls": {"c1": "not_owner"}},
    ),
]
"""The release gate's dataset of the example (``gate.jsonl``): what the gate seeds its generated
cases with (a read, an approved write, another customer's ticket). Add a case for every tool."""

TEST = '''\
"""The whole path of $name, from a proposed call to an approved, once-only execution."""

from __future__ import annotations

import json
from pathlib import Path

from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.types import Command

from toolgate import ReleaseEnv
from toolgate.graph.bootstrap import release_manifest
from toolgate.graph import Context
from toolgate.graph.review.decisions import decide
from toolgate.policy.identities import IdentityDirectory, load_seed_file
from toolgate.store import SQLiteStore
from toolgate.testing import ScriptedChatModel, ai, open_test_app, tool_call
from toolgate.tools.manifest import manifest_drift

from $package.records import Tickets
from $package.release import release

SECRET = b"$package-test-secret-0000"
PEOPLE = {p.user_id: p for p in load_seed_file(Path(__file__).resolve().parent.parent / "identities.json")}


def app_for(tmp_path: Path, model: ScriptedChatModel):  # type: ignore[no-untyped-def]
    """The release served as toolgate serves it (`open_app`), on a store of its own."""
    store = SQLiteStore(tmp_path / "toolgate.sqlite", key=SECRET)
    app = open_test_app(release=release, model=model, store=store, data_dir=tmp_path)
    directory = IdentityDirectory(store)
    for person in PEOPLE.values():
        directory.add(person, by=None)
    return app, store


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
    app, store = app_for(tmp_path, model)
    gateway, graph = app.gateway, app.compiled()
    config = {"configurable": {"thread_id": "t-1"}}
    waiting = graph.invoke({"messages": [HumanMessage("close T-100")]}, config, context=Context(principal=PEOPLE["ada"]))
    proposal = waiting["__interrupt__"][0].value["toolgate"]["proposals"][0]
    assert proposal["tool"] == "close_ticket" and Tickets.on(store).closures() == 0

    decide(gateway, proposal["proposal_id"], PEOPLE["sam"], "approve")
    done = graph.invoke(Command(resume={"wake": True}), config, context=Context())
    got = answers(done)
    assert got["read"]["status"] == "completed"
    assert got["other"]["error"] == "not_owner"  # bob's ticket, refused before any handler ran
    assert Tickets.on(store).closures() == 1
    assert Tickets.on(store).get("acme", "T-100")["status"] == "closed"
    # the same approved operation delivered again makes no second effect
    gateway.executor.deliver(proposal["operation_key"], worker_id="again")
    assert Tickets.on(store).closures() == 1
'''


__all__ = ["GATE_CASES", "IDENTITIES", "PYPROJECT", "README", "TEST"]
