"""The threads a run starts: a graph compiled with a checkpointer gives each run a background
pool of `toolgate.graph.builder.RUN_THREADS` threads, where LangGraph's default pool started one
per checkpoint write still pending (about 4.5 per read call, issue 31).

Held here: a read call starts at most that many pool threads and still reads, answers and audits
as before; a run's own ``max_concurrency`` still wins; an async run with a checkpointer (its
writes gated by the pool's semaphore) finishes; a streamed run, sync and async, whose stream
waiter holds a pool thread (or the semaphore) while its node runs on the pool, finishes (with one
thread it never did); the server's graph (compiled without a checkpointer) keeps LangGraph's
defaults.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.runnables.config import ContextThreadPoolExecutor
from langgraph.checkpoint.memory import InMemorySaver
from support import Harness, principal, tool_messages

from toolgate.graph import Context
from toolgate.graph.builder import RUN_THREADS, build_graph
from toolgate.graph.state import gateway_state
from toolgate.store import SQLiteStore
from toolgate.testing import ScriptedChatModel, ai, tool_call

LOOKUP = {"order_id": "O-5512"}


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    return Harness(SQLiteStore(tmp_path / "t.sqlite", key=b"k" * 32))


@pytest.fixture
def pool_threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Names of the thread-pool threads started while the test runs (LangGraph's run executor
    names its threads ``ThreadPoolExecutor-N_M``)."""
    started: list[str] = []
    original = threading.Thread.start

    def start(self: threading.Thread) -> None:
        if self.name.startswith("ThreadPoolExecutor"):
            started.append(self.name)
        original(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    yield started


@pytest.fixture
def pool_sizes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int | None]]:
    """``max_workers`` of every run pool LangGraph makes while the test runs (its runs make
    theirs with `get_executor_for_config`, from the run's ``max_concurrency``)."""
    sizes: list[int | None] = []
    original = ContextThreadPoolExecutor.__init__

    def init(self: ContextThreadPoolExecutor, max_workers: int | None = None, *args: Any, **kwargs: Any) -> None:
        sizes.append(max_workers)
        original(self, max_workers, *args, **kwargs)

    monkeypatch.setattr(ContextThreadPoolExecutor, "__init__", init)
    yield sizes


def reads(calls: int) -> ScriptedChatModel:
    """``calls`` read calls, each a lookup and then an answer."""
    responses = []
    for n in range(calls):
        responses += [ai("", tool_call("lookup_order", LOOKUP, f"c{n}")), ai("Here it is.")]
    return ScriptedChatModel(responses=responses)


def ask(graph: Any, thread: str, **config: Any) -> dict[str, Any]:
    return gateway_state(
        graph.invoke(
            {"messages": [HumanMessage("Where is O-5512?")]},
            {"configurable": {"thread_id": thread}, **config},
            context=Context(principal=principal("cust-ada")),
        )
    )


def test_a_read_call_starts_at_most_its_pool_threads_and_reads_answers_and_audits_as_before(
    harness: Harness, pool_threads: list[str]
) -> None:
    graph = harness.graph(reads(3))
    for n in range(3):
        before = len(pool_threads)
        final = ask(graph, f"t-{n}")
        assert 1 <= len(pool_threads) - before <= RUN_THREADS == 2  # LangGraph's default started about 4.5
        answers = tool_messages(final)
        assert len(answers) == 1 and "O-5512" in str(answers[0].content)
        assert final["status"] == "done" and final["messages"][-1].content
    assert harness.total_handler_calls() == 3  # each read ran once
    events = [e.event for e in harness.store.audit.events()]
    assert events.count("call.completed") == 3 and events.count("model.response") == 6


def test_a_runs_own_max_concurrency_still_wins(harness: Harness, pool_sizes: list[int | None]) -> None:
    graph = harness.graph(reads(2))
    ask(graph, "t-default")
    assert pool_sizes == [RUN_THREADS]
    final = ask(graph, "t-own", max_concurrency=8)
    assert pool_sizes == [RUN_THREADS, 8]
    assert len(tool_messages(final)) == 1 and harness.total_handler_calls() == 2


def test_an_async_run_with_a_checkpointer_finishes(harness: Harness) -> None:
    """Async runs gate their checkpoint writes on a semaphore of ``max_concurrency``: each write
    waits only for writes submitted before it, so one at a time cannot wait for itself."""
    graph = harness.graph(reads(2))

    async def run(thread: str) -> dict[str, Any]:
        out = await graph.ainvoke(
            {"messages": [HumanMessage("Where is O-5512?")]},
            {"configurable": {"thread_id": thread}},
            context=Context(principal=principal("cust-ada")),
        )
        return gateway_state(out)

    for thread in ("t-async-1", "t-async-2"):
        final = asyncio.run(asyncio.wait_for(run(thread), timeout=60))
        assert len(tool_messages(final)) == 1 and final["status"] == "done"
        saved = gateway_state(graph.get_state({"configurable": {"thread_id": thread}}).values)
        assert saved["seal"] == final["seal"]  # the last checkpoint was written
    assert harness.total_handler_calls() == 2


def streamed(graph: Any, thread: str, *, use_async: bool) -> list[Any]:
    """Every chunk of a read call streamed in ``custom`` and ``updates`` modes (LangGraph then
    keeps a waiter for the stream on the run's pool and runs each node there), on a thread of its
    own: a run that deadlocks fails the test after a minute instead of hanging the suite."""
    chunks: list[Any] = []
    failed: list[BaseException] = []
    args = ({"messages": [HumanMessage("Where is O-5512?")]}, {"configurable": {"thread_id": thread}})
    kwargs: dict[str, Any] = {"context": Context(principal=principal("cust-ada")), "stream_mode": ["custom", "updates"]}

    async def collect() -> None:
        async for chunk in graph.astream(*args, **kwargs):
            chunks.append(chunk)

    def run() -> None:
        try:
            if use_async:
                asyncio.run(collect())
            else:
                chunks.extend(graph.stream(*args, **kwargs))
        except BaseException as exc:  # reported to the test's thread
            failed.append(exc)

    runner = threading.Thread(target=run, name=f"streamed-{thread}", daemon=True)
    runner.start()
    runner.join(timeout=60)
    assert not runner.is_alive(), "the streamed run never finished (its node never started)"
    assert not failed, failed
    return chunks


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_a_streamed_run_whose_waiter_holds_a_pool_thread_finishes(harness: Harness, use_async: bool) -> None:
    graph = harness.graph(reads(1))
    chunks = streamed(graph, f"t-streamed-{use_async}", use_async=use_async)
    assert any(mode == "updates" and "execute" in update for mode, update in chunks)
    final = gateway_state(graph.get_state({"configurable": {"thread_id": f"t-streamed-{use_async}"}}).values)
    assert final["status"] == "done" and len(tool_messages(final)) == 1
    assert harness.total_handler_calls() == 1


def test_the_servers_graph_keeps_langgraphs_defaults(harness: Harness) -> None:
    assert not (build_graph(gateway=harness.gateway()).config or {}).get("max_concurrency")
    with_saver = build_graph(gateway=harness.gateway(), checkpointer=InMemorySaver())
    assert with_saver.config["max_concurrency"] == RUN_THREADS
