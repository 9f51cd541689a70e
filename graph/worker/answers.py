"""Threads answered from the store once their writes settle while no run of theirs is going on.

A thread learns a write's outcome when it runs: its approval interrupt resumes and delivers, or
its respond node renders every write's status from the store. An outcome can settle while the
thread is finished or stuck: a run ended ``in_progress`` (a batch deadline, or the store failed
mid-delivery on a full disk and the claim's lease was left behind), and later a worker delivered
the operation or recovery reconciled it. The checkpoint still says what the thread last saw, and
every view of the thread (the CLI's report, a LangGraph client reading its state, a chat UI) shows
that instead of the store.

This module finds such threads and answers them from the store: a thread still interrupted is
resumed (the graph re-reads its approvals and delivers, or returns the stored result), a
finished one runs its respond node once more (``Command(goto="respond")``), which renders each
write's status from the store and records it, so it is current from then on. Thread state is
untrusted input: it only picks which operation keys to read (bounded, malformed entries skipped);
what the thread is told comes from the store's records.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from langgraph.types import Command

from toolgate.graph.context import Context
from toolgate.graph.nodes.execute_calls import AUTHORITATIVE
from toolgate.store.base import Store
from toolgate.store.records import TERMINAL_STATUSES

MAX_WRITES_PER_THREAD = 64
"""Operation keys read from one thread's (untrusted) state."""

SETTLED: frozenset[str] = TERMINAL_STATUSES | {"unknown"}
"""Store statuses a finished thread is told about: final ones, and ``unknown`` (a person must look)."""

Answer = Literal["resumed", "answered", "current", "waiting", "missing"]


def recorded_writes(values: object) -> dict[str, tuple[str, str | None]]:
    """Per operation key in a thread's state: ``(call id, the outcome status it last recorded)``.

    Untrusted: anything malformed is skipped and the count is bounded."""
    if not isinstance(values, Mapping):
        return {}
    calls, outcomes = values.get("calls"), values.get("outcomes")
    if not isinstance(calls, Mapping):
        return {}
    outcomes = outcomes if isinstance(outcomes, Mapping) else {}
    found: dict[str, tuple[str, str | None]] = {}
    for call_id, record in list(calls.items())[: MAX_WRITES_PER_THREAD * 4]:
        key = record.get("operation_key") if isinstance(record, Mapping) else None
        if not isinstance(call_id, str) or not isinstance(key, str) or not 0 < len(key) <= 200:
            continue
        outcome = outcomes.get(call_id)
        status = outcome.get("status") if isinstance(outcome, Mapping) else None
        found[key] = (call_id, status if isinstance(status, str) else None)
        if len(found) >= MAX_WRITES_PER_THREAD:
            break
    return found


def might_be_stale(values: object) -> bool:
    """True when a thread's state records a write whose status may since have changed (a cheap
    filter over many threads before any store read): one not recorded as final (``unknown``
    is not: recovery settles it later)."""
    return any(
        status is None or AUTHORITATIVE_INVERSE.get(status, status) not in TERMINAL_STATUSES
        for _, status in recorded_writes(values).values()
    )


AUTHORITATIVE_INVERSE = {shown: stored for stored, shown in AUTHORITATIVE.items()}
"""The store's status of an outcome status a thread records (``completed`` is ``succeeded``)."""


def stale_writes(store: Store, values: object) -> list[str]:
    """Operation keys whose store status has settled (`SETTLED`) to something other than what the
    thread's state last recorded for that call."""
    stale = []
    for key, (_, recorded) in recorded_writes(values).items():
        op = store.operations.get(key)
        if op is None or op.status not in SETTLED:
            continue
        if AUTHORITATIVE.get(op.status, op.status) != recorded:
            stale.append(key)
    return stale


def awaited_operation_keys(values: object) -> list[str]:
    """The operation keys a thread's state says it awaits (``awaiting`` call ids -> ``calls``).

    Thread state is untrusted input (clients rewrite it): anything malformed is skipped, and the
    count is bounded. The keys only choose which threads to wake, never what a thread may do."""
    if not isinstance(values, Mapping):
        return []
    awaiting, calls = values.get("awaiting"), values.get("calls")
    if not isinstance(awaiting, list) or not isinstance(calls, Mapping):
        return []
    keys: list[str] = []
    for call_id in awaiting[:MAX_WRITES_PER_THREAD]:
        call = calls.get(call_id) if isinstance(call_id, str) else None
        key = call.get("operation_key") if isinstance(call, Mapping) else None
        if isinstance(key, str) and 0 < len(key) <= 200 and key not in keys:
            keys.append(key)
    return keys


def awaits_a_decided_write(store: Store, values: object) -> bool:
    """True when an interrupted thread awaits a write the store no longer holds for approval."""
    for key in awaited_operation_keys(values):
        op = store.operations.get(key)
        if op is not None and op.status != "pending_approval":
            return True
    return False


def answer_thread(graph: Any, store: Store, thread_id: str) -> Answer:
    """Bring ``thread_id`` of ``graph`` (this process's checkpointer) up to the store: resume it if
    it is interrupted awaiting a write the store has decided, continue it if its run failed
    mid-way (the store failing under it) and a write of it has settled since, answer it again if
    it finished before its writes settled. Returns what was done. Every path is safe to repeat:
    a delivery of a settled write returns the stored result."""
    config: Any = {"configurable": {"thread_id": thread_id}}
    snapshot = graph.get_state(config)
    if not snapshot.values:
        return "missing"
    if snapshot.next and snapshot.interrupts:
        if awaits_a_decided_write(store, snapshot.values):
            graph.invoke(Command(resume={"wake": True}), config, context=Context())
            return "resumed"
        return "waiting"
    if snapshot.next:  # a run that failed mid-way (its node raised): it continues from that node
        if not stale_writes(store, snapshot.values) and not awaits_a_decided_write(store, snapshot.values):
            return "waiting"
        graph.invoke(None, config, context=Context())
        return "resumed"
    if not stale_writes(store, snapshot.values):
        return "current"
    graph.invoke(Command(goto="respond"), config, context=Context())
    return "answered"


def threads_of(store: Store, operation_keys: list[str]) -> list[str]:
    """The threads that proposed ``operation_keys`` (the store's proposal records), in order, once each."""
    threads: list[str] = []
    for key in operation_keys:
        op = store.operations.get(key)
        proposal = store.proposals.get(op.proposal_id) if op and op.proposal_id else None
        if proposal is not None and proposal.thread_id and proposal.thread_id not in threads:
            threads.append(proposal.thread_id)
    return threads


__all__ = [
    "MAX_WRITES_PER_THREAD",
    "SETTLED",
    "Answer",
    "answer_thread",
    "awaited_operation_keys",
    "awaits_a_decided_write",
    "might_be_stale",
    "recorded_writes",
    "stale_writes",
    "threads_of",
]
