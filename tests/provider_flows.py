"""The flows the provider tests share, whichever provider's replay server they run against.

A `Provider` holds what differs between providers: the model id, its replay server, how its client
takes the server's URL and how a process is kept to that server with the fake key (`OPENAI` and
`ANTHROPIC` below). The flows are the same for both: a gateway graph with the real client against
the replay (`run_task`, `ModelErrors`, an approved write retried after its model turn fails) and
the CLI's run, approve and resume in separate processes (`Cli`). The scans for the key and the
audit event filters they use are in tests/support.py. The test files keep only what is their
provider's own: scripts, request bodies and the assertions on them.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import replay_anthropic
import replay_openai
from langchain_core.language_models import BaseChatModel
from langgraph.types import Command
from replay_openai import ReplayServer, Reply
from support import REFUND_REQUEST, TEST_KEY, Harness, audit_events, cli_env, kv_lines, principal, start
from support import toolgate as run_toolgate

from toolgate.config import Settings
from toolgate.graph import Context
from toolgate.graph.review.decisions import decide
from toolgate.models.selection import load_chat_model
from toolgate.store import AuditEvent, SQLiteStore, Store
from toolgate.tools.demo import DemoSystem

# --------------------------------------------------------------------------- providers


@dataclass(frozen=True)
class Provider:
    """What the shared flows need to know of one provider."""

    model: str
    """``provider:model``, as ``TOOLGATE_MODEL`` takes it (pinned by ops-tools/1.0.0)."""
    serve: Callable[[list[Reply]], ReplayServer]
    """The replay server for a script (enter it to serve)."""
    base_url: Callable[[ReplayServer], str]
    """The server's URL as this provider's client takes it."""
    local_only: Callable[[MutableMapping[str, str]], MutableMapping[str, str]]
    """An environment kept to the local server, with the fake key (for a subprocess)."""
    local_only_here: Callable[[Any], None]
    """This process's environment made `local_only` (given ``monkeypatch``)."""
    thinking_tokens: int = 0
    """The extended-thinking budget the tests run with (0: off)."""

    def settings(self, base_url: str | None, **fields: Any) -> Settings:
        """Settings of this provider's real client on ``base_url`` (``fields`` override)."""
        chosen: dict[str, Any] = {"data_dir": Path("."), "model": self.model, "allow_model_requests": True}
        if self.thinking_tokens:
            chosen["model_thinking_tokens"] = self.thinking_tokens
        return Settings(model_base_url=base_url, **{**chosen, **fields})

    def model_on(self, replay: ReplayServer) -> BaseChatModel:
        """This provider's real chat model talking to ``replay``."""
        return load_chat_model(self.settings(self.base_url(replay)))

    def graph(self, harness: Harness, replay: ReplayServer) -> Any:
        """The gateway graph on ``harness`` with this provider's real client talking to ``replay``."""
        return harness.graph(self.model_on(replay))

    def cli_env(self, data_dir: Path, database_url: str | None, replay: ReplayServer) -> dict[str, str]:
        """Environment for a ``toolgate`` subprocess on ops-tools/1.0.0 with this provider's model."""
        env = dict(
            self.local_only(cli_env(data_dir, database_url)),
            TOOLGATE_MODEL=self.model,
            TOOLGATE_MODEL_BASE_URL=self.base_url(replay),
            TOOLGATE_RELEASE="ops-tools/1.0.0",
        )
        if self.thinking_tokens:
            env["TOOLGATE_MODEL_THINKING_TOKENS"] = str(self.thinking_tokens)
        return env


OPENAI = Provider(
    "openai:gpt-5-mini",
    ReplayServer,
    lambda replay: replay.base_url,
    replay_openai.local_only,
    replay_openai.local_only_here,
)
"""``ChatOpenAI`` on the Responses API (tests/replay_openai.py)."""
ANTHROPIC = Provider(
    f"anthropic:{replay_anthropic.MODEL}",
    replay_anthropic.messages_server,
    replay_anthropic.root_url,
    replay_anthropic.local_only,
    replay_anthropic.local_only_here,
    thinking_tokens=1024,
)
"""``ChatAnthropic`` with extended thinking on (tests/replay_anthropic.py)."""


def local_harness(provider: Provider) -> Any:
    """A ``harness`` fixture: a gateway on a fresh SQLite store, this process kept to the local
    server of ``provider`` (assign it to ``harness`` in a test module)."""

    @pytest.fixture
    def harness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
        provider.local_only_here(monkeypatch)
        store = SQLiteStore(tmp_path / "toolgate.sqlite", key=TEST_KEY)
        try:
            yield Harness(store)
        finally:
            store.close()

    return harness


# --------------------------------------------------------------------------- in this process


def run_task(
    provider: Provider, harness: Harness, script: list[Reply], text: str, thread: str, **context: Any
) -> tuple[dict[str, Any], ReplayServer]:
    """One task as cust-ada with ``provider``'s real client on the replay of ``script``."""
    with provider.serve(script) as replay:
        final = start(provider.graph(harness, replay), text, "cust-ada", thread, **context)
    return final, replay


@dataclass(frozen=True)
class ModelErrors:
    """Model errors by class with one provider's real client: each task runs as cust-ada on
    ``thread``, and ``answer`` is the reply that ends a task well once the errors are past."""

    provider: Provider
    thread: str
    answer: Reply

    def run(
        self, harness: Harness, script: list[Reply], text: str, **context: Any
    ) -> tuple[dict[str, Any], ReplayServer]:
        """One task on the replay of ``script``."""
        return run_task(self.provider, harness, script, text, self.thread, **context)

    def check_one_retry_after_429(self, harness: Harness, rate_limited: Reply) -> None:
        """A 429, then the answer: the same request once more, one retry event, the script used up."""
        final, replay = self.run(harness, [rate_limited, self.answer], "where is my order O-5512?")
        assert final["status"] == "done" and "delivered" in final["messages"][-1].content
        first, again = replay.bodies()
        assert again == first  # the same request, once more
        [retry] = audit_events(harness.store, "model.retry")
        assert (retry.code, retry.detail["attempt"]) == ("http_429", 1)
        assert 0 <= retry.detail["delay_ms"] <= 500  # full jitter under the first cap (0.5 s)
        assert replay.script == []

    def check_retried(
        self, harness: Harness, errors: list[Reply], expected: list[tuple[str, int]]
    ) -> list[AuditEvent]:
        """Retried errors, then the answer: the task is done after one request per error and one
        more, with a retry event (code, attempt) per error. Returns those events."""
        final, replay = self.run(harness, [*errors, self.answer], "where is my order O-5512?")
        assert final["status"] == "done" and len(replay.bodies()) == len(errors) + 1
        retries = audit_events(harness.store, "model.retry")
        assert [(e.code, e.detail["attempt"]) for e in retries] == expected
        return retries

    def check_attempts_run_out(self, harness: Harness, error: Reply, status: int) -> None:
        """The same retried error three times: three attempts in all, no fourth, and the task
        stops for review."""
        final, replay = self.run(harness, [error, error, error, self.answer], "and O-5513?")
        assert len(replay.bodies()) == 3 and replay.script == [self.answer]  # three attempts, no fourth
        assert (final["status"], final["status_reason"]) == (
            "needs_review",
            f"model request failed (HTTP {status})",
        )

    def check_sent_once_and_stopped(self, harness: Harness, reply: Reply, status: int) -> tuple[str, str]:
        """A 400 or a 401: sent once, no retry, one ``model.failed``, a clear status. Returns the
        audit log as text and what the task showed, for the provider's own key checks."""
        final, replay = self.run(harness, [reply, self.answer], "where is my order O-5512?")
        assert len(replay.bodies()) == 1 and replay.script == [self.answer]
        assert (final["status"], final["status_reason"]) == (
            "needs_review",
            f"model request failed (HTTP {status})",
        )
        assert audit_events(harness.store, "model.retry") == []
        [failed] = audit_events(harness.store, "model.failed")
        assert failed.code == f"http_{status}"
        recorded = json.dumps([dataclasses.asdict(e) for e in harness.store.audit.events()], default=str)
        return recorded, final["messages"][-1].content


def approved_write_retried(
    provider: Provider, harness: Harness, script: list[Reply], thread: str, call_id: str
) -> dict[str, Any]:
    """The refund request proposes a gated write; fiona approves it; the thread resumes and the model
    turn after the write is retried on the errors of ``script``. The write ran once and completed,
    and the turn went out three times unchanged. Returns the last request body."""
    with provider.serve(script) as replay:
        graph = provider.graph(harness, replay)
        first = start(graph, REFUND_REQUEST, "cust-ada", thread)
        proposal = first["__interrupt__"][0].value["toolgate"]["proposals"][0]["proposal_id"]
        assert harness.handler_calls["issue_refund"] == 0
        decide(harness.gateway(), proposal, principal("fiona"), "approve")
        config: Any = {"configurable": {"thread_id": thread}}
        final = graph.invoke(Command(resume={"wake": True}), config, context=Context())

    assert harness.handler_calls["issue_refund"] == 1
    assert harness.payments() == 1 and harness.refunds() == 1
    assert final["status"] == "done" and final["outcomes"][call_id]["status"] == "completed"
    bodies = replay.bodies()
    assert len(bodies) == 4 and bodies[1] == bodies[2] == bodies[3]  # one turn, sent three times
    return bodies[3]


# --------------------------------------------------------------------------- across processes


@dataclass
class Cli:
    """The ``toolgate`` CLI in separate processes on one environment; every output is kept."""

    env: dict[str, str]
    outputs: list[subprocess.CompletedProcess[str]] = field(default_factory=list)

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run one command (it must succeed)."""
        result = run_toolgate(list(args), self.env)
        self.outputs.append(result)
        return result

    def printed(self) -> str:
        """What every command run so far printed, stdout and stderr."""
        return "\n".join(r.stdout + r.stderr for r in self.outputs)

    def refund_approved_and_resumed(
        self, replay: ReplayServer, thread: str, call_id: str
    ) -> tuple[str, subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
        """cust-ada's refund request waits for approval and that process exits; fiona approves in
        another (asking no model); a third resumes and the refund completes. Returns the proposal
        id and the outputs of ``run`` and ``resume``."""
        ran = self("run", REFUND_REQUEST, "--as", "cust-ada", "--thread", thread)
        waiting = kv_lines(ran.stdout)
        assert waiting[0]["status"] == "awaiting_approval", ran.stdout
        proposal = next(row for row in waiting if "proposal" in row)
        assert (proposal["tool"], proposal["execution_started"]) == ("issue_refund", "false")
        assert len(replay.bodies()) == 1  # the process that asked has exited; nothing else was sent

        approved = self("approve", proposal["proposal"], "--as", "fiona")
        assert "decision=approve reviewer=fiona status=approved" in approved.stdout
        assert len(replay.bodies()) == 1  # approving asks no model
        resumed = self("resume", thread)
        assert f"issue_refund [{call_id}]: completed" in resumed.stdout, resumed.stdout
        assert "went through" in resumed.stdout  # the model's words, as a summary
        return proposal["proposal"], ran, resumed

    def trace(self, proposal: str) -> tuple[str, subprocess.CompletedProcess[str]]:
        """``audit trace`` of the proposal's operation: its operation key and the trace output."""
        shown = self("proposals", "show", proposal)
        key = next(r["operation_key"] for r in kv_lines(shown.stdout) if "operation_key" in r)
        return key, self("audit", "trace", key, "--as", "audrey")


def check_refund_result(output: str) -> None:
    """The tool result sent back to the model: the refund of 4999 cents for O-5512 completed."""
    result = json.loads(output)
    assert (result["status"], result["data"]["order_id"], result["data"]["amount_cents"]) == (
        "completed",
        "O-5512",
        4999,
    )


def check_refunded_once(store: Store) -> None:
    """The payment system received one request for O-5512 and refunded it once."""
    records = DemoSystem(store)
    assert records.count("sor_payment_requests", order_id="O-5512") == 1
    assert records.count("sor_refunds", order_id="O-5512") == 1
