"""The registry's operating fields on `ToolSpec`: cost estimate, per-tool rate limit, deprecation.

A wrong or incomplete value refuses registration with its own problem code. The per-tool limit is
a store window keyed by the tool, shared by every principal and every store instance on the
database: the N+1th call is refused ``rate_limited`` and audited. A deprecated tool is callable
during its window (the model is told, the call is audited as using a deprecated tool) and refused
``tool_deprecated`` after it, on the store's clock whatever the process clock says.
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from support import TEST_KEY, Harness, audit_events, principal, start

from toolgate.errors import REJECTION_CODES, RegistryError
from toolgate.policy.ratelimit import InboundRateLimiter
from toolgate.policy.rules import RateLimits
from toolgate.store import PostgresStore, SQLiteStore, Store
from toolgate.testing import ScriptedChatModel, ai, open_test_app, tool_call
from toolgate.tools import Registry
from toolgate.tools.audit import audit_specs
from toolgate.tools.manifest import tool_fingerprint
from toolgate.tools.spec import CostEstimate, Deprecation, ToolRateLimit, ToolSpec

LOOKUP = {"order_id": "O-5512"}


def with_spec(harness: Harness, name: str, **fields: Any) -> Registry:
    """``harness``'s registry with tool ``name`` given ``fields``."""
    specs = [replace(s, **fields) if n == name else s for n, s in harness.registry.tools.items()]
    return Registry.of(harness.registry.release, specs, harness.system)


def run(harness: Harness, registry: Registry, user: str, thread: str, clock: Any = None) -> dict[str, Any]:
    """One task: ``user``'s model calls lookup_order once, then answers. Returns the call's answer."""
    model = ScriptedChatModel(responses=[ai("", tool_call("lookup_order", LOOKUP, f"{thread}-c")), ai("ok")])
    extra = {"clock": clock} if clock is not None else {}
    app = open_test_app(
        model=model, tools=registry, policy=harness.policy, store=harness.store, **extra, start=False
    )
    state = start(app.compiled(checkpointer=InMemorySaver()), "x", user, thread)
    [answer] = [json.loads(m.content) for m in state["messages"] if getattr(m, "tool_call_id", None)]
    return answer


# ---- registration -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"cost_estimate": CostEstimate(-1, "usd")}, "invalid_cost_estimate"),
        ({"cost_estimate": CostEstimate(float("nan"), "usd")}, "invalid_cost_estimate"),
        ({"cost_estimate": CostEstimate(0.01, "")}, "invalid_cost_estimate"),
        ({"cost_estimate": CostEstimate(0.01, "US Dollars")}, "invalid_cost_estimate"),
        ({"cost_estimate": 0.01}, "invalid_cost_estimate"),
        ({"rate_limit": ToolRateLimit(0, 60)}, "invalid_rate_limit"),
        ({"rate_limit": ToolRateLimit(5, 0)}, "invalid_rate_limit"),
        ({"rate_limit": ToolRateLimit(True, 60)}, "invalid_rate_limit"),
        ({"rate_limit": ToolRateLimit(5, 10**6)}, "invalid_rate_limit"),
        ({"rate_limit": (5, 60)}, "invalid_rate_limit"),
        ({"deprecation": Deprecation(datetime(2030, 1, 1), timedelta(days=30))}, "invalid_deprecation"),
        ({"deprecation": Deprecation(datetime(2030, 1, 1, tzinfo=UTC), timedelta(0))}, "invalid_deprecation"),
        ({"deprecation": Deprecation(None, timedelta(days=1))}, "invalid_deprecation"),  # type: ignore[arg-type]
        (
            {"deprecation": Deprecation(datetime(2030, 1, 1, tzinfo=UTC), timedelta(days=1), "lookup_order")},
            "invalid_deprecation",
        ),
        ({"deprecation": "2030-01-01"}, "invalid_deprecation"),
        # a NaN or infinite timeout is no timeout at all; True is not a byte limit
        ({"timeout_s": float("nan")}, "missing_timeout"),
        ({"timeout_s": float("inf")}, "missing_timeout"),
        ({"timeout_s": "30"}, "missing_timeout"),
        ({"max_output_bytes": True}, "missing_output_limit"),
        ({"max_output_bytes": 4096.5}, "missing_output_limit"),
    ],
)
def test_a_missing_or_wrong_field_refuses_registration(
    harness: Harness, fields: dict[str, Any], code: str
) -> None:
    lookup: ToolSpec = harness.registry.tools["lookup_order"]
    with pytest.raises(RegistryError) as refused:
        replace(lookup, **fields)
    assert [c for c, _ in refused.value.problems] == [code]


def test_the_fields_are_in_the_manifest_the_inventory_and_what_the_model_is_told(harness: Harness) -> None:
    since = datetime(2030, 1, 1, tzinfo=UTC)
    registry = with_spec(
        harness,
        "lookup_order",
        cost_estimate=CostEstimate(0.002, "usd"),
        rate_limit=ToolRateLimit(30, 60),
        deprecation=Deprecation(since, timedelta(days=30), replacement="find_order"),
    )
    spec = registry.tools["lookup_order"]
    pinned = tool_fingerprint(spec)
    assert pinned["cost_estimate"] == {"amount": 0.002, "unit": "usd"}
    assert pinned["rate_limit"] == {"limit": 30, "window_s": 60}
    assert pinned["deprecation"]["sunset_at"] == "2030-01-31T00:00:00+00:00"
    assert (
        pinned["metadata_sha256"]
        != tool_fingerprint(harness.registry.tools["lookup_order"])["metadata_sha256"]
    )
    report = audit_specs(registry.release, lambda: list(registry.tools.values()))
    [line] = [line for line in report.inventory if line.startswith("tool=lookup_order ")]
    assert line.endswith(
        " cost=0.002usd/call rate_limit=30/60s deprecated_since=2030-01-01T00:00:00+00:00"
        " sunset_at=2030-01-31T00:00:00+00:00"
    )
    [told] = registry.openai_tools([spec])
    assert told["function"]["description"].startswith(
        "DEPRECATED until 2030-01-31T00:00:00+00:00; use find_order instead. "
    )
    assert "tool_deprecated" in REJECTION_CODES


# ---- the per-tool rate limit --------------------------------------------------------------------


def test_the_tool_window_refuses_the_n_plus_first_call_across_two_store_instances(
    store: Store, request: pytest.FixtureRequest
) -> None:
    other: Store = (  # another process on the same database
        SQLiteStore(store.path, key=TEST_KEY)
        if isinstance(store, SQLiteStore)
        else PostgresStore(request.getfixturevalue("pg_migrated_url"), key=TEST_KEY)
    )
    first, second = InboundRateLimiter(store, RateLimits()), InboundRateLimiter(other, RateLimits())
    per_tool = ToolRateLimit(limit=3, window_s=3600)
    ada, gina = principal("cust-ada"), principal("cust-gina")
    assert first.check(ada, "lookup_order", per_tool) is None
    assert second.check(gina, "lookup_order", per_tool) is None
    assert first.check(ada, "issue_refund", per_tool) is None  # another tool: another window
    assert second.peek(gina, "lookup_order", per_tool) is None  # a peek counts nothing
    assert first.check(ada, "lookup_order", per_tool) is None  # the third
    refused = second.check(gina, "lookup_order", per_tool)
    assert refused is not None and (refused.code, refused.retryable) == ("rate_limited", True)
    assert first.check(ada, "lookup_order") is None  # a tool without a limit of its own is not counted
    assert store.counters.value("tool:lookup_order", 3600) == 4
    other.close()


def test_the_tool_window_holds_under_concurrent_calls_from_two_store_instances(
    store: Store, request: pytest.FixtureRequest
) -> None:
    """Eight callers released together by a barrier, four on each store instance: exactly the
    limit's three get through."""
    other: Store = (
        SQLiteStore(store.path, key=TEST_KEY)
        if isinstance(store, SQLiteStore)
        else PostgresStore(request.getfixturevalue("pg_migrated_url"), key=TEST_KEY)
    )
    limiters = [InboundRateLimiter(store, RateLimits()), InboundRateLimiter(other, RateLimits())]
    per_tool = ToolRateLimit(limit=3, window_s=3600)
    users = ["cust-ada", "cust-gina", "rita", "omar"] * 2
    barrier = threading.Barrier(len(users))

    def call(i: int) -> str | None:
        barrier.wait(timeout=30)
        refused = limiters[i % 2].check(principal(users[i]), "lookup_order", per_tool)
        return None if refused is None else refused.code

    with ThreadPoolExecutor(max_workers=len(users)) as pool:
        codes = list(pool.map(call, range(len(users))))
    assert sorted(codes, key=str) == [None] * 3 + ["rate_limited"] * 5
    other.close()


def test_the_tool_window_refuses_through_the_graph_and_is_audited(harness: Harness) -> None:
    registry = with_spec(harness, "lookup_order", rate_limit=ToolRateLimit(limit=2, window_s=3600))
    answers = [
        run(harness, registry, user, f"rl-{i}") for i, user in enumerate(["cust-ada", "rita", "cust-ada"])
    ]
    assert [a["status"] for a in answers] == ["completed", "completed", "rejected"]
    assert answers[2]["error"] == "rate_limited"
    assert harness.handler_calls["lookup_order"] == 2
    refusals = [e for e in audit_events(harness.store, "call.rejected") if e.code == "rate_limited"]
    assert [e.call_id for e in refusals] == ["rl-2-c"]


# ---- deprecation --------------------------------------------------------------------------------


def test_a_deprecated_tool_is_callable_in_its_window_and_audited(harness: Harness) -> None:
    now = harness.store.now()
    registry = with_spec(
        harness, "lookup_order", deprecation=Deprecation(now - timedelta(hours=1), timedelta(days=1))
    )
    answer = run(harness, registry, "cust-ada", "dep-window")
    assert answer["status"] == "completed" and harness.handler_calls["lookup_order"] == 1
    [accepted] = audit_events(harness.store, "call.accepted")
    assert (
        accepted.detail["deprecated_tool"]["sunset_at"]
        == (now - timedelta(hours=1) + timedelta(days=1)).isoformat()
    )


def test_a_deprecated_tool_is_refused_after_its_window_and_audited(harness: Harness) -> None:
    now = harness.store.now()
    registry = with_spec(
        harness, "lookup_order", deprecation=Deprecation(now - timedelta(days=2), timedelta(days=1))
    )
    answer = run(harness, registry, "cust-ada", "dep-after")
    assert (answer["status"], answer["error"]) == ("rejected", "tool_deprecated")
    assert harness.handler_calls["lookup_order"] == 0
    assert audit_events(harness.store, "call.accepted") == []
    [rejected] = audit_events(harness.store, "call.rejected")
    assert (rejected.code, rejected.tool) == ("tool_deprecated", "lookup_order")


@pytest.mark.parametrize(
    "skew", [timedelta(days=-3), timedelta(days=3)], ids=["process-slow", "process-fast"]
)
def test_the_store_clock_decides_not_a_skewed_process_clock(harness: Harness, skew: timedelta) -> None:
    @dataclass_clock
    def clock() -> datetime:
        return datetime.now(UTC) + skew

    now = harness.store.now()
    inside = with_spec(
        harness, "lookup_order", deprecation=Deprecation(now - timedelta(hours=1), timedelta(days=1))
    )
    assert run(harness, inside, "cust-ada", "skew-in", clock=clock)["status"] == "completed"
    after = with_spec(
        harness, "lookup_order", deprecation=Deprecation(now - timedelta(days=2), timedelta(days=1))
    )
    answer = run(harness, after, "cust-ada", "skew-after", clock=clock)
    assert (answer["status"], answer["error"]) == ("rejected", "tool_deprecated")
    assert harness.handler_calls["lookup_order"] == 1


def dataclass_clock(fn: Any) -> Any:
    """A process clock object (``now()``) from a function."""

    class Clock:
        def now(self) -> datetime:
            return fn()

    return Clock()


@pytest.mark.parametrize(
    ("field", "value"),
    [("scopes", "ops:admin"), ("exposed_to_roles", "operator"), ("scopes", ["ops:read", ""]), ("scopes", [7])],
)
def test_an_upstream_tools_scopes_and_roles_must_be_lists_of_names(field: str, value: Any) -> None:
    """Before, ``"scopes": "ops:admin"`` in an MCP upstream's policy file became the scopes ``o``,
    ``p``, ``s``, ``:``... (a string is a sequence of letters) and the tool loaded."""
    from toolgate.graph.mcp.upstream import operator_policy

    entry = {"risk": "caution", "owner": "ops", "approval": "operator", "effect": "Sets an alert."}
    entry |= {"no_rollback": "alerts expire", field: value}
    with pytest.raises(RegistryError, match=f"{field} must be a list of names") as refused:
        operator_policy("set_alert", entry)
    assert refused.value.tool == "set_alert"
    assert operator_policy("set_alert", {**entry, field: ["ops:restart"]}) is not None


@pytest.mark.parametrize(
    ("field", "value", "kind"),
    [
        ("max_output_bytes", True, "an integer"),
        ("max_output_bytes", "4096", "an integer"),
        ("max_output_bytes", 4096.5, "an integer"),
        ("timeout_s", True, "a number"),
        ("timeout_s", "30", "a number"),
    ],
)
def test_an_upstream_tools_limits_must_be_numbers_as_written(field: str, value: Any, kind: str) -> None:
    """Before, ``"max_output_bytes": true`` in an MCP upstream's policy file was converted with
    ``int()`` into a 1-byte output limit, ``"4096.5"`` and ``"30"`` into whatever they parsed to;
    a limit is now taken only as the JSON number it was written as."""
    from toolgate.graph.mcp.upstream import operator_policy

    entry = {"risk": "caution", "owner": "ops", "approval": "operator", "effect": "Sets an alert."}
    entry |= {"no_rollback": "alerts expire", field: value}
    with pytest.raises(RegistryError, match=f"{field} must be {kind}") as refused:
        operator_policy("set_alert", entry)
    assert refused.value.tool == "set_alert"
    written = operator_policy("set_alert", {**entry, field: 512})
    assert getattr(written, field) == 512
