"""Parallel tool calls: same-resource calls in order, independent ones concurrently.

Calls whose tools declare a conflicting resource (e.g. the same inventory SKU) share a lane and
run one after another; every other call gets a lane of its own. Lanes run under a bounded pool
(the semaphore, default 5) and the whole batch has a deadline; a call still running at the
deadline is reported as in progress (its outcome is still recorded once, by its claim), so the
batch is reported as partial instead of waiting or guessing.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Sequence
from typing import TypeVar

from toolgate.graph.state import CallRecord
from toolgate.tools.argpaths import values_at
from toolgate.tools.registry import Registry

R = TypeVar("R")


def conflict_keys(registry: Registry, record: CallRecord) -> set[tuple[str, str]]:
    """The resources a call must not touch concurrently with another call (every declared
    conflicting resource, each value of a list path included)."""
    spec = registry.get(record["tool"])
    if spec is None:
        return set()
    arguments = record.get("arguments", {})
    return {
        (ref.kind, str(value))
        for ref in spec.resource_refs
        if ref.conflict
        for value in values_at(arguments, ref.argument)
    }


def partition(registry: Registry, records: Sequence[CallRecord]) -> list[list[CallRecord]]:
    """Lanes of calls: each lane runs in order; different lanes may run at the same time.

    Calls sharing any resource share a lane, transitively: a call naming orders A and B joins the
    lanes of A's and B's other calls into one, so no two calls on one resource ever overlap."""
    parent = list(range(len(records)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first_with: dict[tuple[str, str], int] = {}
    for index, record in enumerate(records):
        for key in sorted(conflict_keys(registry, record)):
            if key in first_with:
                parent[root(index)] = root(first_with[key])
            else:
                first_with[key] = index
    lanes: dict[int, list[CallRecord]] = {}
    for index, record in enumerate(records):
        lanes.setdefault(root(index), []).append(record)
    return list(lanes.values())


def run_batch(
    lanes: Sequence[Sequence[CallRecord]],
    run: Callable[[CallRecord], R],
    *,
    max_concurrency: int,
    deadline_s: float,
) -> dict[str, R]:
    """Run every lane, returning each finished call's result by call id (missing: past the deadline)."""
    results: dict[str, R] = {}

    def run_lane(lane: Sequence[CallRecord]) -> None:
        for record in lane:
            results[record["call_id"]] = run(record)

    if len(lanes) == 1:
        run_lane(lanes[0])
        return results
    pool = concurrent.futures.ThreadPoolExecutor(
        max_workers=max_concurrency, thread_name_prefix="toolgate-batch"
    )
    try:
        futures = [pool.submit(run_lane, lane) for lane in lanes]
        done, _ = concurrent.futures.wait(futures, timeout=deadline_s)
        for future in done:
            future.result()  # a bug in the pipeline must fail loudly, not vanish
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return dict(results)


__all__ = ["conflict_keys", "partition", "run_batch"]
