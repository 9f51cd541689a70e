"""Admission limits: shed load with a clear ``overloaded`` answer instead of queueing without bound.

Each process caps how many model requests and how many tool executions are in flight at once, in
all and per tenant (``TOOLGATE_MAX_CONCURRENT_*``, `toolgate.settings`). A request that finds no
free slot waits at most ``TOOLGATE_ADMISSION_WAIT_S`` (well under a second) and is then refused
with `Overloaded`, carrying a ``retry_after_s``; nothing is queued past that wait, so a slow model
endpoint turns excess requests away quickly instead of piling up threads, sockets and memory. A
tenant's own cap is below the process cap, so one tenant saturating its share never refuses
another tenant. Every refusal is audited (``admission.overloaded``: tenant, kind, the limit hit).

Those caps are per process: N processes on one store let a tenant hold N times its share. An
optional cluster-wide cap per tenant (``TOOLGATE_CLUSTER_MODEL_REQUESTS_PER_TENANT``,
``TOOLGATE_CLUSTER_TOOL_EXECUTIONS_PER_TENANT``; ``0``, the default, is off and costs no store
call) is held in the store's ``admission_slots`` (`toolgate.store.slots`): after the process
slot, a request takes one of the tenant's numbered slots, polling a few times within the same
admission wait; with none free it gives its process slot back and is refused with scope
``cluster``. While the block runs, a heartbeat renews its slot every third of
``TOOLGATE_CLUSTER_SLOT_TTL_S``; a slot of a process that died lapses one TTL after its last
renewal on the store's clock (`toolgate.policy.cluster_slots`, also why a lost slot does not stop
the call).

A refused model request ends the run (`toolgate.graph.nodes.model` raises before anything is
written: the checkpoint before the model call is intact and the thread is resumed later); a
refused read is answered to the model with the ``overloaded`` rejection; a refused write (from the
graph's execute path or a ``toolgate worker run`` delivery) is not claimed and stays approved.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from toolgate.errors import ToolgateRuntimeError
from toolgate.policy.cluster_slots import (
    CLUSTER_POLLS,
    ClusterSlot,
    SlotHeartbeat,
    give_back,
    take_cluster_slot,
)
from toolgate.settings import PREFIX, read_settings
from toolgate.store.audit import Auditor

Kind = Literal["model", "tool"]
Scope = Literal["process", "tenant", "cluster"]
MIN_RETRY_AFTER_S = 1.0
MAX_RETRY_AFTER_S = 60.0


class Overloaded(ToolgateRuntimeError):
    """No slot was free within the admission wait: try again after ``retry_after_s`` seconds.

    Attributes:
        code: always ``overloaded`` (the stable code the CLI and the audit log show).
        kind: ``model`` or ``tool``.
        scope: which cap was full: ``process``, ``tenant`` (both of this process) or ``cluster``
            (the tenant's share across every process on the store).
        limit: that cap.
        retry_after_s: a suggested wait (about how long a slot is held right now).
    """

    code = "overloaded"

    def __init__(self, kind: Kind, scope: Scope, limit: int, retry_after_s: float, tenant_id: str) -> None:
        super().__init__(
            f"too many concurrent {kind} requests (the {scope} limit is {limit}); retry after {retry_after_s} s"
        )
        self.kind = kind
        self.scope = scope
        self.limit = limit
        self.retry_after_s = retry_after_s
        self.tenant_id = tenant_id


@dataclass(frozen=True)
class AdmissionLimits:
    """The caps of one process (each >= 1), the longest wait for a slot, and the optional caps
    per tenant across every process on the store (``0``: off)."""

    model: int = 16
    model_per_tenant: int = 8
    tool: int = 32
    tool_per_tenant: int = 16
    wait_s: float = 0.2
    cluster_model_per_tenant: int = 0
    cluster_tool_per_tenant: int = 0
    cluster_ttl_s: float = 300.0

    @classmethod
    def from_settings(cls) -> AdmissionLimits:
        """The limits the ``TOOLGATE_*`` settings give now: their variables read at each call,
        parsed once per set of values (a read call is admitted three times: its two model turns
        and its handler)."""
        return _limits_of(tuple(os.environ.get(variable) or "" for variable in _VARIABLES))

    def caps(self, kind: Kind) -> tuple[int, int]:
        """``(process cap, tenant cap)`` of ``kind``."""
        return (self.model, self.model_per_tenant) if kind == "model" else (self.tool, self.tool_per_tenant)

    def cluster_cap(self, kind: Kind) -> int:
        """The cap of ``kind`` per tenant across the store's processes (``0``: none)."""
        return self.cluster_model_per_tenant if kind == "model" else self.cluster_tool_per_tenant


_SETTINGS: dict[str, str] = {
    "model": "max_concurrent_model_requests",
    "model_per_tenant": "max_concurrent_model_requests_per_tenant",
    "tool": "max_concurrent_tool_executions",
    "tool_per_tenant": "max_concurrent_tool_executions_per_tenant",
    "wait_s": "admission_wait_s",
    "cluster_model_per_tenant": "cluster_model_requests_per_tenant",
    "cluster_tool_per_tenant": "cluster_tool_executions_per_tenant",
    "cluster_ttl_s": "cluster_slot_ttl_s",
}
"""Each limit's setting (`toolgate.settings.EnvSettings` field)."""
_VARIABLES: tuple[str, ...] = tuple(PREFIX + name.upper() for name in _SETTINGS.values())


@functools.lru_cache(maxsize=32)
def _limits_of(values: tuple[str, ...]) -> AdmissionLimits:
    """The limits the variables `_VARIABLES` give with ``values`` (`InvalidSetting` for a bad one,
    which is not kept)."""
    parsed = read_settings(
        {variable: value for variable, value in zip(_VARIABLES, values, strict=True) if value}
    )
    return AdmissionLimits(**{limit: getattr(parsed, name) for limit, name in _SETTINGS.items()})


class Admission:
    """Slots of one process: counted in memory under one condition, never queued past the wait."""

    def __init__(self, limits: AdmissionLimits) -> None:
        self.limits = limits
        self._cond = threading.Condition()
        self._in_flight: Counter[tuple[Kind, str | None]] = Counter()
        self._held_s: dict[Kind, float] = {"model": MIN_RETRY_AFTER_S, "tool": MIN_RETRY_AFTER_S}
        self.refused: Counter[tuple[Kind, Scope]] = Counter()

    def _full(self, kind: Kind, tenant_id: str) -> tuple[Scope, int] | None:
        process_cap, tenant_cap = self.limits.caps(kind)
        if self._in_flight[(kind, tenant_id)] >= tenant_cap:
            return "tenant", tenant_cap
        if self._in_flight[(kind, None)] >= process_cap:
            return "process", process_cap
        return None

    def acquire(self, kind: Kind, tenant_id: str) -> None:
        """Take a slot, waiting at most ``wait_s``; `Overloaded` when none became free."""
        deadline = time.monotonic() + self.limits.wait_s
        with self._cond:
            while (full := self._full(kind, tenant_id)) is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._cond.wait(remaining):
                    full = self._full(kind, tenant_id)
                    if full is None:
                        break
                    scope, limit = full
                    self.refused[(kind, scope)] += 1
                    raise Overloaded(kind, scope, limit, self.retry_after(kind), tenant_id)
            self._in_flight[(kind, tenant_id)] += 1
            self._in_flight[(kind, None)] += 1

    def release(self, kind: Kind, tenant_id: str, held_s: float | None = None) -> None:
        """Give a slot back (and learn how long slots are held, for ``retry_after_s``)."""
        with self._cond:
            self._in_flight[(kind, tenant_id)] -= 1
            self._in_flight[(kind, None)] -= 1
            if self._in_flight[(kind, tenant_id)] <= 0:
                del self._in_flight[(kind, tenant_id)]
            if held_s is not None:
                self._held_s[kind] = 0.8 * self._held_s[kind] + 0.2 * held_s
            self._cond.notify_all()

    def refuse(self, kind: Kind, scope: Scope, limit: int, tenant_id: str) -> Overloaded:
        """Count a refusal by a cap outside this process's counts; the `Overloaded` to raise."""
        with self._cond:
            self.refused[(kind, scope)] += 1
        return Overloaded(kind, scope, limit, self.retry_after(kind), tenant_id)

    def retry_after(self, kind: Kind) -> float:
        """About how long a slot of ``kind`` is held now, within 1..60 s."""
        return round(min(MAX_RETRY_AFTER_S, max(MIN_RETRY_AFTER_S, self._held_s[kind])), 1)

    def in_flight(self, kind: Kind, tenant_id: str | None = None) -> int:
        """Slots of ``kind`` held now (in the process, or of one tenant)."""
        with self._cond:
            return self._in_flight[(kind, tenant_id)]

    @contextmanager
    def slot(self, kind: Kind, tenant_id: str) -> Iterator[None]:
        """Hold a slot for the block (`Overloaded` before the block when none is free)."""
        self.acquire(kind, tenant_id)
        started = time.monotonic()
        try:
            yield
        finally:
            self.release(kind, tenant_id, time.monotonic() - started)


_PROCESS: dict[AdmissionLimits, Admission] = {}
_PROCESS_LOCK = threading.Lock()


def process_admission(limits: AdmissionLimits | None = None) -> Admission:
    """This process's slots for ``limits`` (default: the settings now); one `Admission` per set of
    limits, shared by every gateway of the process."""
    wanted = limits or AdmissionLimits.from_settings()
    with _PROCESS_LOCK:
        found = _PROCESS.get(wanted)
        if found is None:
            found = _PROCESS[wanted] = Admission(wanted)
        return found


def _cluster_slot(
    auditor: Auditor, admission: Admission, kind: Kind, tenant_id: str, deadline: float
) -> ClusterSlot | None:
    """A slot of ``kind:tenant_id`` under the cluster cap (None, with no store call, when there is
    no cap); `Overloaded` (scope ``cluster``) when none became free by ``deadline``."""
    limits = admission.limits
    cap = limits.cluster_cap(kind)
    if cap <= 0:
        return None
    scope = f"{kind}:{tenant_id}"
    held = take_cluster_slot(auditor.store, scope, cap, limits.cluster_ttl_s, limits.wait_s, deadline)
    if held is None:
        raise admission.refuse(kind, "cluster", cap, tenant_id)
    return held


@contextmanager
def admitted(
    auditor: Auditor, kind: Kind, tenant_id: str | None, *, user_id: str | None = None, **fields: Any
) -> Iterator[None]:
    """Hold a slot of ``kind`` for ``tenant_id`` in this process (and, with a cluster cap, in the
    store ``auditor`` writes to) for the block; a refusal is audited (``admission.overloaded``, with
    the tenant, kind, scope and limit) and raised."""
    tenant_id = tenant_id or ""
    admission = process_admission()
    deadline = time.monotonic() + admission.limits.wait_s
    try:
        admission.acquire(kind, tenant_id)
        try:
            held = _cluster_slot(auditor, admission, kind, tenant_id, deadline)
        except BaseException:
            admission.release(kind, tenant_id)
            raise
    except Overloaded as exc:
        auditor.record(
            "admission.overloaded",
            "refused",
            user_id=user_id,
            code="overloaded",
            tenant_id=tenant_id,
            detail={
                "kind": kind,
                "scope": exc.scope,
                "limit": exc.limit,
                "retry_after_s": exc.retry_after_s,
                "tenant_id": tenant_id,
            },
            **fields,
        )
        raise
    started = time.monotonic()
    beat: SlotHeartbeat | None = None
    try:
        if held is not None:  # renewed while the block runs (`toolgate.policy.cluster_slots`)
            ttl_s = admission.limits.cluster_ttl_s
            beat = SlotHeartbeat.start(
                auditor, held, ttl_s, tenant_id=tenant_id, user_id=user_id, fields=fields
            )
        yield
    finally:
        if beat is not None:
            beat.stop()  # before the give-back: no renewal after it
        if held is not None:
            give_back(auditor.store, held)
        admission.release(kind, tenant_id, time.monotonic() - started)


__all__ = [
    "CLUSTER_POLLS",
    "Admission",
    "AdmissionLimits",
    "ClusterSlot",
    "Overloaded",
    "SlotHeartbeat",
    "admitted",
    "give_back",
    "process_admission",
    "take_cluster_slot",
]
