"""Test harness: a toolgate wired to a real store, with every handler call counted."""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import hidden_writes
import psycopg
import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from psycopg import sql
from psycopg.waiting import Ready, Wait

from toolgate.graph import Context
from toolgate.graph.bootstrap import App, initialize_store
from toolgate.graph.gateway import Gateway
from toolgate.graph.review.decisions import decide
from toolgate.graph.state import gateway_state
from toolgate.policy import Principal
from toolgate.policy.identities import IdentityDirectory
from toolgate.policy.retry import ReadRetry
from toolgate.store import AuditEvent, PostgresStore, SQLiteStore, Store
from toolgate.testing import HandlerCounter, ScriptedChatModel, ai, open_test_app, tool_call
from toolgate.tools import Registry
from toolgate.tools.demo import REFUND_RELEASE, DemoSystem, demo_specs
from toolgate.tools.demo.identities import demo_principals, demo_token, seed_demo_identities
from toolgate.tools.demo.release import DEMO_RELEASES

TEST_KEY = b"toolgate-test-store-secret-0001"
"""The store secret every test process shares (CLI subprocesses get it as TOOLGATE_AUDIT_KEY)."""
PRINCIPALS = demo_principals()
REFUND_REQUEST = "My blender arrived broken, order O-5512. Please refund it."
REPO = Path(__file__).resolve().parent.parent


def principal(user_id: str) -> Principal:
    """A demo identity (cust-ada, rita, fiona, omar, sam, gina)."""
    return PRINCIPALS[user_id]


class Harness:
    """A configured gateway on ``store`` whose handlers count their calls."""

    def __init__(self, store: Store, *, handler_delay_s: float = 0.0) -> None:
        initialize_store(store, DEMO_RELEASES["ops-tools/1.1.0"])
        seed_demo_identities(IdentityDirectory(store))
        self.store = store
        self.system = DemoSystem(store)
        self.counter = HandlerCounter(delay_s=handler_delay_s)
        self.handler_calls = self.counter.calls
        self.hidden_writes, specs = hidden_writes.install(store, self.counter.wrap(demo_specs(self.system)))
        """Every read's system of record compared before and after (tests/hidden_writes.py)."""
        self.registry = Registry.of(REFUND_RELEASE, specs, self.system)
        self.policy = DEMO_RELEASES[REFUND_RELEASE].policy

    def app(self, model: BaseChatModel | None = None) -> App:
        """The refund release around this harness's registry and policy as they are now (a test
        may replace either), built by the composition root."""
        return open_test_app(
            release=DEMO_RELEASES[REFUND_RELEASE],
            tools=self.registry,
            policy=self.policy,
            model=model,
            store=self.store,
            start=False,
        )

    def gateway(self, model: BaseChatModel | None = None) -> Gateway:
        """Node dependencies (model only matters inside a graph run)."""
        return self.app(model).gateway

    def graph(self, model: BaseChatModel, checkpointer: BaseCheckpointSaver[Any] | None = None) -> Any:
        """The compiled gateway graph (in-memory checkpointer unless one is given)."""
        return self.app(model).compiled(checkpointer=checkpointer or InMemorySaver())

    def approved_refund(self, registry: Registry, thread: str) -> tuple[dict[str, Any], Gateway]:
        """Ada's refund of O-5512 proposed through this harness's graph and approved by fiona;
        with the gateway that serves ``registry`` (a test's changed tools) to deliver it."""
        model = ScriptedChatModel(
            responses=[
                ai(
                    "",
                    tool_call(
                        "issue_refund", {"order_id": "O-5512", "amount_cents": 4999, "reason": "damaged"}
                    ),
                )
            ]
        )
        state = start(self.graph(model), "refund O-5512", "cust-ada", thread)
        proposal: dict[str, Any] = state["__interrupt__"][0].value["toolgate"]["proposals"][0]
        gateway = open_test_app(
            model=ScriptedChatModel(responses=[]),
            tools=registry,
            policy=self.policy,
            store=self.store,
            start=False,
        ).gateway
        decide(gateway, proposal["proposal_id"], principal("fiona"), "approve")
        return proposal, gateway

    def two_status_reads(
        self,
        handler: Any,
        thread: str,
        result_model: Any = None,
        read_retry: ReadRetry | None = None,
        timeout_s: float | None = None,
    ) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
        """Omar reads the status of ``worker`` (call ``c-worker``) and ``web`` (``c-web``) in one
        turn, with ``handler`` (and ``result_model``, if given) serving ``get_service_status``
        (reads retried by ``read_retry``, if given; its timeout ``timeout_s``, if given): the
        answers by call id, and the thread's final state."""
        status = self.registry.tools["get_service_status"]
        changed = replace(
            status,
            handler=handler,
            result_model=result_model or status.result_model,
            timeout_s=timeout_s if timeout_s is not None else status.timeout_s,
        )
        specs = [changed if s.name == status.name else s for s in self.registry.tools.values()]
        registry = Registry.of(self.registry.release, specs, self.system)
        model = ScriptedChatModel(
            responses=[
                ai(
                    "",
                    tool_call("get_service_status", {"service_alias": "worker"}, "c-worker"),
                    tool_call("get_service_status", {"service_alias": "web"}, "c-web"),
                ),
                ai("done"),
            ]
        )
        app = open_test_app(
            model=model,
            tools=registry,
            policy=self.policy,
            store=self.store,
            start=False,
            read_retry=read_retry,
        )
        state = start(app.compiled(), "two statuses", "omar", thread)
        answers = {m.tool_call_id: json.loads(str(m.content)) for m in tool_messages(state)}
        return answers, state

    def total_handler_calls(self) -> int:
        """Handler invocations of every tool."""
        return self.counter.total()

    def payments(self, order_id: str = "O-5512") -> int:
        """Requests the payment system received for ``order_id``."""
        return self.system.count("sor_payment_requests", order_id=order_id)

    def refunds(self, order_id: str = "O-5512") -> int:
        """Refunds the payment system performed for ``order_id``."""
        return self.system.count("sor_refunds", order_id=order_id)


def in_process_auth(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Harness:
    """A harness whose gateway and registry the LangGraph server's auth handler uses
    (`toolgate.graph.server.auth`'s ``server_parts``), so its handlers can be called in process."""
    from types import SimpleNamespace

    from toolgate.graph.server import auth as auth_module

    harness = Harness(SQLiteStore(tmp_path / "auth.sqlite", key=TEST_KEY))
    parts = SimpleNamespace(gateway=harness.gateway(), registry=harness.registry)
    monkeypatch.setattr(auth_module, "server_parts", lambda: parts)
    return harness


def start(graph: Any, text: str, user: str, thread: str, **context: Any) -> dict[str, Any]:
    """Start a thread as ``user`` (``context``: further `Context` fields, e.g. ``deadline_s``); the
    run's output as clients read it (`gateway_state`: the grouped keys as keys of their own)."""
    return gateway_state(
        graph.invoke(
            {"messages": [HumanMessage(text)]},
            {"configurable": {"thread_id": thread}},
            context=Context(principal=principal(user), **context),
        )
    )


def tool_messages(state: Mapping[str, Any]) -> list[ToolMessage]:
    """Every ToolMessage in a state."""
    return [m for m in state["messages"] if isinstance(m, ToolMessage)]


def cli_env(data_dir: Path, database_url: str | None = None, **extra: str) -> dict[str, str]:
    """Environment for a ``toolgate`` subprocess on ``data_dir`` (and PostgreSQL when given)."""
    # no OTEL_* either: a developer's exporter settings would give the test process an SDK provider
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TOOLGATE_", "OTEL_")) and k != "OPENAI_API_KEY"
    }
    env.update(
        {
            "TOOLGATE_DATA_DIR": str(data_dir),
            "TOOLGATE_MODEL": "offline",
            "TOOLGATE_AUDIT_KEY": TEST_KEY.decode(),
            "LANGSMITH_TRACING": "false",
            **extra,
        }
    )
    if database_url:
        env["TOOLGATE_DATABASE_URL"] = database_url
    return env


def toolgate(
    args: list[str], env: Mapping[str, str], *, check: bool = True, process: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run the ``toolgate`` CLI as a person would, on ``env`` and in ``TOOLGATE_DATA_DIR``.

    By default the CLI's own ``main`` runs in this process (`run_cli_in_process`: the same
    environment, working directory, empty stdin and captured streams a subprocess would have, at
    a fraction of its start-up cost). ``process=True`` runs it as a separate process: for tests
    whose subject is the process boundary itself (a kill, a clock of its own, the console script's
    start-up). A call from any thread but the main one is a separate process too: runs started
    from several threads are concurrent runs, and one process has one environment, working
    directory and set of streams. So is a run whose environment only a new process can apply
    (``LD_PRELOAD``, e.g. libfaketime's shifted clock)."""
    env = dict(env)
    if "--as" in args:  # the named person's own token, unless the test chose another (or none)
        env.setdefault("TOOLGATE_TOKEN", demo_token(args[args.index("--as") + 1]))
    cwd = env.get("TOOLGATE_DATA_DIR")
    if process or "LD_PRELOAD" in env or threading.current_thread() is not threading.main_thread():
        result = subprocess.run(
            [sys.executable, "-m", "toolgate", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=cwd,
        )
    else:
        result = run_cli_in_process(args, env, cwd=cwd)
    if check and result.returncode != 0:
        raise AssertionError(f"toolgate {args} exited {result.returncode}\n{result.stdout}\n{result.stderr}")
    return result


_CLI_LOCK = threading.Lock()
"""One in-process CLI run at a time: it owns the process's environment, cwd and streams."""


def run_cli_in_process(
    args: Sequence[str], env: Mapping[str, str], *, cwd: str | Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``toolgate ARGS`` through `toolgate.cli.app.main` in this process, shaped like a subprocess run.

    For its duration the process environment is exactly ``env``, the working directory ``cwd``,
    stdin is empty and stdout and stderr are captured; warnings print to stderr as they would in
    a fresh interpreter (not raised by the suite's ``filterwarnings = error``), and log records
    of WARNING and above reach stderr as Python's last-resort handler would print them. An
    exception that escapes ``main`` is printed as a traceback with exit code 1, as the
    interpreter would. Imports are a new process's (`_import_state_of_a_new_process`). Signal
    handlers and everything above are restored afterwards."""
    from toolgate.cli.app import main

    out, err = io.StringIO(), io.StringIO()
    handler = logging.StreamHandler(err)
    handler.setLevel(logging.WARNING)
    with _CLI_LOCK:
        saved_env, saved_argv, saved_cwd = dict(os.environ), sys.argv, os.getcwd()
        saved_signals = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
        root = logging.getLogger()
        try:
            os.environ.clear()
            os.environ.update(env)
            if cwd is not None:
                os.chdir(cwd)
            sys.argv = ["toolgate", *args]
            root.addHandler(handler)
            with (
                contextlib.redirect_stdout(out),
                contextlib.redirect_stderr(err),
                _empty_stdin(),
                _import_state_of_a_new_process(),
                warnings.catch_warnings(),
            ):
                warnings.simplefilter("default")
                code = _exit_code(main)
        finally:
            root.removeHandler(handler)
            for sig, previous in saved_signals.items():
                signal.signal(sig, previous)
            os.chdir(saved_cwd)
            sys.argv = saved_argv
            os.environ.clear()
            os.environ.update(saved_env)
    return subprocess.CompletedProcess(["toolgate", *args], code, out.getvalue(), err.getvalue())


_INSTALLED = tuple(os.path.realpath(p) for p in {sys.prefix, sys.base_prefix, str(REPO)})
"""Where this environment's own modules live: the interpreter, the venv and the repo."""


def _foreign(location: str | None) -> bool:
    """A path outside the installation (e.g. a release a test scaffolded)."""
    return bool(location) and _outside_installation(str(location))


@functools.cache
def _outside_installation(location: str) -> bool:
    """Asked for every imported module on every run: resolved once per path."""
    return not os.path.realpath(location).startswith(_INSTALLED)


_PROCESS_MODULES = frozenset({"__main__", "__mp_main__"})
"""The running program itself: a new process has one too, whatever its file."""


@contextlib.contextmanager
def _import_state_of_a_new_process() -> Iterator[None]:
    """Imports as a new process would see them, and this process's restored afterwards.

    `toolgate.releases.loader` puts a release's package root on ``sys.path`` and imports it, and a
    test may have imported a release itself: a scaffolded release of the same name in another
    directory, or the same one rewritten, must load from its own files in the run, as it would in
    a new process. So foreign modules and ``sys.path`` entries (`_foreign`) are set aside for the
    run, and the modules it imported are forgotten after it; the installation's stay imported."""
    saved_path = list(sys.path)
    sys.path[:] = [entry for entry in saved_path if not _foreign(entry)]
    set_aside = {
        name: module
        for name, module in sys.modules.items()
        if name not in _PROCESS_MODULES and _foreign(getattr(module, "__file__", None))
    }
    for name in set_aside:
        del sys.modules[name]
    before = set(sys.modules)
    importlib.invalidate_caches()  # files a test just wrote are importable, as in a new process
    try:
        yield
    finally:
        sys.path[:] = saved_path
        for name in set(sys.modules) - before:
            if _foreign(getattr(sys.modules[name], "__file__", None)):
                del sys.modules[name]
        sys.modules.update(set_aside)


@contextlib.contextmanager
def _empty_stdin() -> Iterator[None]:
    saved = sys.stdin
    sys.stdin = io.StringIO("")
    try:
        yield
    finally:
        sys.stdin = saved


def _exit_code(main: Any) -> int:
    """What the interpreter would exit with after ``main()``."""
    try:
        main()
    except SystemExit as exc:
        if exc.code is None:
            return 0
        if isinstance(exc.code, int):
            return exc.code
        print(exc.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        raise
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


def shift_store_clock(monkeypatch: Any, store: Store, delta: timedelta) -> None:
    """Move ``store``'s clock by ``delta`` (expiry, leases and windows all follow the store's clock,
    and so does `Store.calibrated_now`, which the model node and dispatch judge by)."""
    from toolgate.clock import iso, parse_iso

    read = store._tx_now  # type: ignore[attr-defined]
    monkeypatch.setattr(store, "_tx_now", lambda tx: iso(parse_iso(read(tx)) + delta))
    if isinstance(store, SQLiteStore):  # `calibrated_now` is `now` there: it follows
        now = store.now
        monkeypatch.setattr(store, "now", lambda: now() + delta)
    else:  # `now` reads through `_tx_now`; the calibrated clock counts from the server's readings
        calibrated = store.calibrated_now
        monkeypatch.setattr(store, "calibrated_now", lambda: calibrated() + delta)
        monkeypatch.setattr(store, "_clock_sql", lambda: None)  # a read's time is asked of `now`


def set_store_now(monkeypatch: Any, store: Store, when: datetime) -> None:
    """Hold ``store``'s clock (`Store.now`) at ``when``, and the calibrated clock the model node and
    dispatch judge by (`Store.calibrated_now`) with it."""
    monkeypatch.setattr(store, "now", lambda: when)
    monkeypatch.setattr(store, "calibrated_now", lambda: when)
    monkeypatch.setattr(store, "_clock_sql", lambda: None)  # a read's time is asked of `now`


def open_test_store(data_dir: Path, database_url: str | None = None) -> Store:
    """The store a ``toolgate`` subprocess on ``data_dir`` (or ``database_url``) uses."""
    if database_url:
        return PostgresStore(database_url, key=TEST_KEY)
    return SQLiteStore(data_dir / "toolgate.sqlite", key=TEST_KEY)


def seed_people(data_dir: Path, database_url: str | None = None) -> None:
    """Create the store a CLI subprocess will use and add the demo people (with their demo tokens)."""
    store = open_test_store(data_dir, database_url)
    try:
        initialize_store(store, DEMO_RELEASES["ops-tools/1.1.0"])
        seed_demo_identities(IdentityDirectory(store))
    finally:
        store.close()


def kv_lines(text: str) -> list[dict[str, str]]:
    """Parse ``key=value key=value`` output lines."""
    rows = []
    for line in text.splitlines():
        pairs = [part.split("=", 1) for part in line.split() if "=" in part]
        if pairs:
            rows.append({k: v for k, v in pairs})
    return rows


def postgres_text(url: str) -> str:
    """Every row of every table in the database, as PostgreSQL prints it (bytea as hex)."""
    with psycopg.connect(url) as conn:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = 'public' AND table_type = 'BASE TABLE'"
            )
        ]
        assert {"checkpoints", "checkpoint_blobs", "checkpoint_writes"} <= set(tables), tables
        return "\n".join(
            str(row[0])
            for table in tables
            for row in conn.execute(sql.SQL("SELECT t::text FROM {} t").format(sql.Identifier(table)))
        )


# --------------------------------------------------------------------------- scans and filters


def audit_events(store: Store, name: str) -> list[AuditEvent]:
    """The audit events named ``name`` (``model.retry``, ``model.failed``, ...), in chain order."""
    return [e for e in store.audit.events() if e.event == name]


def log_text(caplog: pytest.LogCaptureFixture) -> str:
    """Every captured log record, its attributes included, and the captured text."""
    return "\n".join(f"{r.name} {r.getMessage()} {r.__dict__!r}" for r in caplog.records) + caplog.text


def files_holding(root: Path, text: str) -> list[Path]:
    """The files under ``root`` whose bytes contain ``text``."""
    return [p for p in root.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


def check_key_nowhere(
    data_dir: Path, database_url: str | None, printed: str, *, key: str, prefix: str, kept: str
) -> None:
    """``key`` is in no file under ``data_dir`` (checkpoints, store) and, on PostgreSQL, in no
    table; neither it nor its ``prefix`` is in ``printed``. ``kept`` is an opaque item the
    checkpoints hold: found where the scan reads, so the scan is not vacuous."""
    files = {p: p.read_bytes() for p in data_dir.rglob("*") if p.is_file()}
    assert not [p for p, data in files.items() if key.encode() in data]
    assert key not in printed and prefix not in printed
    if database_url is None:
        checkpoints = files[data_dir / "checkpoints.sqlite"] + files.get(
            data_dir / "checkpoints.sqlite-wal", b""
        )
        assert kept.encode() in checkpoints  # the scan reads where the opaque item is kept
    else:
        tables = postgres_text(database_url)
        assert key not in tables and key.encode().hex() not in tables
        assert kept.encode().hex() in tables  # the scan reads where the opaque item is kept


def check_each_free_of(texts: Sequence[str], forbidden: Sequence[str]) -> None:
    """None of ``forbidden`` (a key and what would give it away) is in any of ``texts``."""
    for text in texts:
        for needle in forbidden:
            assert needle not in text, needle


def answer_waits(gen: Any, counted: Callable[[], None]) -> Any:
    """``gen`` (a psycopg generator run by ``Connection.wait``), calling ``counted`` once if it
    waited for the server's answer: it asked to wait for reading (`Wait.R`), or for reading or
    writing (`Wait.RW`) and the socket had data to read. A wait only to write (a pipeline queueing
    a statement behind another, nothing answered yet) is no round trip: the pipeline's answers
    are all waited for once, behind its sync."""
    ready, waited = None, False
    while True:
        try:
            state = gen.send(ready)
        except StopIteration as done:
            return done.value
        ready = yield state
        if not waited and (state == Wait.R or (state == Wait.RW and ready is not None and ready & Ready.R)):
            waited = True
            counted()


@contextlib.contextmanager
def wire_round_trips() -> Iterator[dict[str, int]]:
    """Count this process's PostgreSQL round trips while the block runs: ``counts["round_trips"]``.

    A round trip is the client waiting for the server's answer. psycopg does every exchange with
    the server through ``Connection.wait(generator)``, and the generator yields whenever it must
    wait on the socket: one ``wait`` whose generator waited for an answer (`answer_waits`) is one
    round trip (a statement, a multi-statement script however many statements it carries, a BEGIN
    or COMMIT of ``Connection.transaction()``, a pipeline's statements behind its one sync). A
    ``wait`` that returns without waiting is none (the pool's ``commit()`` of an idle autocommit
    session sends nothing). Statements queued to travel with a later one
    (`toolgate.store.tx.Tx.send`) are therefore counted with the one that carries them."""
    counts = {"round_trips": 0}
    wait = psycopg.Connection.wait

    def one() -> None:
        counts["round_trips"] += 1

    def counted_wait(self: psycopg.Connection[Any], gen: Any, *args: Any, **kwargs: Any) -> Any:
        return wait(self, answer_waits(gen, one), *args, **kwargs)

    psycopg.Connection.wait = counted_wait  # type: ignore[method-assign]
    try:
        yield counts
    finally:
        psycopg.Connection.wait = wait  # type: ignore[method-assign]
