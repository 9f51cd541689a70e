"""Smoke test of the REAL ``langgraph dev`` server, offline, driven through ``langgraph-sdk``.

The server runs as a subprocess in its own process group with a temporary working directory
(it writes ``.langgraph_api/`` there, never into the repo) and a copy of the repo's
``langgraph.json`` whose ``dependencies`` point at the repo by absolute path. It uses the
offline demo model and a SQLite store in a temporary ``TOOLGATE_DATA_DIR``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
READY_TIMEOUT_S = 60.0
REQUEST = "My blender arrived broken, order O-5512. Please refund it."
PRINCIPAL = {
    "user_id": "cust-ada",
    "tenant_id": "acme",
    "roles": ["customer"],
    "scopes": ["orders:read", "refunds:request"],
}

pytestmark = [pytest.mark.server, pytest.mark.slow]


def _missing(reason: str) -> None:
    """Skip locally, fail under CI=true (same convention as the PostgreSQL harness)."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: server tests must not be skipped)", pytrace=False)
    pytest.skip(f"{reason}; install the 'server' or 'dev' extra")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _log_tail(path: Path, limit: int = 12_000) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return f"<no server log: {exc}>"
    return text[-limit:]


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the server's process group, then SIGKILL it if it lingers."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
    # the group may hold children even when the leader has exited
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def _server_env(data_dir: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("TOOLGATE_")
        and k not in {"OPENAI_API_KEY", "LANGSMITH_API_KEY", "LANGCHAIN_API_KEY", "LANGGRAPH_API_KEY"}
    }
    env.update(
        {
            "LANGGRAPH_CLI_NO_ANALYTICS": "1",
            "LANGGRAPH_NO_VERSION_CHECK": "true",
            "LANGSMITH_TRACING": "false",
            "LANGCHAIN_TRACING_V2": "false",
            "TOOLGATE_DATA_DIR": str(data_dir),
            "TOOLGATE_MODEL": "offline",
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


@dataclass
class Server:
    url: str
    workdir: Path
    data_dir: Path
    log: Path
    proc: subprocess.Popen[bytes]


def _wait_ready(server: Server) -> None:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + READY_TIMEOUT_S
    last = "no attempt"
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            pytest.fail(
                f"`langgraph dev` exited with code {server.proc.returncode} before it was ready;"
                f" log:\n{_log_tail(server.log)}",
                pytrace=False,
            )
        try:
            with opener.open(f"{server.url}/ok", timeout=2) as resp:
                if resp.status == 200:
                    return
                last = f"HTTP {resp.status}"
        except (urllib.error.URLError, OSError) as exc:
            last = repr(exc)
        time.sleep(0.25)
    pytest.fail(
        f"`langgraph dev` not ready after {READY_TIMEOUT_S:.0f}s (last: {last}); log:\n"
        f"{_log_tail(server.log)}",
        pytrace=False,
    )


@pytest.fixture
def langgraph_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A running ``langgraph dev`` on a free port; the process group is always terminated."""
    exe = Path(sys.executable).parent / "langgraph"
    if not exe.exists():
        _missing(f"no `langgraph` executable next to {sys.executable}")
    for module in ("langgraph_api", "langgraph_runtime_inmem", "langgraph_sdk"):
        if importlib.util.find_spec(module) is None:  # not imported here: the server runs it
            _missing(f"{module} is not installed (langgraph-cli[inmem], langgraph-sdk)")

    workdir = tmp_path_factory.mktemp("lgdev")
    data_dir = workdir / "data"
    config = json.loads((REPO / "langgraph.json").read_text(encoding="utf-8"))
    config["dependencies"] = [str(REPO)]
    (workdir / "langgraph.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    port = _free_port()
    log = workdir / "server.log"
    cmd = [
        str(exe),
        "dev",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--no-browser",
        "--no-reload",
        "--config",
        str(workdir / "langgraph.json"),
    ]
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            cmd,
            cwd=workdir,
            env=_server_env(data_dir),
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = Server(url=f"http://127.0.0.1:{port}", workdir=workdir, data_dir=data_dir, log=log, proc=proc)
    try:
        _wait_ready(server)
        yield server
    finally:
        _stop(proc)
        # shown by pytest only when the test fails
        print(f"---- langgraph dev log ({' '.join(cmd)}) ----\n{_log_tail(log)}")


def _interrupts_of(state: dict[str, Any]) -> list[dict[str, Any]]:
    """Interrupts of a thread state, whichever field this SDK/server version fills."""
    found = list(state.get("interrupts") or [])
    if not found:
        for task in state.get("tasks") or []:
            found.extend(task.get("interrupts") or [])
    return found


def test_langgraph_dev_run_stops_at_approval_interrupt(
    langgraph_server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langgraph_sdk import get_sync_client

    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    started = time.monotonic()
    with get_sync_client(url=langgraph_server.url, api_key=None, timeout=30.0) as client:
        assistants = client.assistants.search(graph_id="toolgate")
        assert [a["graph_id"] for a in assistants] == ["toolgate"]

        thread = client.threads.create()
        thread_id = thread["thread_id"]
        run_input: Any = {"messages": [{"role": "user", "content": REQUEST}]}
        run_context: Any = {"principal": PRINCIPAL}
        result = client.runs.wait(thread_id, "toolgate", input=run_input, context=run_context)
        assert isinstance(result, dict), result
        assert result.get("status") == "awaiting_approval", result
        assert result["principal"]["user_id"] == "cust-ada"

        state: dict[str, Any] = dict(client.threads.get_state(thread_id))
        thread_info: dict[str, Any] = dict(client.threads.get(thread_id))

    assert list(state["next"]) == ["approval"]
    assert thread_info["status"] == "interrupted"

    interrupts = _interrupts_of(state)
    assert len(interrupts) == 1, state
    payload = interrupts[0]["value"]
    assert set(payload) >= {"action_requests", "review_configs", "toolgate"}

    action = payload["action_requests"][0]
    assert action["name"] == "issue_refund"
    assert action["args"] == {"order_id": "O-5512", "amount_cents": 4999, "reason": "damaged"}
    assert payload["review_configs"][0]["action_name"] == "issue_refund"

    proposal = payload["toolgate"]["proposals"][0]
    assert proposal["status"] == "pending_approval"
    assert proposal["execution_started"] is False
    assert re.fullmatch(r"[0-9a-f]{64}", proposal["digest"]), proposal["digest"]
    assert proposal["risk"] == "danger"
    assert proposal["tool"] == "issue_refund"

    # the lookup ran before the pause; the refund did not
    lookups = [o for o in state["values"]["outcomes"].values() if o["tool"] == "lookup_order"]
    assert [o["status"] for o in lookups] == ["completed"]
    assert state["values"]["status"] == "awaiting_approval"
    # the same interrupt is visible on the thread object (keyed by task id)
    by_task = [i for items in (thread_info.get("interrupts") or {}).values() for i in items]
    assert [i["value"] for i in by_task] == [payload]

    # the server used the temporary data dir and working dir, not the repo
    assert (langgraph_server.data_dir / "toolgate.sqlite").exists()
    assert (langgraph_server.workdir / ".langgraph_api").is_dir()
    assert time.monotonic() - started < 45
