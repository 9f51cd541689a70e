"""Parallel tool calls: same-resource calls in order, independent ones concurrently (chapter §10).

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
from toolgate.tools.registry import Registry

R = TypeVar("R")


def conflict_key(registry: Registry, record: CallRecord) -> tuple[str, str] | None:
    """The resource a call must not touch concurrently with another call, if its tool declares one."""
    spec = registry.get(record["tool"])
    if spec is None or spec.resource is None or not spec.resource.conflict:
        return None
    value = record.get("arguments", {}).get(spec.resource.argument)
    return (spec.resource.kind, str(value)) if value is not None else None


def partition(registry: Registry, records: Sequence[CallRecord]) -> list[list[CallRecord]]:
    """Lanes of calls: each lane runs in order; different lanes may run at the same time."""
    lanes: list[list[CallRecord]] = []
    by_key: dict[tuple[str, str], list[CallRecord]] = {}
    for record in records:
        key = conflict_key(registry, record)
        if key is None:
            lanes.append([record])
        elif key in by_key:
            by_key[key].append(record)
        else:
            by_key[key] = [record]
            lanes.append(by_key[key])
    return lanes


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


__all__ = ["conflict_key", "partition", "run_batch"]
