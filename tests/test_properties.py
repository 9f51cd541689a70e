"""Property-based: arbitrary JSON arguments for every demo tool never crash the gateway, never
reach a handler unless valid, and are never coerced into valid ones."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import TEST_KEY, Harness, start, tool_messages

from toolgate.errors import REJECTION_CODES
from toolgate.store import SQLiteStore
from toolgate.testing import ScriptedChatModel, ai, tool_call

VALID = {
    "lookup_order": {"order_id": "O-5512"},
    "get_service_status": {"service_alias": "web"},
    "restart_service": {"service_alias": "web", "reason": "slow pages"},
    "issue_refund": {"order_id": "O-5512", "amount_cents": 100, "reason": "damaged"},
}
USERS = {
    "lookup_order": "cust-ada",
    "issue_refund": "cust-ada",
    "get_service_status": "omar",
    "restart_service": "omar",
}
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**15), max_value=10**15)
    | st.floats(allow_nan=False)
    | st.text(max_size=40),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)


def argument_strategy(tool: str) -> st.SearchStrategy[dict[str, Any]]:
    valid = VALID[tool]
    arbitrary = st.dictionaries(st.text(max_size=15), json_values, max_size=5)
    mutated = st.builds(
        lambda key, value: {**valid, key: value}, st.sampled_from([*valid, "extra"]), json_values
    )
    dropped = st.sampled_from(list(valid)).map(lambda key: {k: v for k, v in valid.items() if k != key})
    return st.one_of(arbitrary, mutated, dropped, st.just(valid))


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Harness:
    return Harness(SQLiteStore(Path(tmp_path_factory.mktemp("prop")) / "p.sqlite", key=TEST_KEY))


_threads = itertools.count()


@pytest.mark.parametrize("tool", sorted(VALID))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_arbitrary_arguments(harness: Harness, tool: str, data: st.DataObject) -> None:
    args = data.draw(argument_strategy(tool))
    before = dict(harness.handler_calls)
    model = ScriptedChatModel(responses=[ai("", tool_call(tool, args, "c1")), ai("done")])
    state = start(harness.graph(model), "go", USERS[tool], f"t-prop-{next(_threads)}")
    record = state["calls"]["c1"]
    delta = {k: v - before.get(k, 0) for k, v in harness.handler_calls.items() if v != before.get(k, 0)}
    if record["phase"] == "rejected":
        assert record["code"] in REJECTION_CODES
        assert delta == {}
        assert json.loads(str(tool_messages(state)[0].content))["status"] == "rejected"
    else:
        assert record["arguments"] == args, "arguments were coerced"
        if tool in ("lookup_order", "get_service_status"):
            assert delta == {tool: 1}
        else:
            assert delta == {} and "__interrupt__" in state
