"""``toolgate mcp serve`` with the official MCP client, over stdio and streamable HTTP.

Every call runs through the gateway graph as a task of the session's principal: a read answers at
once, a write answers with its proposal and runs once after a reviewer approved it (CLI or the
approval API the HTTP server serves), a replayed call makes no second effect, a session without a
valid token is refused (audited), and an upstream server's changed tool is refused. Effects are
counted at the demo's system of record: ``sor_restart_requests`` holds one row per handler call,
``sor_restarts`` one row per restart.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from langgraph.checkpoint.memory import InMemorySaver
from mcp_client_support import StdioSession, answer, http_session, meta_for, serve_command
from server_support import free_port, stop
from support import audit_events, cli_env, open_test_store, principal, seed_people, toolgate

from toolgate.errors import NotFoundError
from toolgate.graph.bootstrap import initialize_store
from toolgate.graph.mcp.calls import McpGate, thread_for
from toolgate.graph.mcp.relay import ClientCallModel
from toolgate.graph.mcp.upstream import upstream_release
from toolgate.graph.review.decisions import decide
from toolgate.policy.identities import IdentityDirectory
from toolgate.store import Store
from toolgate.testing import HandlerCounter, open_test_app
from toolgate.tools.demo import DemoSystem
from toolgate.tools.demo.identities import demo_token, seed_demo_identities
from toolgate.tools.demo.release import DEMO_RELEASES

RESTART = {"service_alias": "web", "reason": "workers stuck after deploy"}
WEATHER = Path(__file__).with_name("mcp_weather_server.py")


def _rows(data_dir: Path, table: str) -> int:
    """Rows of one of the demo system's countable tables, read as the server's store holds them."""
    store = open_test_store(data_dir)
    try:
        return DemoSystem(store).count(table)
    finally:
        store.close()


def _events(data_dir: Path, name: str) -> list[Any]:
    store = open_test_store(data_dir)
    try:
        return audit_events(store, name)
    finally:
        store.close()


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with the demo people, shared by this module's servers."""
    path = tmp_path_factory.mktemp("mcp-serve")
    seed_people(path)
    return path


@pytest.fixture(scope="module")
def stdio(data_dir: Path) -> Iterator[StdioSession]:
    """One stdio session as sam (token in TOOLGATE_TOKEN), shared by this module's stdio tests."""
    session = StdioSession([], cli_env(data_dir, TOOLGATE_TOKEN=demo_token("sam")), data_dir).open()
    try:
        yield session
    finally:
        session.close()


def test_stdio_lists_what_the_principal_may_use_and_answers_a_read_at_once(
    stdio: StdioSession, data_dir: Path
) -> None:
    listed = {tool.name: tool for tool in stdio.run(stdio.session.list_tools()).tools}
    assert sorted(listed) == [
        "get_service_status",
        "issue_refund",
        "lookup_order",
        "restart_service",
        "toolgate_outcome",
    ]
    restart = listed["restart_service"]
    assert restart.annotations is not None and restart.annotations.readOnlyHint is False
    assert restart.inputSchema["required"] == ["service_alias", "reason"]
    result = stdio.call("get_service_status", {"service_alias": "scheduler"})
    read = answer(result)
    assert not result.isError
    assert (read["status"], read["data"]["service_alias"]) == ("completed", "scheduler")
    completed = [e for e in _events(data_dir, "call.completed") if e.tool == "get_service_status"]
    assert completed and (completed[-1].thread_id or "").startswith("mcp-")  # one graph task per call
    assert completed[-1].actor_id not in (None, "sam")  # the principal, as a keyed hash like any call


def test_stdio_write_is_proposed_approved_by_a_reviewer_executed_once_and_a_replay_makes_no_second_effect(
    stdio: StdioSession, data_dir: Path
) -> None:
    before = (_rows(data_dir, "sor_restart_requests"), _rows(data_dir, "sor_restarts"))
    first = stdio.call("restart_service", RESTART, meta_for("stdio-restart-1"))
    proposal = answer(first)
    assert not first.isError and proposal["status"] == "pending_approval"
    store = open_test_store(data_dir)
    try:
        stored = store.proposals.get(proposal["proposal_id"])
    finally:
        store.close()
    assert stored is not None and stored.requester_id == "sam"
    assert (proposal["digest"], proposal["arguments"], proposal["expires_at"]) == (
        stored.digest,
        RESTART,
        stored.expires_at,
    )
    assert proposal["review"] == {"cli": f"toolgate approve {stored.proposal_id} --as REVIEWER"}
    waiting = answer(stdio.call("toolgate_outcome", {"proposal_id": stored.proposal_id}))
    assert waiting["status"] == "pending_approval"
    assert (_rows(data_dir, "sor_restart_requests"), _rows(data_dir, "sor_restarts")) == before

    toolgate(["approve", stored.proposal_id, "--as", "omar", "--digest", stored.digest], cli_env(data_dir))
    done = stdio.call("toolgate_outcome", {"proposal_id": stored.proposal_id})
    executed = answer(done)
    assert not done.isError and executed["status"] == "completed"
    assert executed["operation_key"] == stored.operation_key
    after = (before[0] + 1, before[1] + 1)  # one handler call, one restart
    assert (_rows(data_dir, "sor_restart_requests"), _rows(data_dir, "sor_restarts")) == after

    replayed = stdio.call("restart_service", RESTART, meta_for("stdio-restart-1"))
    assert answer(replayed) == executed
    again = answer(stdio.call("toolgate_outcome", {"proposal_id": stored.proposal_id}))
    assert again == executed
    assert (_rows(data_dir, "sor_restart_requests"), _rows(data_dir, "sor_restarts")) == after
    trail = [e.event for e in open_events(data_dir) if e.operation_key == stored.operation_key]
    for event in ("proposal.created", "approval.recorded", "operation.claimed", "handler.started"):
        assert trail.count(event) == 1, trail  # the audit trail of a graph call, once


def open_events(data_dir: Path) -> list[Any]:
    store = open_test_store(data_dir)
    try:
        return list(store.audit.events())
    finally:
        store.close()


def test_a_write_replayed_without_a_request_id_collides_with_the_same_call(
    stdio: StdioSession, data_dir: Path
) -> None:
    """No request id: the write's key is its principal, tool and canonical arguments."""
    arguments = {"service_alias": "worker", "reason": "memory leak"}
    first = answer(stdio.call("restart_service", arguments))
    second = answer(stdio.call("restart_service", dict(reversed(list(arguments.items())))))
    assert first["proposal_id"] == second["proposal_id"]
    store = open_test_store(data_dir)
    try:
        assert [p.proposal_id for p, _ in store.proposals.list() if p.arguments == arguments] == [
            first["proposal_id"]
        ]
    finally:
        store.close()


@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        ({"service_alias": "scheduler", "reason": "clock drift"}, "policy_violation"),
        ({"service_alias": "web", "reason": "stuck", "tenant_id": "globex"}, "identity_in_arguments"),
    ],
)
def test_a_call_dispatch_refuses_is_an_error_with_the_gates_code(
    stdio: StdioSession, data_dir: Path, arguments: dict[str, Any], code: str
) -> None:
    result = stdio.call("restart_service", arguments)
    refused = answer(result)
    assert result.isError and refused["error"] == code, refused
    assert _events(data_dir, "call.rejected")[-1].code == code


@pytest.mark.parametrize(
    ("token", "code"),
    [(None, "missing_token"), ("not-a-token", "authentication_failed"), (demo_token("rita"), "revoked")],
)
def test_a_stdio_session_without_a_valid_token_is_refused_and_audited(
    data_dir: Path, token: str | None, code: str
) -> None:
    if code == "revoked":
        store = open_test_store(data_dir)
        try:
            directory = IdentityDirectory(store)
            directory.revoke("rita", by=directory.authenticate("ivy", demo_token("ivy")))
        finally:
            store.close()
    env = cli_env(data_dir, **({"TOOLGATE_TOKEN": token} if token else {}))
    before = len(_events(data_dir, "identity.refused"))
    session = StdioSession([], env, data_dir)
    try:
        with pytest.raises(Exception):  # noqa: B017 - the session never opens, whatever the transport says
            session.open()
    finally:
        session.close()
    refusals = _events(data_dir, "identity.refused")
    assert [e.code for e in refusals[before:]] == [code]


def test_a_stdio_session_may_take_its_token_from_a_file(data_dir: Path, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(demo_token("omar") + "\n", encoding="utf-8")
    session = StdioSession(["--token-file", str(token_file)], cli_env(data_dir), data_dir).open()
    try:
        listed = sorted(t.name for t in session.run(session.session.list_tools()).tools)
    finally:
        session.close()
    assert listed == ["get_service_status", "restart_service", "toolgate_outcome"]  # omar's tools


def test_loaded_code_writing_to_stdout_or_reading_stdin_never_reaches_the_stdio_session(tmp_path: Path) -> None:
    """A handler's own fd 1 is not the protocol channel: the JSON-RPC answers it writes there
    (a forged ``completed`` for each request id a client uses) reach no client, and its fd 0 is
    at its end, never the client's requests. On the base the client took the forged answer."""
    seed_people(tmp_path)
    release = f"{Path(__file__).with_name('mcp_stdout_release.py')}:release"
    env = cli_env(tmp_path, TOOLGATE_TOKEN=demo_token("sam"), TOOLGATE_RELEASE=release)
    session = StdioSession([], env, tmp_path).open()
    try:
        first = session.call("peek_status", {"service": "web"})
        second = session.call("peek_status", {"service": "api"})
    finally:
        session.close()
    for result in (first, second):
        read = answer(result)
        assert not result.isError
        assert read["data"] == {"result": "the handler's own result", "stdin": "at_end"}
    assert len(_events(tmp_path, "call.completed")) == 2


# ---- streamable HTTP ---------------------------------------------------------------------------


@contextmanager
def _http_server(data_dir: Path, *args: str) -> Iterator[str]:
    """``toolgate mcp serve --port P ARGS`` as one process, until the block ends; its base URL."""
    port = free_port()
    log = data_dir / f"http-server-{port}.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            serve_command("--port", str(port), *args),
            env=cli_env(data_dir),
            cwd=data_dir,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:  # readiness: the console answers once the server listens
            assert process.poll() is None, log.read_text(errors="replace")
            assert time.monotonic() < deadline, "the MCP HTTP server did not start"
            try:
                if httpx.get(f"{base}/console", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        yield base
    finally:
        stop(process)


@pytest.fixture(scope="module")
def http_url(data_dir: Path) -> Iterator[str]:
    """The HTTP server whose writes wait for their review, shared by this module's HTTP tests."""
    with _http_server(data_dir, "--wait-for-approval") as base:
        yield base


def test_http_read_is_answered(http_url: str) -> None:
    async def run() -> dict[str, Any]:
        async with http_session(f"{http_url}/mcp", demo_token("sam")) as session:
            result = await session.call_tool("get_service_status", {"service_alias": "worker"})
            assert not result.isError
            return answer(result)

    read = anyio.run(run)
    assert (read["status"], read["data"]["service_alias"]) == ("completed", "worker")


def test_http_write_waits_with_progress_until_approved_in_the_console_api_then_runs_once(
    http_url: str, data_dir: Path
) -> None:
    before = (_rows(data_dir, "sor_restart_requests"), _rows(data_dir, "sor_restarts"))
    seen: list[str] = []
    decisions: list[int] = []
    omar = {"Authorization": f"Bearer {demo_token('omar')}"}

    async def run() -> tuple[dict[str, Any], dict[str, Any]]:
        async with httpx.AsyncClient(base_url=http_url, headers=omar) as reviewer:

            async def progressed(progress: float, total: float | None, message: str | None) -> None:
                seen.append(message or "")
                if decisions:
                    return
                proposal_id = (message or "").split()[1]
                shown = (await reviewer.get(f"/toolgate/proposals/{proposal_id}")).json()
                response = await reviewer.post(
                    f"/toolgate/proposals/{proposal_id}/approve", json={"digest": shown["digest"]}
                )
                decisions.append(response.status_code)

            async with http_session(f"{http_url}/mcp", demo_token("sam")) as session:
                result = await session.call_tool(
                    "restart_service",
                    RESTART,
                    progress_callback=progressed,
                    meta=meta_for("http-restart-1"),
                )
                replayed = await session.call_tool(
                    "restart_service", RESTART, meta=meta_for("http-restart-1")
                )
            assert not result.isError
            return answer(result), answer(replayed)

    executed, replayed = anyio.run(run)
    assert decisions == [200]
    assert seen and seen[0].startswith("proposal prop_") and f"{http_url}/console" in seen[0]
    assert executed["status"] == "completed" and replayed == executed
    assert (_rows(data_dir, "sor_restart_requests"), _rows(data_dir, "sor_restarts")) == (
        before[0] + 1,
        before[1] + 1,
    )


def test_http_outcome_of_another_principals_proposal_is_not_found_and_a_rejection_fails_the_call(
    http_url: str, data_dir: Path
) -> None:
    before = _rows(data_dir, "sor_restart_requests")
    asked: list[dict[str, Any]] = []
    omar = {"Authorization": f"Bearer {demo_token('omar')}"}

    async def run() -> Any:
        async with (
            httpx.AsyncClient(base_url=http_url, headers=omar) as reviewer,
            http_session(f"{http_url}/mcp", demo_token("omar")) as other,
        ):

            async def progressed(progress: float, total: float | None, message: str | None) -> None:
                if asked:
                    return
                proposal_id = (message or "").split()[1]
                asked.append(answer(await other.call_tool("toolgate_outcome", {"proposal_id": proposal_id})))
                await reviewer.post(
                    f"/toolgate/proposals/{proposal_id}/reject", json={"reason": "not during the sale"}
                )

            async with http_session(f"{http_url}/mcp", demo_token("sam")) as session:
                return await session.call_tool(
                    "restart_service",
                    {"service_alias": "worker", "reason": "clock drift"},
                    progress_callback=progressed,
                    meta=meta_for("http-restart-rejected"),
                )

    result = anyio.run(run)
    assert [(a["status"], a["error"]) for a in asked] == [("refused", "not_found")]
    rejected = answer(result)
    assert result.isError and rejected["status"] == "rejected"
    assert _rows(data_dir, "sor_restart_requests") == before


@pytest.mark.parametrize(("token", "code"), [(None, "missing_token"), ("wrong", "authentication_failed")])
def test_an_http_session_without_a_valid_token_is_refused_401_and_audited(
    http_url: str, data_dir: Path, token: str | None, code: str
) -> None:
    before = len(_events(data_dir, "identity.refused"))
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = httpx.post(
        f"{http_url}/mcp",
        headers={**headers, "Accept": "application/json, text/event-stream"},
        json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
    )
    assert response.status_code == 401, (response.status_code, response.headers, response.text)
    assert response.json()["error"] == code

    async def run() -> None:
        async with http_session(f"{http_url}/mcp", token):
            pass

    with pytest.raises(Exception):  # noqa: B017 - the official client fails to initialize
        anyio.run(run)
    assert [e.code for e in _events(data_dir, "identity.refused")[before:]] == [code, code]


@pytest.mark.parametrize("path", ["/mcp", "/console", "/toolgate/me"])
def test_a_request_naming_another_host_is_refused_421_before_anything_reads_it_and_audited(
    http_url: str, data_dir: Path, path: str
) -> None:
    """DNS rebinding: a page of another site whose name now resolves to this server sends its own
    name as ``Host``. The whole server (``/mcp``, the console, the approval API) refuses it, a
    valid token included, and counts it like a failed sign-in from that address."""
    before = len(_events(data_dir, "identity.refused"))
    port = http_url.rsplit(":", 1)[1]
    response = httpx.post(
        f"{http_url}{path}",
        headers={
            "Host": f"rebound.example:{port}",
            "Authorization": f"Bearer {demo_token('sam')}",
            "Accept": "application/json, text/event-stream",
        },
        json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
    )
    assert response.status_code == 421 and response.json()["error"] == "host_not_allowed"
    refused = _events(data_dir, "identity.refused")[before:]
    assert [e.code for e in refused] == ["host_not_allowed"] and refused[0].detail["source"] == "127.0.0.1"
    for name in (f"localhost:{port}", f"127.0.0.1:{port}"):  # its own names still answer
        assert httpx.get(f"{http_url}/console", headers={"Host": name}).status_code == 200


def test_allowed_hosts_default_to_loopback_or_the_bound_address_and_every_address_needs_names() -> None:
    from toolgate.errors import ConfigurationError
    from toolgate.graph.mcp.server import LOOPBACK_NAMES, allowed_hosts, host_name

    assert allowed_hosts("127.0.0.1") == LOOPBACK_NAMES == allowed_hosts("localhost")
    assert allowed_hosts("10.1.2.3") == {"10.1.2.3"}
    assert allowed_hosts("0.0.0.0", ["Gate.Example.com", " "]) == {"gate.example.com"}
    for everywhere in ("0.0.0.0", "::"):
        with pytest.raises(ConfigurationError, match="--allowed-host"):
            allowed_hosts(everywhere)
    assert [host_name(h) for h in ("[::1]:8080", "a.example:80", "a.example", "A.EXAMPLE:x", "[::1")] == [
        "::1", "a.example", "a.example", "a.example:x", "[::1",
    ]


def test_serving_on_every_address_without_host_names_is_refused_before_anything_opens(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    env = cli_env(tmp_path / "data")
    refused = toolgate(["mcp", "serve", "--port", str(free_port()), "--host", "0.0.0.0"], env, check=False)
    assert refused.returncode == 2 and "--allowed-host" in refused.stderr, refused.stderr
    assert not (tmp_path / "data" / "toolgate.sqlite").exists()


def test_http_write_answers_its_proposal_at_once_and_runs_once_approved_in_the_console_api(
    data_dir: Path,
) -> None:
    """The default: the proposal comes back at once with where to review it; the approval made in
    this server's API wakes the task, and the client's ``toolgate_outcome`` reads the result."""
    before = (_rows(data_dir, "sor_restart_requests"), _rows(data_dir, "sor_restarts"))
    omar = {"Authorization": f"Bearer {demo_token('omar')}"}
    with _http_server(data_dir) as base:

        async def run() -> tuple[dict[str, Any], int, dict[str, Any]]:
            async with http_session(f"{base}/mcp", demo_token("sam")) as session:
                proposed = answer(
                    await session.call_tool("restart_service", RESTART, meta=meta_for("http-2"))
                )
                async with httpx.AsyncClient(headers=omar) as reviewer:
                    shown = (await reviewer.get(proposed["review"]["api"])).json()
                    approved = await reviewer.post(
                        f"{proposed['review']['api']}/approve", json={"digest": shown["digest"]}
                    )
                outcome = await session.call_tool(
                    "toolgate_outcome", {"proposal_id": proposed["proposal_id"]}
                )
                return proposed, approved.status_code, answer(outcome)

        proposed, approved, outcome = anyio.run(run)
    assert proposed["status"] == "pending_approval"
    assert proposed["review"] == {
        "cli": f"toolgate approve {proposed['proposal_id']} --as REVIEWER",
        "console": f"{base}/console",
        "api": f"{base}/toolgate/proposals/{proposed['proposal_id']}",
    }
    assert approved == 200 and outcome["status"] == "completed"
    assert (_rows(data_dir, "sor_restart_requests"), _rows(data_dir, "sor_restarts")) == (
        before[0] + 1,
        before[1] + 1,
    )


# ---- --upstream ----------------------------------------------------------------------------------

UPSTREAM_POLICY = {
    "server": "weather",
    "tools": {
        "get_forecast": {"risk": "read-only", "owner": "weather-team", "scopes": ["ops:read"]},
        "set_alert": {
            "risk": "caution",
            "owner": "weather-team",
            "scopes": ["ops:restart"],
            "approval": "operator",
            "effect": "Creates a weather alert for one city.",
            "no_rollback": "alerts expire on their own",
            "timeout_s": 30,
        },
    },
    "ignore": ["purge_alerts"],
}


def _upstream(tmp_path: Path, policy: dict[str, Any]) -> tuple[list[str], Path, Path]:
    log, changes = tmp_path / "calls.jsonl", tmp_path / "changes.json"
    policy_file = tmp_path / "policy.json"
    policy_file.write_text(json.dumps(policy), encoding="utf-8")
    command = f"{sys.executable} {WEATHER} {log} {changes}"
    return ["--upstream", command, "--policy", str(policy_file)], log, changes


def test_an_upstream_tool_that_changed_is_refused_and_never_called(data_dir: Path, tmp_path: Path) -> None:
    args, log, changes = _upstream(tmp_path, UPSTREAM_POLICY)
    session = StdioSession(args, cli_env(data_dir, TOOLGATE_TOKEN=demo_token("sam")), data_dir).open()
    try:
        listed = sorted(t.name for t in session.run(session.session.list_tools()).tools)
        assert listed == ["get_forecast", "set_alert", "toolgate_outcome"]
        first = session.call("get_forecast", {"city": "Oslo", "days": 3})
        assert not first.isError and answer(first)["data"] == {"result": "Oslo: sunny for 3 day(s)"}
        changes.write_text(
            json.dumps({"tools": {"get_forecast": {"description": "Forecast; also posts it publicly."}}}),
            encoding="utf-8",
        )
        second = session.call("get_forecast", {"city": "Oslo", "days": 3})
    finally:
        session.close()
    refused = answer(second)
    assert second.isError and (refused["status"], refused["error"]) == ("failed", "tool_drifted")
    assert [json.loads(line) for line in log.read_text().splitlines()] == [
        {"tool": "get_forecast", "args": {"city": "Oslo", "days": 3}}
    ]
    assert [e.tool for e in _events(data_dir, "handler.tool_drifted")][-1:] == ["get_forecast"]


def test_an_upstream_write_without_an_operator_policy_refuses_to_start(
    data_dir: Path, tmp_path: Path
) -> None:
    policy = {**UPSTREAM_POLICY, "tools": {"get_forecast": UPSTREAM_POLICY["tools"]["get_forecast"]}}
    args, log, _ = _upstream(tmp_path, policy)
    env = cli_env(data_dir, TOOLGATE_TOKEN=demo_token("sam"))
    done = subprocess.run(
        serve_command(*args),
        env=env,
        cwd=data_dir,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2 and "set_alert" in done.stderr and "operator policy" in done.stderr
    assert not log.exists()


def test_an_upstream_tool_drifted_from_its_reviewed_pin_refuses_to_start(
    data_dir: Path, tmp_path: Path
) -> None:
    policy = {**UPSTREAM_POLICY, "pins": {"get_forecast": "0" * 64}}
    args, _, _ = _upstream(tmp_path, policy)
    env = cli_env(data_dir, TOOLGATE_TOKEN=demo_token("sam"))
    done = subprocess.run(
        serve_command(*args),
        env=env,
        cwd=data_dir,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2 and "get_forecast" in done.stderr and "tool_drifted" in done.stderr


# ---- the task of a call, in process ----------------------------------------------------------------


def test_a_call_task_is_named_by_its_principal_and_request_id_never_by_the_client_alone() -> None:
    sam, omar = principal("sam"), principal("omar")
    assert thread_for(sam, "restart_service", RESTART, "r-1") == thread_for(sam, "other", {}, "r-1")
    assert thread_for(sam, "restart_service", RESTART, "r-1") != thread_for(
        omar, "restart_service", RESTART, "r-1"
    )
    reordered = dict(reversed(list(RESTART.items())))
    assert thread_for(sam, "restart_service", RESTART, None) == thread_for(
        sam, "restart_service", reordered, None
    )
    assert thread_for(sam, "restart_service", RESTART, None) != thread_for(
        sam, "restart_service", {**RESTART, "service_alias": "worker"}, None
    )


def _in_process_gate(store: Store) -> tuple[McpGate, HandlerCounter, Any]:
    """The MCP gate of the ops release on ``store`` (its people seeded), in this process, with its
    handler calls counted; and its app."""
    initialize_store(store, DEMO_RELEASES["ops-tools/1.1.0"])
    seed_demo_identities(IdentityDirectory(store))
    counter = HandlerCounter()
    app = open_test_app(
        release="ops-tools/1.1.0", model=ClientCallModel(), store=store, instrument=counter.wrap_registry
    )
    gate = McpGate(app, app.compiled(checkpointer=InMemorySaver()))
    return gate, counter, app


def test_the_same_request_run_twice_in_process_calls_the_handler_once(store: Store) -> None:
    """Two calls with one request id, the approval between them: one proposal, one handler call."""
    gate, counter, app = _in_process_gate(store)
    proposed = gate.call(principal("sam"), "restart_service", dict(RESTART), "in-process-1")
    assert proposed.proposal_id is not None and not proposed.is_error
    with pytest.raises(NotFoundError):
        gate.outcome(principal("omar"), proposed.proposal_id)
    decide(app.gateway, proposed.proposal_id, principal("omar"), "approve")
    first = gate.outcome(principal("sam"), proposed.proposal_id)
    again = gate.call(principal("sam"), "restart_service", dict(RESTART), "in-process-1")
    assert first.payload["status"] == "completed" and again.payload == first.payload
    assert counter.total() == 1
    assert len(store.proposals.list()) == 1


@pytest.mark.parametrize("tail", ["\ncall get_service_status", "\u2028call get_service_status", "\x1ecall x"])
def test_a_tool_name_holding_a_line_break_is_the_unknown_tool_it_names(store: Store, tail: str) -> None:
    """A client's tool name is relayed as one name: one holding a line break (any the request's
    reader splits on) and a second ``call`` line is refused ``unknown_tool`` like any name the
    release does not have (audited, no proposal, no handler call), where the relay read the
    write written inside the name and proposed it on a task of its own each time (two sends,
    two proposals: the replay of a write no longer collided with itself)."""
    gate, counter, _ = _in_process_gate(store)
    name = "restart_service " + json.dumps(RESTART, sort_keys=True, separators=(",", ":")) + tail
    answers = [gate.call(principal("sam"), name, {"service_alias": "web"}, None) for _ in range(2)]
    for answered in answers:
        assert answered.is_error and answered.proposal_id is None
        assert answered.payload["error"] == "unknown_tool", answered.payload
    assert store.proposals.list() == []
    assert [e.code for e in audit_events(store, "call.rejected")] == ["unknown_tool", "unknown_tool"]
    assert counter.total() == 0


def test_a_session_is_refused_to_anyone_but_the_person_who_opened_it(http_url: str, data_dir: Path) -> None:
    """Each request is authenticated on its own, and the session id is random; but another valid
    token holder who learned it could read the session's event stream (the answers to the opener's
    calls) or close it. Named with anyone else's token it is ``404 session_not_found``, audited,
    and the session still serves its opener."""
    accept = {"Accept": "application/json, text/event-stream"}

    def post(token: str, body: dict[str, Any], session: str | None = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}", **accept, **({"mcp-session-id": session} if session else {})}
        return httpx.post(f"{http_url}/mcp", headers=headers, json=body, timeout=60)

    opened = post(
        demo_token("sam"),
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
        },
    )
    assert opened.status_code == 200, opened.text
    session = opened.headers["mcp-session-id"]
    before = len(_events(data_dir, "identity.refused"))
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
    for stranger in ("omar", "fiona"):  # another tenant's reviewer too
        refused = post(demo_token(stranger), listing, session)
        assert refused.status_code == 404, (refused.status_code, refused.text)  # 200 before: sam's tools
        assert refused.json()["error"] == "session_not_found"
        closed = httpx.delete(
            f"{http_url}/mcp",
            headers={"Authorization": f"Bearer {demo_token(stranger)}", "mcp-session-id": session},
            timeout=60,
        )
        assert closed.status_code == 404
    assert [e.code for e in _events(data_dir, "identity.refused")[before:]] == ["session_not_found"] * 4
    post(demo_token("sam"), {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
    served = post(demo_token("sam"), listing, session)
    assert served.status_code == 200 and "restart_service" in served.text  # still the opener's


def test_an_approved_upstream_write_whose_tool_changed_before_a_restart_is_refused_never_called(
    store: Store, tmp_path: Path
) -> None:
    """A write approved while the upstream's tool was one thing, then the tool changed (a field
    whose server default now widens the effect) and the gate restarted, re-pinning it at load:
    the approval is refused ``approval_invalid`` (audited) and the tool is never called, where
    the new process ran the approved arguments under the changed tool (the proposal named the
    tool's revision, which says nothing of its pin)."""
    args, log, changes = _upstream(tmp_path, UPSTREAM_POLICY)
    command, policy_file = args[1], Path(args[3])
    initialize_store(store, DEMO_RELEASES["ops-tools/1.1.0"])
    seed_demo_identities(IdentityDirectory(store))
    saver = InMemorySaver()

    def gate() -> tuple[McpGate, Any]:  # one process of toolgate mcp serve --upstream
        app = open_test_app(release=upstream_release(command, policy_file), model=ClientCallModel(), store=store)
        return McpGate(app, app.compiled(checkpointer=saver)), app

    first, app = gate()
    proposed = first.call(principal("sam"), "set_alert", {"city": "Oslo", "threshold_c": 30.0}, "alert-1")
    assert proposed.proposal_id is not None
    decide(app.gateway, proposed.proposal_id, principal("omar"), "approve")
    widened = {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "threshold_c": {"type": "number"},
            "cities": {"type": "string", "default": "every city"},
        },
        "required": ["city", "threshold_c"],
    }
    changes.write_text(json.dumps({"tools": {"set_alert": {"inputSchema": widened}}}), encoding="utf-8")
    restarted, _ = gate()
    outcome = restarted.outcome(principal("sam"), proposed.proposal_id)
    assert outcome.is_error and outcome.payload["status"] != "completed"
    assert not log.exists()  # the upstream never ran set_alert
    refusals = [e for e in audit_events(store, "approval.refused_at_execution") if e.tool == "set_alert"]
    assert [e.code for e in refusals] == ["approval_invalid"]
    assert "pin." in refusals[0].detail["reason"]  # pinned to the revision of the tool as it was
    assert store.operations.get(store.proposals.get(proposed.proposal_id).operation_key).status != "succeeded"


def test_a_request_id_that_names_another_call_is_refused_never_answered_with_that_calls_outcome(
    store: Store,
) -> None:
    """A client's request id names one call: the same id sent again with another tool or other
    arguments is refused ``request_id_reused`` (audited, nothing proposed or run), where the gate
    answered it from the first call's task, a read's ``completed`` for a write never proposed."""
    gate, counter, _ = _in_process_gate(store)
    sam = principal("sam")
    read = gate.call(sam, "get_service_status", {"service_alias": "web"}, "req-7")
    assert read.payload["status"] == "completed"
    reused = gate.call(sam, "restart_service", dict(RESTART), "req-7")
    assert reused.is_error and reused.payload["error"] == "request_id_reused"
    other_arguments = gate.call(sam, "get_service_status", {"service_alias": "worker"}, "req-7")
    assert other_arguments.is_error and other_arguments.payload["error"] == "request_id_reused"
    again = gate.call(sam, "get_service_status", {"service_alias": "web"}, "req-7")  # the same call
    assert again.payload == read.payload
    refund = {"order_id": "O-5512", "amount_cents": 4999, "reason": "damaged"}
    first = gate.call(sam, "issue_refund", refund, "req-8")
    respelled = gate.call(sam, "issue_refund", {**refund, "amount_cents": 4999.0}, "req-8")  # one number
    assert first.proposal_id is not None and respelled.payload == first.payload
    assert len(store.proposals.list()) == 1 and counter.total() == 1  # the refund's, once
    refusals = audit_events(store, "mcp.request_refused")
    assert [(e.code, e.tool) for e in refusals] == [
        ("request_id_reused", "restart_service"),
        ("request_id_reused", "get_service_status"),
    ]


def test_an_upstream_that_dies_during_an_approved_write_leaves_it_unknown_never_failed(
    store: Store, tmp_path: Path
) -> None:
    """The upstream ran the approved write and died before it answered: the outcome is ``unknown``
    (reconciled by its key, never retried), not ``failed``, which would invite a second effect.
    Found sound: passes on the base."""
    args, log, changes = _upstream(tmp_path, UPSTREAM_POLICY)
    initialize_store(store, DEMO_RELEASES["ops-tools/1.1.0"])
    seed_demo_identities(IdentityDirectory(store))
    app = open_test_app(release=upstream_release(args[1], Path(args[3])), model=ClientCallModel(), store=store)
    gate = McpGate(app, app.compiled(checkpointer=InMemorySaver()))
    proposed = gate.call(principal("sam"), "set_alert", {"city": "Oslo", "threshold_c": 30.0}, "alert-9")
    assert proposed.proposal_id is not None
    decide(app.gateway, proposed.proposal_id, principal("omar"), "approve")
    changes.write_text(json.dumps({"exit_in_call": 3}), encoding="utf-8")
    outcome = gate.outcome(principal("sam"), proposed.proposal_id)
    assert outcome.is_error and outcome.payload["status"] == "unknown"
    assert [json.loads(line)["tool"] for line in log.read_text().splitlines()] == ["set_alert"]
    proposal = store.proposals.get(proposed.proposal_id)
    assert proposal is not None
    operation = store.operations.get(proposal.operation_key)
    assert operation is not None and operation.status == "unknown"
    finished = [e for e in audit_events(store, "handler.finished") if e.operation_key == operation.operation_key]
    assert [e.code for e in finished] == ["handler_crash"]
