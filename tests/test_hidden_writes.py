"""Hidden-write detection (issue 16, item 8): every read tool call a test or an eval case makes is
compared with its system of record before and after; a read that also inserts a notification row
is caught by the test harness and fails its eval case, while the demo's own reads pass."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

import pytest
from hidden_writes import fail_on_hidden_writes
from support import Harness, start, tool_messages

from toolgate.evals.fixtures import DEFAULT_DATASET, load_dataset
from toolgate.evals.runner import CaseRunner
from toolgate.evals.scoring import score_case
from toolgate.releases.bundle import ReleaseEnv
from toolgate.store import Store
from toolgate.store.handler_access import outside_handler_call
from toolgate.testing import ScriptedChatModel, ai, open_test_app, tool_call
from toolgate.tools import Registry
from toolgate.tools.demo import demo_specs
from toolgate.tools.demo.release import DEMO_RELEASES
from toolgate.tools.handler import HandlerContext
from toolgate.tools.spec import ToolSpec

NOTIFY = "CREATE TABLE IF NOT EXISTS sor_notifications (user_id TEXT NOT NULL, text TEXT NOT NULL)"


def notifying(spec: ToolSpec, store: Store) -> ToolSpec:
    """``spec`` whose read also sends a notification (inserts a row in ``sor_notifications``)."""

    def lookup_and_notify(args: Any, ctx: Any) -> Any:
        # around the gateway's access scope (which refuses the store to every handler call): a
        # write it cannot see, as through a thread or a connection of the handler's own
        with outside_handler_call(), store.transaction() as tx:
            tx.execute(NOTIFY)
            tx.execute("INSERT INTO sor_notifications VALUES (?, ?)", (ctx.user_id, "your order was viewed"))
        return spec.handler(args, ctx)

    return replace(spec, handler=lookup_and_notify)


def bare(harness: Harness, name: str) -> ToolSpec:
    """The demo tool ``name`` as the release builds it (no harness wrapper)."""
    return next(s for s in demo_specs(harness.system) if s.name == name)


def lookup_model() -> ScriptedChatModel:
    return ScriptedChatModel(
        responses=[ai("", tool_call("lookup_order", {"order_id": "O-5512"}, "c1")), ai("ok")]
    )


def test_a_read_that_writes_is_caught_naming_the_tool_and_the_table(harness: Harness) -> None:
    check = harness.hidden_writes
    with harness.store.transaction() as tx:
        tx.execute(NOTIFY)  # the table exists: the row, not a new table, is what gives it away
    spec = harness.registry.tools["lookup_order"]
    check_specs = check.wrap([notifying(spec, harness.store)])  # the harness wraps what it is given
    registry = Registry.of(
        harness.registry.release,
        [*(s for s in harness.registry.tools.values() if s.name != spec.name), *check_specs],
        harness.system,
    )
    app = open_test_app(
        model=lookup_model(), tools=registry, policy=harness.policy, store=harness.store, start=False
    )
    state = start(app.compiled(), "Where is O-5512?", "cust-ada", "t-hidden")
    (found,) = check.take()
    assert (found.tool, found.table, found.before[0], found.after[0]) == (
        "lookup_order",
        "sor_notifications",
        0,
        1,
    )
    assert found.reason == "hidden_write tool=lookup_order table=sor_notifications"
    (message,) = tool_messages(state)
    assert '"completed"' not in str(message.content)  # the call failed: its result was not trusted

    check.violations.append(found)  # left untaken, the guard fails the test with a clear message
    with pytest.raises(AssertionError, match="read tool 'lookup_order' wrote sor_notifications: rows 0 -> 1"):
        fail_on_hidden_writes()


def test_the_demo_reads_pass_and_are_compared(harness: Harness) -> None:
    model = ScriptedChatModel(
        responses=[
            ai("", tool_call("lookup_order", {"order_id": "O-5512"}, "c1")),
            ai("", tool_call("get_service_status", {"service_alias": "web"}, "c2")),
            ai("done"),
        ]
    )
    start(harness.graph(model), "status?", "sam", "t-reads")
    assert harness.handler_calls["lookup_order"] == harness.handler_calls["get_service_status"] == 1
    assert harness.hidden_writes.checked == 2 and harness.hidden_writes.violations == []


def test_a_write_in_another_thread_during_a_read_is_not_blamed_on_it(harness: Harness) -> None:
    """The write handler runs in another thread inside the read's window: the read is skipped."""
    check = harness.hidden_writes
    with harness.store.transaction() as tx:
        tx.execute(NOTIFY)
    spec = bare(harness, "lookup_order")
    (write,) = check.wrap(
        [replace(harness.registry.tools["issue_refund"], handler=notifying(spec, harness.store).handler)]
    )

    def read_during_a_write(args: Any, ctx: Any) -> Any:
        writer = threading.Thread(target=write.handler, args=(args, ctx))
        writer.start()
        writer.join()
        return spec.handler(args, ctx)

    (read,) = check.wrap([replace(spec, handler=read_during_a_write)])
    args = spec.handler_arguments({"order_id": "O-5512"})
    read.handler(args, HandlerContext(tenant_id="acme", user_id="cust-ada"))
    assert harness.system.count("sor_orders", order_id="O-5512") == 1
    assert (check.checked, check.skipped, check.violations) == (0, 1, [])


def test_reads_are_not_serialized(harness: Harness) -> None:
    """Two checked reads run at once (each waits inside its handler until the other is running)."""
    both = threading.Barrier(2, timeout=30)
    spec = bare(harness, "lookup_order")

    def together(args: Any, ctx: Any) -> Any:
        both.wait()
        return spec.handler(args, ctx)

    (read,) = harness.hidden_writes.wrap([replace(spec, handler=together)])
    args = spec.handler_arguments({"order_id": "O-5512"})
    results: list[Any] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(
                read.handler(args, HandlerContext(tenant_id="acme", user_id="cust-ada"))
            )
        )
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 2 and harness.hidden_writes.checked == 2


def test_an_eval_case_with_a_writing_read_fails_with_a_stable_reason() -> None:
    case = next(c for c in load_dataset(DEFAULT_DATASET).cases if c.id == "sel-ada-order-status")
    release = DEMO_RELEASES["ops-tools/1.1.0"]
    with CaseRunner(release, cases=[case]) as honest:
        good = score_case(case, honest.run_case(case))
    assert good.passed, good.reasons

    def tools(env: ReleaseEnv) -> list[ToolSpec]:
        specs = list(release.registry(env).tools.values())
        return [notifying(s, env.store) if s.name == "lookup_order" else s for s in specs]

    with CaseRunner(replace(release, tools=tools), cases=[case]) as runner:
        obs = runner.run_case(case)
    score = score_case(case, obs)
    assert not score.passed
    assert "error: hidden_write tool=lookup_order table=sor_notifications" in score.reasons


class _Outcome:
    """What pluggy hands a hook wrapper: the test's result, which the wrapper may replace."""

    excinfo = None
    forced: BaseException | None = None

    def force_exception(self, exc: BaseException) -> None:
        self.forced = exc


def test_the_suite_hook_fails_a_passing_test_that_left_a_hidden_write(harness: Harness) -> None:
    import conftest

    with harness.store.transaction() as tx:
        tx.execute(NOTIFY)
    (read,) = harness.hidden_writes.wrap([notifying(bare(harness, "lookup_order"), harness.store)])
    hook = conftest.pytest_runtest_call(item=None)
    next(hook)  # the test starts
    with pytest.raises(AssertionError):  # the gateway would turn this into a failed call
        read.handler(
            read.handler_arguments({"order_id": "O-5512"}),
            HandlerContext(tenant_id="acme", user_id="cust-ada"),
        )
    outcome = _Outcome()
    with pytest.raises(StopIteration):
        hook.send(outcome)  # the test body passed
    assert isinstance(outcome.forced, AssertionError)
    assert "hidden_write tool=lookup_order table=sor_notifications" in str(outcome.forced)
