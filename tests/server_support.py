"""Running the REAL ``langgraph dev`` server for tests, offline (a helper module, not a pytest plugin).

`langgraph_dev` starts the server as a subprocess in its own process group, on a free port, with a
temporary working directory (it writes ``.langgraph_api/`` there, never into the repo) holding a
copy of the repo's ``langgraph.json`` whose ``dependencies`` point at the repo by absolute path.
The server uses the offline demo model and a SQLite store in ``<workdir>/data``
(``TOOLGATE_DATA_DIR``); ``extra_env`` adds variables (e.g. ``TOOLGATE_AUDIT_KEY``). Its process
group is always terminated on exit. Missing server packages skip locally and fail under ``CI=true``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
READY_TIMEOUT_S = 60.0
LOCAL_HOSTS = "127.0.0.1,localhost"


def missing(reason: str) -> None:
    """Skip locally, fail under CI=true (same convention as the PostgreSQL harness)."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: server tests must not be skipped)", pytrace=False)
    pytest.skip(f"{reason}; install the 'server' or 'dev' extra")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def log_tail(path: Path, limit: int = 12_000) -> str:
    """The last ``limit`` characters of the server log."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return f"<no server log: {exc}>"
    return text[-limit:]


def stop(proc: subprocess.Popen[bytes]) -> None:
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


def server_env(data_dir: Path, extra_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The server's environment: no inherited ``TOOLGATE_*``, ``OTEL_*`` or API keys, offline, ``extra_env`` last."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TOOLGATE_", "OTEL_"))
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
            "NO_PROXY": LOCAL_HOSTS,
            "no_proxy": LOCAL_HOSTS,
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra_env or {})
    return env


@dataclass
class Server:
    """A running ``langgraph dev``."""

    url: str
    workdir: Path
    data_dir: Path
    log: Path
    proc: subprocess.Popen[bytes]

    def log_tail(self, limit: int = 12_000) -> str:
        """The end of the server's log (for assertion messages)."""
        return log_tail(self.log, limit)


def wait_ready(server: Server) -> None:
    """Poll ``/ok`` until the server answers; fail with its log if it exits or times out."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + READY_TIMEOUT_S
    last = "no attempt"
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            pytest.fail(
                f"`langgraph dev` exited with code {server.proc.returncode} before it was ready;"
                f" log:\n{server.log_tail()}",
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
        f"`langgraph dev` not ready after {READY_TIMEOUT_S:.0f}s (last: {last}); log:\n{server.log_tail()}",
        pytrace=False,
    )


def langgraph_executable() -> Path:
    """The ``langgraph`` CLI of this venv; skips (or fails under CI) when the server packages are missing."""
    exe = Path(sys.executable).parent / "langgraph"
    if not exe.exists():
        missing(f"no `langgraph` executable next to {sys.executable}")
    for module in ("langgraph_api", "langgraph_runtime_inmem", "langgraph_sdk"):
        if importlib.util.find_spec(module) is None:  # not imported here: the server runs it
            missing(f"{module} is not installed (langgraph-cli[inmem], langgraph-sdk)")
    return exe


@contextlib.contextmanager
def langgraph_dev(workdir: Path, extra_env: Mapping[str, str] | None = None) -> Iterator[Server]:
    """A running ``langgraph dev`` in ``workdir`` (data in ``workdir/data``); always terminated."""
    exe = langgraph_executable()
    data_dir = workdir / "data"
    config = json.loads((REPO / "langgraph.json").read_text(encoding="utf-8"))
    config["dependencies"] = [str(REPO)]
    (workdir / "langgraph.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    port = free_port()
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
            env=server_env(data_dir, extra_env),
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = Server(url=f"http://127.0.0.1:{port}", workdir=workdir, data_dir=data_dir, log=log, proc=proc)
    try:
        wait_ready(server)
        yield server
    finally:
        stop(proc)
        # shown by pytest only when a test (or its teardown) fails
        print(f"---- langgraph dev log ({' '.join(cmd)}) ----\n{log_tail(log)}")


@contextlib.contextmanager
def people_server(workdir: Path, extra_env: Mapping[str, str] | None = None) -> Iterator[Server]:
    """`langgraph_dev` on a store that already holds the demo people (their tokens: ``demo_token``).

    The test process and the server share the store's secret (``TOOLGATE_AUDIT_KEY``), so a test
    can open the server's store (`open_test_store(server.data_dir)`) to read its evidence."""
    from support import TEST_KEY, seed_people

    seed_people(workdir / "data")
    with langgraph_dev(workdir, {"TOOLGATE_AUDIT_KEY": TEST_KEY.decode(), **(extra_env or {})}) as server:
        yield server


@contextlib.contextmanager
def people_server_and_store(workdir: Path, extra_env: Mapping[str, str] | None = None) -> Iterator[tuple[Server, Any]]:
    """`people_server`, reached directly (loopback past any proxy), with its store open in the test
    process for evidence; what a module-scoped rig of the real server starts from."""
    from support import open_test_store

    with pytest.MonkeyPatch.context() as mp, people_server(workdir, extra_env) as server:
        mp.setenv("NO_PROXY", LOCAL_HOSTS)
        mp.setenv("no_proxy", LOCAL_HOSTS)
        store = open_test_store(server.data_dir)
        try:
            yield server, store
        finally:
            store.close()


def client_as(server: Server, user: str | None, *, token: str | None = None, **headers: str) -> Any:
    """A ``langgraph-sdk`` sync client authenticated as ``user`` (their demo token, or ``token``)."""
    from langgraph_sdk import get_sync_client

    from toolgate.tools.demo.identities import demo_token

    secret = token if token is not None else (demo_token(user) if user else None)
    if secret:
        headers = {"Authorization": f"Bearer {secret}", **headers}
    return get_sync_client(url=server.url, api_key=None, timeout=60.0, headers=headers)


def interrupts_of(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Interrupts of a thread state, whichever field this SDK/server version fills."""
    found = list(state.get("interrupts") or [])
    if not found:
        for task in state.get("tasks") or []:
            found.extend(task.get("interrupts") or [])
    return found


__all__ = [
    "LOCAL_HOSTS",
    "READY_TIMEOUT_S",
    "REPO",
    "Server",
    "client_as",
    "free_port",
    "interrupts_of",
    "langgraph_dev",
    "langgraph_executable",
    "log_tail",
    "missing",
    "people_server",
    "server_env",
    "stop",
    "wait_ready",
]
