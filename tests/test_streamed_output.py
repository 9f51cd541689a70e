"""Streamed tool output for long reads (issue 32, the chapter's §11.4): a read handler that yields
chunks has them sent to the client through LangGraph's custom stream (``stream_mode="custom"``),
redacted and bounded by the tool's ``max_output_bytes``, while the model gets one bounded
`ToolMessage` with the matching call id. In process, and through a client of the real
``langgraph dev`` serving `tests/streamed_release.py`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Generator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from server_support import LOCAL_HOSTS, Server, client_as, people_server
from streamed_release import MAX_OUTPUT_BYTES, PLANTED_KEY, TOOL, log_line, release, tools
from support import TEST_KEY, principal

from toolgate.errors import RegistryError
from toolgate.graph import Context
from toolgate.graph.delivery.streamed_output import STREAM_EVENT, OutputStream, drained
from toolgate.policy.identities import IdentityDirectory
from toolgate.releases.bundle import ReleaseEnv
from toolgate.store import SQLiteStore
from toolgate.testing import ScriptedChatModel, ai, open_test_app, tool_call
from toolgate.tools.demo.identities import seed_demo_identities
from toolgate.tools.spec import ApprovalClass

LINES = 200
"""Lines read: about 8 KB of log, four times the tool's output bound."""


def _chunks(parts: list[Any]) -> list[dict[str, Any]]:
    return [p for p in parts if isinstance(p, dict) and p.get("toolgate") == STREAM_EVENT]


def _check_stream(chunks: list[dict[str, Any]], call_id: str) -> None:
    """The chunks of one call: in order, the planted key redacted, cut at the bound."""
    assert chunks and {c["call_id"] for c in chunks} == {call_id} and {c["tool"] for c in chunks} == {TOOL}
    assert [c["seq"] for c in chunks] == list(range(len(chunks))) and {c["attempt"] for c in chunks} == {1}
    text = "".join(c["chunk"] for c in chunks)
    assert PLANTED_KEY not in text and "[REDACTED]" in text  # line 3 arrived, its key did not
    assert text.startswith(log_line(1) + log_line(2))
    assert len(text.encode()) == MAX_OUTPUT_BYTES and chunks[-1]["truncated"] is True
    assert not any(c["truncated"] for c in chunks[:-1])


def test_a_long_read_streams_its_chunks_and_answers_the_model_with_the_bounded_result(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "t.sqlite", key=TEST_KEY)
    model = ScriptedChatModel(responses=[ai("", tool_call(TOOL, {"lines": LINES}, "c-tail")), ai("done")])
    graph = open_test_app(release=release, model=model, store=store).compiled()
    seed_demo_identities(IdentityDirectory(store))
    parts: list[Any] = []
    final: dict[str, Any] = {}
    for mode, part in graph.stream(
        {"messages": [HumanMessage("tail the log")]},
        {"configurable": {"thread_id": "t-stream"}},
        context=Context(principal=principal("omar")),
        stream_mode=["custom", "values"],
    ):
        if mode == "custom":
            parts.append(part)
        else:
            final = part
    _check_stream(_chunks(parts), "c-tail")
    [answer] = [m for m in final["messages"] if isinstance(m, ToolMessage)]
    assert answer.tool_call_id == "c-tail"
    body = json.loads(str(answer.content))
    assert body["status"] == "completed" and body["data"]["lines_read"] == LINES
    assert len(str(answer.content).encode()) <= MAX_OUTPUT_BYTES
    model.assert_complete()
    store.close()


def test_an_output_stream_restarts_numbering_for_a_retried_attempt() -> None:
    sent: list[dict[str, Any]] = []
    stream = OutputStream(sent.append, call_id="c1", tool="t", max_bytes=10)
    stream.emit("abcdef")
    stream.emit("ghijkl")  # cut at 10 bytes
    stream.emit("dropped")
    stream.next_attempt()
    stream.emit({"token": "secret-value", "line": 1})
    assert [(e["attempt"], e["seq"], e["chunk"], e["truncated"]) for e in sent[:2]] == [
        (1, 0, "abcdef", False),
        (1, 1, "ghij", True),
    ]
    assert len(sent) == 3 and sent[2]["attempt"] == 2 and sent[2]["seq"] == 0
    assert "secret-value" not in sent[2]["chunk"]


def test_a_chunk_that_is_a_tuple_or_has_a_secret_in_a_key_is_redacted() -> None:
    """A chunk is any value the handler yields: a tuple is redacted like a list (by its keys too),
    not serialized past the redaction."""
    sent: list[dict[str, Any]] = []
    stream = OutputStream(sent.append, call_id="c1", tool="t", max_bytes=10_000)
    stream.emit(({"password": "hunter2", "line": 1},))
    stream.emit({"sk-live-abcdefghijklmnopqrstuvwxyz": "rotated"})
    assert [json.loads(e["chunk"]) for e in sent] == [[{"password": "[REDACTED]", "line": 1}], {"[REDACTED]": "rotated"}]


def test_a_plain_handler_is_unchanged_and_a_write_cannot_stream(tmp_path: Path) -> None:
    def plain(args: Any, ctx: Any) -> str:
        return "result"

    def chunks(args: Any, ctx: Any) -> Generator[str, None, str]:
        yield "a"
        return "done"

    assert drained(plain, None)(None, None) == "result"
    assert drained(chunks, None)(None, None) == "done"  # no stream: the chunks are dropped
    store = SQLiteStore(tmp_path / "t.sqlite", key=TEST_KEY)
    [tail] = tools(ReleaseEnv(store, secret=TEST_KEY))
    store.close()
    with pytest.raises(RegistryError, match="cannot stream"):
        replace(tail, risk="caution", approval=ApprovalClass.role("operator"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    env = {"TOOLGATE_RELEASE": f"{Path(__file__).parent / 'streamed_release.py'}:release"}
    with pytest.MonkeyPatch.context() as mp, people_server(tmp_path_factory.mktemp("lgdev-tail"), env) as srv:
        mp.setenv("NO_PROXY", LOCAL_HOSTS)
        mp.setenv("no_proxy", LOCAL_HOSTS)
        yield srv


@pytest.mark.server
@pytest.mark.slow
def test_a_client_of_the_real_server_receives_the_chunks_with_stream_mode_custom(server: Server) -> None:
    with client_as(server, "omar") as client:
        thread_id = client.threads.create()["thread_id"]
        parts = list(
            client.runs.stream(
                thread_id,
                "toolgate",
                input={"messages": [{"role": "user", "content": f'call {TOOL} {{"lines": {LINES}}}'}]},
                stream_mode="custom",
            )
        )
        state = client.threads.get_state(thread_id)
    assert not [p for p in parts if p.event == "error"], [p.data for p in parts]
    chunks = _chunks([p.data for p in parts if p.event == "custom"])
    [answer] = [m for m in state["values"]["messages"] if m["type"] == "tool"]
    _check_stream(chunks, answer["tool_call_id"])
    body = json.loads(answer["content"])
    assert body["status"] == "completed" and body["data"]["lines_read"] == LINES
    assert PLANTED_KEY not in json.dumps(state["values"])


def test_an_attempt_given_up_sends_no_late_chunk_and_is_closed_at_its_next_yield(tmp_path: Path) -> None:
    """A read's first attempt times out while it still yields: its chunks after that would go out
    under the retry's attempt number (and eat its budget), and a generator that yields forever
    would hold its worker and handler slot for good. It is closed at its next chunk instead;
    the client sees each attempt's own chunks only, and nothing after the call was answered."""
    from support import Harness

    from toolgate.graph.delivery.executor import Executor
    from toolgate.policy.retry import ReadRetry
    from toolgate.tools import Registry

    store = SQLiteStore(tmp_path / "t.sqlite", key=TEST_KEY)
    harness = Harness(store)
    status = harness.registry.tools["get_service_status"]
    release_first, first_ended, started = threading.Event(), threading.Event(), iter(range(1, 10))
    late: list[int] = []

    def handler(args: Any, ctx: Any) -> Generator[str, None, Any]:
        if next(started) == 1:
            try:
                yield "attempt one, in time\n"
                assert release_first.wait(60)  # held past its timeout, then yields on
                for n in range(1000):
                    late.append(n)
                    yield f"attempt one, late {n}\n"
                return status.result_model(service_alias="web", state="stale", restarts=0)
            finally:
                first_ended.set()
        yield "attempt two\n"
        return status.result_model(service_alias="web", state="running", restarts=0)

    spec = replace(status, handler=handler, handler_revision="stream-retry/1", timeout_s=2, max_output_bytes=4096)
    registry = Registry.of(harness.registry.release, [spec], harness.system)
    gateway = harness.gateway()
    retry = ReadRetry(max_attempts=2, sleep=lambda _: None)
    executor = Executor(store, registry, gateway.auditor, gateway.directory, read_retry=retry)
    sent: list[dict[str, Any]] = []
    stream = OutputStream(sent.append, call_id="c1", tool=spec.name, max_bytes=4096)
    result = executor.run_read(spec, {"service_alias": "web"}, principal("cust-ada"), stream=stream)
    assert result["state"] == "running"
    release_first.set()
    assert first_ended.wait(30)
    assert late == [0]  # closed at its first chunk past its timeout, not run to its end
    assert [(e["attempt"], e["seq"], e["chunk"]) for e in sent] == [
        (1, 0, "attempt one, in time\n"),
        (2, 0, "attempt two\n"),
    ]
