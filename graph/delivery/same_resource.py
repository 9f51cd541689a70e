"""Same resource, any thread: a write that declares a conflicting resource runs only while its
delivery holds the store's lease on that resource.

In one batch, same-resource calls already share a lane (`toolgate.graph.nodes.batch`); that cannot see
another thread, graph run or process. So `Executor.deliver` claims the operation together with a
`ResourceHold` on every conflicting resource the approved arguments name (keyed by the proposal's
tenant, the kind and the id, all read from the store, never from checkpointed state): the claim's
conditional update and the leases commit in one transaction or not at all. When another holder
has one of the resources, that transaction rolls back, claim included, and the delivery waits
outside any transaction before it tries again: waiting never holds a claim or a lease, so two
deliveries cannot deadlock. The claimed handler renews the hold with its claim's lease and gives
it up with its stored outcome (an overrunning handler keeps it until its thread ends). When the
resource stays busy past the delivery's wait, the operation stays approved and the caller gets a
stable, audited ``resource_busy`` refusal: a later delivery runs it, and no update is ever lost.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from toolgate.canonical import canonical_json
from toolgate.graph.delivery.result import Delivery
from toolgate.store.audit import Auditor
from toolgate.store.base import Store
from toolgate.store.changes import LEASE
from toolgate.store.leases import ResourcesBusy
from toolgate.store.records import OperationRecord
from toolgate.tools.argpaths import values_at
from toolgate.tools.spec import ToolSpec

T = TypeVar("T")


LAPSE_LOOK_S = 0.25
"""With change notices, how long a waiter trusts that no notice means still held: a lease whose
holder died lapses without one, so the waiter asks the store again at least this often."""


def resource_keys(spec: ToolSpec, tenant_id: str, arguments: dict[str, Any]) -> tuple[str, ...]:
    """The lease keys of a call: ``[tenant, kind, id]`` for every conflicting resource it names
    (each value of a list path included), sorted and without repeats."""
    return tuple(
        sorted(
            {
                canonical_json([tenant_id, ref.kind, str(value)])
                for ref in spec.resource_refs
                if ref.conflict
                for value in values_at(arguments, ref.argument)
            }
        )
    )


@dataclass(frozen=True)
class ResourceHold:
    """One delivery's leases on the resources of one operation (none: every method is a no-op)."""

    store: Store
    keys: tuple[str, ...]
    holder: str
    """Unique to this delivery attempt, so only it can renew or release what it took."""

    @classmethod
    def of(
        cls,
        store: Store,
        spec: ToolSpec,
        op: OperationRecord,
        tenant_id: str,
        arguments: dict[str, Any],
        worker_id: str,
    ) -> ResourceHold:
        """The hold a delivery of ``op`` by ``worker_id`` needs (the proposal's tenant and arguments)."""
        holder = f"{worker_id}/{op.operation_key}/{secrets.token_hex(6)}"
        return cls(store, resource_keys(spec, tenant_id, arguments), holder)

    @property
    def lease(self) -> tuple[tuple[str, ...], str] | None:
        """What a claim takes with it (`toolgate.store.operations.Operations.claim`'s
        ``resources``): the keys and this hold's holder; None without resources."""
        return (self.keys, self.holder) if self.keys else None

    def claim(self, claim: Callable[[], T], wait_s: float) -> T:
        """``claim()`` (a claim that takes `lease` in its own transaction and raises
        `ResourcesBusy` when another holder has one), tried again while the resources are busy,
        for up to ``wait_s`` seconds; `ResourcesBusy` when they stayed busy (nothing claimed or
        held then). Without resources, ``claim()`` once.

        With the store's change notices (`toolgate.store.changes`, PostgreSQL) a waiter queues
        (`ResourceLeases.queue`) and sleeps until a release names it, looking again at least
        every `LAPSE_LOOK_S` (a lease whose holder died lapses without a notice): the resource is
        not left idle while waiters sleep in a backoff, and one waiter, not every one, tries per
        release. Without notices (SQLite), backoff.

        Within one process only one thread at a time tries for the same resources
        (`_PollGate`): the others wait in memory for their turn. Sixty-four threads of a worker
        waiting on one busy resource would otherwise poll the store sixty-four times as often,
        and take the pooled connections the lease holder needs to finish."""
        if not self.keys:
            return claim()
        deadline = time.monotonic() + wait_s
        changes = self.store.changes
        # a release addressed to this hold (its oldest waiter) or to nobody (no live waiter)
        topics = tuple(LEASE + key + ">" + suffix for key in self.keys for suffix in (self.holder, ""))
        with _PollGate.turn(self.keys, deadline) as my_turn:
            if not my_turn:
                raise ResourcesBusy(self.keys[0])
            delay, queued = 0.002, False
            try:
                while True:
                    seen = changes.seen(topics)  # before trying: a release after it wakes the wait
                    try:
                        return claim()
                    except ResourcesBusy:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            raise
                    if changes.live:  # woken by the release; looks again when a lease may lapse
                        if not queued:
                            self.store.leases.queue(self.keys, self.holder, left)
                            queued = True
                        changes.wait(topics, seen, min(left, LAPSE_LOOK_S))
                    else:  # no notices (SQLite): only the store can say when it is free
                        time.sleep(min(left, delay))
                        delay = min(delay * 2, 0.1)
            finally:
                if queued:  # out of every line it stood in, claimed or not (a hint, never a claim)
                    self.store.leases.leave_queue(self.holder)

    def renew(self, lease_s: float) -> bool:
        """Extend the leases with the claim's (True without resources)."""
        return not self.keys or self.store.leases.renew(self.keys, self.holder, lease_s)

    def release(self) -> None:
        """Give the leases up (only this hold's own; repeating it is harmless)."""
        if self.keys:
            self.store.leases.release(self.keys, self.holder)


class _PollGate:
    """One turn at a time per resource set, per process: who may poll the store for it now.

    Gates exist only while someone waits (counted), so the table never outgrows the resources
    being waited for. A turn is given back as soon as its holder got the lease or gave up, never
    held while the lease is: a crashed handler cannot block a resource here (its lease lapses in
    the store as usual)."""

    _gates: ClassVar[dict[tuple[str, ...], list[Any]]] = {}
    """resource keys -> [the turn's lock, threads waiting or polling]."""
    _guard: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    @contextmanager
    def turn(cls, keys: tuple[str, ...], deadline: float) -> Iterator[bool]:
        """True once it is this thread's turn to poll for ``keys``, False at ``deadline``."""
        with cls._guard:
            gate = cls._gates.setdefault(keys, [threading.Lock(), 0])
            gate[1] += 1
        lock: threading.Lock = gate[0]
        got = lock.acquire(timeout=max(0.0, deadline - time.monotonic()))
        try:
            yield got
        finally:
            if got:
                lock.release()
            with cls._guard:
                gate[1] -= 1
                if gate[1] == 0:
                    del cls._gates[keys]


def deferred(auditor: Auditor, op: OperationRecord, code: str, error: dict[str, Any]) -> Delivery:
    """The audited answer (``operation.deferred``, refused with ``code``: ``circuit_open``,
    ``resource_busy``) to a delivery that did not claim ``op`` now; it stays approved for later."""
    auditor.record(
        "operation.deferred",
        "refused",
        code=code,
        operation_key=op.operation_key,
        proposal_id=op.proposal_id,
        tool=op.tool,
    )
    return Delivery(
        operation_key=op.operation_key,
        status=op.status,
        claim="NOT_ATTEMPTED",
        duplicate=False,
        error=error,
        reason=error["message"],
    )


__all__ = ["LAPSE_LOOK_S", "ResourceHold", "deferred", "resource_keys"]
