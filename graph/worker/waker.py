"""Waking interrupted threads once their approval is decided or their job wait is over, and
answering finished threads whose writes settled after they ended, on this LangGraph server.

A thread waiting for approval sleeps until something resumes it. The approval API wakes the
thread it just decided for (`wake_quietly`); the background waker (`run_waker`) wakes threads
whose approval was decided elsewhere (the CLI, another server). Both live here, apart from the
routes, because waking is the server's loopback business, not the reviewer's: it needs no caller,
runs on a timer, and reads thread state that clients may have rewritten.

A wake carries no authority: the graph re-reads the store and re-checks everything, so a wrong
wake is only a useless run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from typing import Any

import httpx
from langgraph_sdk import get_client
from starlette.concurrency import run_in_threadpool

from toolgate.graph.gateway import Gateway
from toolgate.graph.worker.answers import (
    MAX_WRITES_PER_THREAD,
    awaited_operation_keys,
    might_be_stale,
    stale_writes,
)
from toolgate.policy.output import redacted_traceback
from toolgate.settings import EnvSettings

log = logging.getLogger(__name__)

ASSISTANT_ID = "toolgate"
"""The graph id in ``langgraph.json``; wake runs are created on it."""
WAKER_INTERVAL_S: float = EnvSettings.model_fields["waker_interval_s"].default
"""How often the background waker looks for threads whose approval was decided elsewhere: the
default of ``TOOLGATE_WAKER_INTERVAL_S``, declared in `toolgate.settings`."""
MAX_AWAITED_PER_THREAD = MAX_WRITES_PER_THREAD
"""Operation keys read from one thread's (untrusted) state per waker round."""


@cache
def langgraph_client() -> Any:
    """The in-process client of this LangGraph server (no url: calls the same server, unauthenticated
    loopback, which only trusted server code can reach)."""
    return get_client()


async def wake_thread(thread_id: str) -> bool:
    """Resume ``thread_id`` on this server so it re-reads its approvals; True when a run started.

    Replaced in tests. A thread that is not on this server (404) or is already running (409) is
    fine: whoever holds it, or the waker's next round, picks the decision up."""
    try:
        await langgraph_client().runs.create(
            thread_id, ASSISTANT_ID, command={"resume": {"wake": True}}, multitask_strategy="reject"
        )
    except httpx.HTTPStatusError as exc:
        if exc.response.status_code in (404, 409):
            log.info("thread %s not woken (%s)", thread_id, exc.response.status_code)
            return False
        raise
    return True


async def wake_quietly(thread_id: str) -> bool:
    """Wake ``thread_id``; a failure is logged, never the request's failure (the decision is
    recorded, and the background waker retries)."""
    try:
        return await wake_thread(thread_id)
    except Exception as exc:  # the server's loopback client failing must not undo a recorded decision
        log.warning("could not wake thread %s; the waker will retry:\n%s", thread_id, redacted_traceback(exc))
        return False


def ready_waits(gw: Gateway) -> dict[str, tuple[tuple[str, str], ...]]:
    """Per thread, its job waits the store (a verified row) says are over (`toolgate.graph.nodes.wait`)."""
    ready: dict[str, list[tuple[str, str]]] = {}
    for wait in gw.store.waits.list("ready", limit=100):
        if wait.verified:
            ready.setdefault(wait.thread_id, []).append((wait.operation_key, "wait_ready"))
    return {thread: tuple(sorted(keys)) for thread, keys in ready.items()}


def _statuses(gw: Gateway, keys: Iterable[str]) -> dict[str, str]:
    operations = (gw.store.operations.get(key) for key in keys)
    return {op.operation_key: op.status for op in operations if op is not None}


Woken = dict[str, tuple[tuple[str, str], ...]]
"""Per thread, the decided operations it was last woken for (so a thread the graph left waiting
for the same reason is not woken again every round)."""


async def wake_decided_threads(gw: Gateway, client: Any, woken: Woken) -> list[str]:
    """One round of the waker: wake each interrupted thread that awaits an operation no longer
    ``pending_approval`` in the store; returns the threads a run was started on."""
    threads = await client.threads.search(status="interrupted", limit=100)
    awaited: dict[str, list[str]] = {}
    interrupted: set[str] = set()
    for thread in threads if isinstance(threads, list) else []:
        thread_id = thread.get("thread_id") if isinstance(thread, Mapping) else None
        if not isinstance(thread_id, str) or not thread_id:
            continue
        interrupted.add(thread_id)
        values = thread.get("values")
        if not isinstance(values, Mapping):
            state = await client.threads.get_state(thread_id)
            values = state.get("values") if isinstance(state, Mapping) else None
        keys = awaited_operation_keys(values)
        if keys:
            awaited[thread_id] = keys
    statuses = await run_in_threadpool(_statuses, gw, {k for keys in awaited.values() for k in keys})
    ready = {t: keys for t, keys in (await run_in_threadpool(ready_waits, gw)).items() if t in interrupted}
    started: list[str] = []
    for thread_id in [*awaited, *(t for t in ready if t not in awaited)]:
        keys = awaited.get(thread_id, [])
        decided = tuple(
            sorted(
                (k, statuses[k]) for k in keys if statuses.get(k, "pending_approval") != "pending_approval"
            )
        ) + ready.get(thread_id, ())
        if not decided or woken.get(thread_id) == decided:
            continue
        try:
            if await wake_thread(thread_id):
                woken[thread_id] = decided
                started.append(thread_id)
        except Exception as exc:  # one thread failing must not keep the others asleep
            log.warning("waker: could not wake thread %s:\n%s", thread_id, redacted_traceback(exc))
    for gone in set(woken) - set(awaited) - set(ready):
        del woken[gone]
    return started


Answered = dict[str, tuple[str, ...]]
"""Per thread, the settled operations it was last answered for (a thread is answered once per change)."""


async def answer_settled_threads(gw: Gateway, client: Any, answered: Answered) -> list[str]:
    """One round of answering (`toolgate.graph.worker.answers`): each idle or failed thread whose
    state recorded a write the store has since settled differently runs its respond node once
    more (``goto: respond``), which renders every write's status from the store. Threads the
    server last touched are looked at first (100 per status); their state only picks keys."""
    candidates: dict[str, Any] = {}
    for status in ("idle", "error"):
        found = await client.threads.search(status=status, limit=100, sort_by="updated_at", sort_order="desc")
        for thread in found if isinstance(found, list) else []:
            thread_id = thread.get("thread_id") if isinstance(thread, Mapping) else None
            values = thread.get("values") if isinstance(thread, Mapping) else None
            if isinstance(thread_id, str) and thread_id and might_be_stale(values):
                candidates[thread_id] = values
    started: list[str] = []
    for thread_id, values in candidates.items():
        stale = tuple(sorted(await run_in_threadpool(stale_writes, gw.store, values)))
        if not stale or answered.get(thread_id) == stale:
            continue
        try:
            await client.runs.create(
                thread_id, ASSISTANT_ID, command={"goto": "respond"}, multitask_strategy="reject"
            )
            answered[thread_id] = stale
            started.append(thread_id)
        except httpx.HTTPStatusError as exc:  # gone, or running now (its run reads the store itself)
            log.info("thread %s not answered (%s)", thread_id, exc.response.status_code)
        except Exception as exc:  # one thread failing must not keep the others unanswered
            log.warning("waker: could not answer thread %s:\n%s", thread_id, redacted_traceback(exc))
    for gone in set(answered) - set(candidates):
        del answered[gone]
    return started


async def run_waker(
    gateway: Callable[[], Gateway], client: Callable[[], Any], interval_s: float, stop: asyncio.Event
) -> None:
    """Run `wake_decided_threads` and `answer_settled_threads` every ``interval_s`` until
    ``stop``; a failed round is logged (once per distinct error) and the loop goes on."""
    woken: Woken = {}
    answered: Answered = {}
    last_error: str | None = None
    while not stop.is_set():
        try:
            gw = await run_in_threadpool(gateway)
            await wake_decided_threads(gw, client(), woken)
            await answer_settled_threads(gw, client(), answered)
            last_error = None
        except Exception as exc:  # store down, server still starting: try again next round
            text = f"{type(exc).__name__}: {exc}"
            if text != last_error:
                log.warning("waker round failed:\n%s", redacted_traceback(exc))
            last_error = text
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=interval_s)


__all__ = [
    "ASSISTANT_ID",
    "MAX_AWAITED_PER_THREAD",
    "WAKER_INTERVAL_S",
    "Answered",
    "Woken",
    "answer_settled_threads",
    "awaited_operation_keys",
    "langgraph_client",
    "ready_waits",
    "run_waker",
    "wake_decided_threads",
    "wake_quietly",
    "wake_thread",
]
