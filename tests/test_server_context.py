"""On the server, the run context is rebuilt from what the server authenticated, not from the client.

The client's ``context`` may lower budgets and carry correlation ids; it never raises a budget,
never sets leases, worker ids, waits or credentials, and never names the principal: the acting
principal is the authenticated user, as the identity store records them now.
"""

from __future__ import annotations

import pytest
from support import Harness

from toolgate.errors import RunRefused
from toolgate.graph.context import Context
from toolgate.graph.server.context import server_context
from toolgate.policy.principal import Principal
from toolgate.testing import ScriptedChatModel, ai


def user(identity: str, tenant: str = "acme", **extra: object) -> dict[str, object]:
    return {"identity": identity, "tenant_id": tenant, "roles": ["finance"], **extra}


def test_budgets_may_be_lowered_never_raised_and_service_settings_are_the_servers(harness: Harness) -> None:
    defaults = Context()
    client = Context(
        principal=Principal(user_id="fiona", tenant_id="acme", roles=frozenset({"finance"})),
        max_model_turns=100_000,
        max_tool_calls=2,
        deadline_s=1e9,
        max_calls_per_turn=4,
        claim_lease_s=1e9,
        duplicate_wait_s=0.0,
        worker_id="attacker",
        reconcile_delays=(0.0,),
        max_parallel_calls=500,
        batch_deadline_s=1e9,
        credentials={"crm_token": "from-the-client"},
        request_id="req-1",
        trace_id="a" * 32,
    )
    trusted = server_context(
        client, user("cust-ada", credentials={"crm_token": "from-the-request"}), harness.gateway().directory
    )
    assert trusted.principal is not None and trusted.principal.user_id == "cust-ada"  # not the client's fiona
    assert trusted.principal.roles == frozenset(
        {"customer"}
    )  # as the store records her, not as the user dict says
    assert (trusted.max_model_turns, trusted.deadline_s) == (defaults.max_model_turns, defaults.deadline_s)
    assert (trusted.max_tool_calls, trusted.max_calls_per_turn) == (2, 4)  # lowered: honoured
    assert trusted.claim_lease_s == defaults.claim_lease_s and trusted.worker_id == defaults.worker_id
    assert trusted.duplicate_wait_s == defaults.duplicate_wait_s
    assert trusted.reconcile_delays == defaults.reconcile_delays
    assert (trusted.max_parallel_calls, trusted.batch_deadline_s) == (
        defaults.max_parallel_calls,
        defaults.batch_deadline_s,
    )
    assert trusted.credentials == {"crm_token": "from-the-request"}
    assert (trusted.request_id, trusted.trace_id) == ("req-1", "a" * 32)


def test_nonsense_budgets_fall_back_to_the_servers(harness: Harness) -> None:
    client = Context(max_model_turns=-3, max_tool_calls=True, deadline_s=float("nan"))  # type: ignore[arg-type]
    trusted = server_context(client, user("cust-ada"), harness.gateway().directory)
    defaults = Context()
    assert (trusted.max_model_turns, trusted.max_tool_calls) == (
        defaults.max_model_turns,
        defaults.max_tool_calls,
    )
    assert trusted.deadline_s == defaults.deadline_s


def test_no_authenticated_user_means_no_principal(harness: Harness) -> None:
    directory = harness.gateway().directory
    assert server_context(Context(), None, directory).principal is None  # the server's own wake-ups
    assert server_context(Context(), user("mallory"), directory).principal is None  # not in the store
    assert server_context(Context(), user("gina", tenant="acme"), directory).principal is None  # wrong tenant
    assert server_context(Context(), {"tenant_id": "acme"}, directory).principal is None


def test_a_run_without_a_principal_is_refused_before_the_model_is_asked(harness: Harness) -> None:
    """What `server_context` leaves without a principal (no user, or one the store does not know)
    cannot start a task: the run ends ``missing_principal`` and no model request is sent."""
    model = ScriptedChatModel(responses=[ai("hello")])
    with pytest.raises(RunRefused, match="missing_principal"):
        harness.graph(model).invoke(
            {"messages": [("user", "hi")]}, {"configurable": {"thread_id": "t-nobody"}}, context=Context()
        )
    assert model.requests == []
