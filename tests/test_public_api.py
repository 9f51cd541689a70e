"""The public API: ``toolgate.__all__`` is a reviewed, sorted list of names a tool author and an
embedder need, imported from stable modules only, and the README's "Python API" example runs.

The example below (from ``TARIFFS`` to ``spec``) is the README's example, statement for
statement: `test_readme_example_is_this_module` compares them, so the README cannot drift from
code that runs here.
"""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import Field

import toolgate
from toolgate import ApprovalClass, HandlerContext, NoRollback, StrictArgs, ToolResult, spec_from_function
from toolgate.releases.bundle import NoResources
from toolgate.tools.arguments import ArgumentsInvalid
from toolgate.tools.audit import audit_specs

REPO = Path(__file__).resolve().parent.parent

PUBLIC_API = [
    "REJECTION_CODES",
    "ApprovalClass",
    "ApprovalError",
    "ConfigurationError",
    "Context",
    "HandlerContext",
    "IdentityError",
    "NoRollback",
    "NotFoundError",
    "Principal",
    "Registry",
    "RegistryError",
    "RejectionCode",
    "Release",
    "ReleaseEnv",
    "ResourceRef",
    "ResourceStatus",
    "Rollback",
    "RunRefused",
    "StoreError",
    "StrictArgs",
    "ToolExecutionError",
    "ToolResult",
    "ToolSpec",
    "ToolgateError",
    "ToolgateRuntimeError",
    "ToolgateUsageError",
    "build_gateway",
    "build_graph",
    "spec_from_function",
]
"""The reviewed list: adding or removing a name is an API change, made here and in the README."""

STABLE_SOURCES = frozenset(
    {
        "toolgate.errors",
        "toolgate.graph",
        "toolgate.policy",
        "toolgate.tools",
        "toolgate.releases.bundle",
        "toolgate.tools.spec",
        "toolgate.tools.shapes.thirdparty",
    }
)
"""The only modules ``toolgate/__init__.py`` may import from: their names are kept across
module splits and renames."""

INTERNAL = frozenset(
    {
        "operation_key",  # derived by the gateway from the call; never computed by an author
        "canonical_json",  # the frozen encoding behind stored digests
        "digest",
        "idempotency_key_for",
        "Settings",  # TOOLGATE_* configuration of the CLI and server; embedders pass objects
        "GatewayState",  # checkpointed, sealed state: written only by the graph's own nodes
        "Gateway",  # what build_gateway returns; built, never constructed
        "Executor",
        "Delivery",
        "INSTRUCTIONS",
        "InvalidTransitionError",  # the store's state machine, caught inside toolgate
        "STATE_CODES",
        "spec_problems",
        "identity_problems",
        "parse_tool_definition",
        "to_structured_tool",
    }
)
"""Helpers and internals that must not be exported from the top level."""


# --- the README's "Python API" example (statement for statement) --------------------------------

TARIFFS = {"acme": 450}  # cents per kilogram, per tenant


class QuoteArgs(StrictArgs):
    weight_grams: int = Field(gt=0, le=30_000, description="Parcel weight in grams.")
    express: bool = False


class Quote(ToolResult):
    price_cents: int
    currency: str


def shipping_quote(weight_grams: int, express: bool = False, *, ctx: HandlerContext) -> Quote:
    """Quote the price of shipping one parcel for the customer's account. Changes nothing."""
    per_kg = TARIFFS.get(ctx.tenant_id, 500)  # the tenant comes from the session, never from arguments
    return Quote(price_cents=weight_grams * per_kg // 1000 + (900 if express else 0), currency="EUR")


spec = spec_from_function(
    shipping_quote,
    args_model=QuoteArgs,
    result_model=Quote,
    version="1.0.0",
    owner="shipping-team",
    risk="read-only",
    effect="None: computes a quote from the tariff table.",
    timeout_s=5,
    max_output_bytes=1_000,
    approval=ApprovalClass.none(),
    required_scopes=frozenset({"shipping:read"}),
    handler_revision="shipping-quote/1.0.0",
    rollback=NoRollback("a quote changes nothing"),
)

# --- end of the README example ------------------------------------------------------------------


def _isort_key(name: str) -> tuple[int, str]:
    """Ruff's RUF022 order: SCREAMING_CASE constants, then CamelCase, then everything else."""
    group = 0 if len(name) > 1 and name.isupper() else 1 if name[:1].isupper() else 2
    return group, name


def _readme_section() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert "\n## Python API\n" in text, "README.md has no '## Python API' section"
    return text.split("\n## Python API\n", 1)[1].split("\n## ", 1)[0]


def _readme_example() -> str:
    blocks = re.findall(r"^```python\n(.*?)^```", _readme_section(), flags=re.S | re.M)
    assert len(blocks) == 1, "the Python API section holds exactly one python block"
    return blocks[0]


def test_all_is_sorted_and_unique() -> None:
    assert toolgate.__all__ == sorted(toolgate.__all__, key=_isort_key)
    assert len(set(toolgate.__all__)) == len(toolgate.__all__)


def test_all_is_the_reviewed_list() -> None:
    assert toolgate.__all__ == PUBLIC_API


def test_every_name_imports() -> None:
    namespace: dict[str, object] = {}
    exec("from toolgate import *", namespace)
    for name in toolgate.__all__:
        assert getattr(toolgate, name, None) is not None, name
        assert namespace[name] is getattr(toolgate, name), name


def test_no_internal_or_private_names() -> None:
    assert not INTERNAL & set(toolgate.__all__)
    for name in toolgate.__all__:
        assert not name.startswith("_"), name
        value = getattr(toolgate, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            module = value.__module__
            assert module.split(".")[0] == "toolgate", f"{name} comes from {module}"
            private = [part for part in module.split(".") if part.startswith("_")]
            assert not private, f"{name} is defined in the private module {module}"


def test_init_imports_from_stable_modules_only() -> None:
    """Each public name is imported on first use from the module `_EXPORTS` maps it to; that map,
    the type checkers' imports beside it and ``__all__`` name the same names from the same
    stable modules."""
    tree = ast.parse(Path(toolgate.__file__).read_text(encoding="utf-8"))
    typed: dict[str, str] = {}
    plumbing: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            plumbing.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0 and node.module, ast.unparse(node)
            if node.module in {"typing", "toolgate.lazy_exports", "toolgate.moved_modules"}:
                plumbing.add(node.module)
                continue
            typed.update({alias.asname or alias.name: node.module for alias in node.names})
    assert plumbing == {"typing", "toolgate.lazy_exports", "toolgate.moved_modules"}
    exports = toolgate._EXPORTS  # type: ignore[attr-defined]
    assert exports == typed
    assert set(exports.values()) <= STABLE_SOURCES, sorted(set(exports.values()) - STABLE_SOURCES)
    assert sorted(exports) == sorted(toolgate.__all__)


def test_readme_lists_every_exported_name() -> None:
    prose = re.sub(r"^```.*?^```", "", _readme_section(), flags=re.S | re.M)
    named = set(re.findall(r"\w+", " ".join(re.findall(r"`([^`]+)`", prose))))
    missing = [name for name in toolgate.__all__ if name not in named]
    assert not missing, f"the README's Python API section does not mention {missing}"


def test_readme_example_is_this_module() -> None:
    here = {ast.unparse(node) for node in ast.parse(Path(__file__).read_text(encoding="utf-8")).body}
    for node in ast.parse(_readme_example()).body:
        assert ast.unparse(node) in here, f"README example statement not in this test:\n{ast.unparse(node)}"


def test_readme_example_runs_as_written() -> None:
    namespace: dict[str, object] = {"__name__": "readme_example"}
    exec(compile(_readme_example(), "README.md (Python API)", "exec"), namespace)
    assert isinstance(namespace["spec"], toolgate.ToolSpec)


def test_the_example_is_a_valid_read_only_tool() -> None:
    assert isinstance(spec, toolgate.ToolSpec)
    assert (spec.name, spec.wire_name, spec.is_write) == ("shipping_quote", "shipping_quote", False)
    assert spec.description == inspect.getdoc(shipping_quote)
    schema = spec.contract.json_schema()
    assert set(schema["properties"]) == {"weight_grams", "express"}  # never ctx

    arguments = spec.parse_arguments({"weight_grams": 2000})
    assert arguments == {"weight_grams": 2000, "express": False}
    result = spec.handler(spec.handler_arguments(arguments), HandlerContext(tenant_id="acme", user_id="ada"))
    assert result == Quote(price_cents=900, currency="EUR")
    for bad in ({"weight_grams": 2000, "tenant_id": "other"}, {"weight_grams": "2000"}, {"weight_grams": 0}):
        with pytest.raises(ArgumentsInvalid):
            spec.parse_arguments(bad)


def test_the_example_passes_the_registry_audit() -> None:
    registry = toolgate.Registry.of("shipping-tools/1.0.0", [spec], NoResources())
    report = audit_specs(registry.release, lambda: list(registry.tools.values()))
    print("\n".join(report.lines()))
    assert report.passed, report.defects
    assert (report.tool_count, report.dynamic_handlers, report.generic_executors) == (1, 0, 0)
    assert (report.timeouts, report.owners, report.policy_bindings, report.rollback_statements) == (
        1,
        1,
        1,
        1,
    )


def test_a_write_without_approval_is_refused() -> None:
    with pytest.raises(toolgate.RegistryError) as refused:
        spec_from_function(
            shipping_quote,
            args_model=QuoteArgs,
            result_model=Quote,
            version="1.0.0",
            owner="shipping-team",
            risk="caution",
            effect="Books a shipment.",
            timeout_s=5,
            max_output_bytes=1_000,
            approval=ApprovalClass.none(),
            required_scopes=frozenset({"shipping:write"}),
            handler_revision="shipping-quote/1.0.0",
            rollback=NoRollback("a booked shipment is cancelled by the carrier"),
        )
    assert "write_without_approval" in {code for code, _ in refused.value.problems}


def test_the_store_and_the_errors_import_without_the_graph_stack() -> None:
    """``import toolgate.store`` (a migration script, a worker's child process) runs the package's
    ``__init__`` first: it must not bring LangGraph, LangChain or LangSmith with it, nor must the
    store itself (its checkpointers are imported when one is opened)."""
    probe = (
        "import sys, toolgate.errors, toolgate.store\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'langgraph', 'langchain_core', 'langsmith'})\n"
        "print(heavy)\n"
        "from toolgate import ToolSpec, build_graph\n"
        "print(ToolSpec.__module__, build_graph.__module__)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.splitlines() == ["[]", "toolgate.tools.spec toolgate.graph.builder"], out.stderr


TESTING_KIT = [
    "Delivery",
    "HandlerCounter",
    "ModelRequest",
    "ReviewOutcome",
    "ScriptedChatModel",
    "ShiftableClock",
    "TEST_MODEL",
    "TEST_SECRET",
    "UnexpectedModelCallError",
    "ai",
    "deliver",
    "open_test_app",
    "review",
    "store_with_people",
    "tool_call",
]
"""The reviewed public test kit (`toolgate.testing`): an integrator's harness needs no other name."""


def test_the_testing_kit_is_the_reviewed_list() -> None:
    import toolgate.testing

    assert sorted(toolgate.testing.__all__) == sorted(TESTING_KIT)


def test_an_integrator_harness_runs_a_write_with_public_names_only(tmp_path: Path) -> None:
    """A store with people, a proposal through the graph, a reviewer's decision and a worker
    delivery: the whole life of a write with `toolgate` and `toolgate.testing` names only."""
    from langchain_core.messages import HumanMessage

    from toolgate import Context, Principal
    from toolgate.policy import PolicyRules
    from toolgate.testing import (
        ScriptedChatModel,
        ai,
        deliver,
        open_test_app,
        review,
        store_with_people,
        tool_call,
    )
    from toolgate.tools.shapes.definitions import from_openai
    from toolgate.tools.shapes.operator_policy import OperatorPolicy

    sent: list[dict[str, object]] = []
    requester = Principal(user_id="ann", tenant_id="acme", scopes=frozenset({"mail:send"}))
    reviewer = Principal(user_id="rev", tenant_id="acme", roles=frozenset({"mail-reviewer"}))
    policy = OperatorPolicy(
        risk="caution",
        owner="mail",
        scopes=frozenset({"mail:send"}),
        approval=ApprovalClass.role("mail-reviewer"),
        effect="Sends one email.",
        rollback=NoRollback("a sent email cannot be recalled"),
        timeout_s=10,
    )
    definition = {
        "name": "send_email",
        "description": "Send an email.",
        "parameters": {"type": "object", "properties": {"to": {"type": "string", "maxLength": 80}}},
    }
    spec = from_openai(definition, lambda **arguments: sent.append(arguments) or "sent", policy)
    store = store_with_people([requester, reviewer], path=tmp_path / "kit.sqlite", key=b"k" * 32)
    try:
        model = ScriptedChatModel(responses=[ai("", tool_call("send_email", {"to": "bo@example.com"}, "c1"))])
        rules = PolicyRules(policy_version="t", sha256="0" * 64, approval_minutes=15, rules=())
        app = open_test_app(tools=[spec], policy=rules, model=model, store=store, start=False)
        paused = app.compiled().invoke(
            {"messages": [HumanMessage("mail bo")]},
            {"configurable": {"thread_id": "t-kit"}},
            context=Context(principal=requester),
        )
        proposal = paused["__interrupt__"][0].value["toolgate"]["proposals"][0]
        assert review(app, proposal["proposal_id"], reviewer, "approve").verdict.status == "approved"
        first = deliver(app, proposal["operation_key"])
        again = deliver(app, proposal["operation_key"])
        assert (first.status, first.duplicate, again.duplicate) == ("succeeded", False, True)
        assert sent == [{"to": "bo@example.com"}]
    finally:
        store.close()
