"""Cluster admission slots: take one of a scope's numbered slots in the store, keep it while the
call runs, give it back. The mechanism knows slots, not admission: which scope, what cap and when a
full scope is refused are `toolgate.policy.admission`'s (its `admitted` is the one caller).

A slot lives ``TOOLGATE_CLUSTER_SLOT_TTL_S`` on the store's clock. While its call runs, a daemon
`SlotHeartbeat` thread renews it every third of that TTL (`RENEW_EVERY`), as a worker renews a
claimed operation's lease, so the TTL need not exceed the longest call: it only bounds how long the
slot of a holder that crashed or hung (no more renewals) keeps the tenant's share, at most one TTL
after its last renewal. Each renewal is judged by the store (`Store.slots.renew`, the store's clock);
the heartbeat paces itself with `time.monotonic`, so a skewed process clock changes neither.

A slot can still be lost: the process was paused, or the store unreachable, for longer than the TTL
and the slot lapsed (and another process may have taken it). The heartbeat then logs a warning,
audits ``admission.slot_lost`` once (kind, scope, slot, tenant, why) and stops renewing (a lost slot
is never revived, and the holder's give-back frees nothing of a new holder's). The running call is
deliberately NOT stopped: it was admitted and has started (a tool handler may have effects in
flight, and a model request is already paid for); killing it midway would trade a brief excess over
the cap for a half-done effect. For the rest of that call the tenant may run one call more than its
cluster cap, and the audit event says so. A `StoreError` during a renewal is logged and the renewal
retried on the next beat, until the slot would have lapsed (the start of the last successful
renewal plus the TTL, on the monotonic clock): the slot is then counted as lost.
"""

from __future__ import annotations

import contextvars
import logging
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from toolgate.errors import StoreError
from toolgate.store.audit import Auditor
from toolgate.store.base import Store

CLUSTER_POLLS = 4
"""How many times, at most, a request looks for a free cluster slot within the admission wait
(besides the first look)."""
RENEW_EVERY = 1 / 3
"""The share of the slot's TTL between two renewals: two more tries before it would lapse."""
monotonic = time.monotonic
"""The heartbeat's own clock (for pacing and for when a slot would have lapsed); never the wall clock."""
THREAD_PREFIX = "toolgate-slot-heartbeat"
"""The name of every heartbeat thread starts with this."""
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClusterSlot:
    """One slot held in the store's ``admission_slots`` (given back only by its holder)."""

    scope: str
    slot: int
    holder: str
    taken_at: float = field(default=0.0, compare=False)
    """`monotonic` just before the store call that took it (its TTL runs from a moment after)."""


def take_cluster_slot(
    store: Store, scope: str, cap: int, ttl_s: float, wait_s: float, deadline: float
) -> ClusterSlot | None:
    """One of ``scope``'s ``cap`` slots, held for ``ttl_s`` on the store's clock; looks again a few
    times (`CLUSTER_POLLS`, spread over ``wait_s``) until ``deadline`` (`time.monotonic`), then
    None: every slot is taken."""
    holder = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(8)}"
    pause = max(wait_s / CLUSTER_POLLS, 0.005)
    while True:
        asked = monotonic()
        slot = store.slots.take(scope, holder, cap, ttl_s)
        if slot is not None:
            return ClusterSlot(scope, slot, holder, asked)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        time.sleep(min(pause, remaining))  # a poll of the store, not synchronisation


def give_back(store: Store, held: ClusterSlot) -> None:
    """Release ``held``; when the store cannot be reached the slot lapses on its own (its TTL)."""
    try:
        store.slots.release(held.scope, held.slot, held.holder)
    except StoreError:
        log.warning(
            "cluster admission slot %s/%d not given back; it lapses after its TTL", held.scope, held.slot
        )


class SlotHeartbeat:
    """A daemon thread renewing ``held`` every ``ttl_s * RENEW_EVERY`` seconds until `stop`."""

    def __init__(
        self,
        auditor: Auditor,
        held: ClusterSlot,
        ttl_s: float,
        *,
        tenant_id: str,
        user_id: str | None = None,
        fields: dict[str, Any] | None = None,
    ) -> None:
        self.auditor = auditor
        self.held = held
        self.ttl_s = ttl_s
        self.interval_s = ttl_s * RENEW_EVERY
        self.tenant_id = tenant_id
        self.user_id = user_id
        self.fields = dict(fields or {})
        self.renewals = 0
        """Renewals the store accepted."""
        self.lost: str | None = None
        """Why the slot was lost (``lapsed``, ``store_unreachable``), or None while it is held."""
        self._stop = threading.Event()
        self._live_until = (held.taken_at or monotonic()) + ttl_s  # no later than it lapses
        context = contextvars.copy_context()  # its audit event carries the call's trace id
        self._thread = threading.Thread(
            target=context.run,
            args=(self._run,),
            name=f"{THREAD_PREFIX}:{held.scope}:{held.slot}",
            daemon=True,
        )

    @classmethod
    def start(cls, auditor: Auditor, held: ClusterSlot, ttl_s: float, **kwargs: Any) -> SlotHeartbeat:
        """A heartbeat for ``held``, already running."""
        beat = cls(auditor, held, ttl_s, **kwargs)
        beat._thread.start()
        return beat

    def renew(self) -> bool:
        """One renewal in the store: True while the slot is still this holder's."""
        held = self.held
        return self.auditor.store.slots.renew(held.scope, held.slot, held.holder, self.ttl_s)

    def stop(self) -> None:
        """Stop renewing and wait for the thread to end (a renewal in flight finishes first; the
        wait is bounded by the TTL, after which a still-running daemon thread is only logged)."""
        self._stop.set()
        self._thread.join(max(self.ttl_s, 1.0))
        if self._thread.is_alive():
            log.warning("cluster slot heartbeat %s still in a store call; it ends with it", self._thread.name)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            began = monotonic()
            try:
                renewed = self.renew()
            except Exception as exc:  # a StoreError (or a bug): the call must go on either way
                if monotonic() >= self._live_until:
                    self._lose("store_unreachable")
                    return
                log.warning(
                    "cluster slot %s/%d not renewed (%s); retrying",
                    self.held.scope,
                    self.held.slot,
                    type(exc).__name__,  # its text may name the store: not logged
                )
                continue
            if not renewed:
                self._lose("lapsed")
                return
            self.renewals += 1
            self._live_until = began + self.ttl_s

    def _lose(self, why: str) -> None:
        """Log and audit the loss once; the running call goes on (see the module docstring)."""
        self.lost = why
        held = self.held
        log.warning(
            "cluster admission slot %s/%d lost (%s) while its call still runs; the call goes on",
            held.scope,
            held.slot,
            why,
        )
        try:
            self.auditor.record(
                "admission.slot_lost",
                "lost",
                user_id=self.user_id,
                code="slot_lost",
                tenant_id=self.tenant_id,
                detail={
                    "kind": held.scope.split(":", 1)[0],
                    "scope": held.scope,
                    "slot": held.slot,
                    "tenant_id": self.tenant_id,
                    "ttl_s": self.ttl_s,
                    "why": why,
                },
                **self.fields,
            )
        except StoreError:
            log.warning(
                "the loss of cluster admission slot %s/%d could not be audited", held.scope, held.slot
            )


__all__ = ["CLUSTER_POLLS", "RENEW_EVERY", "ClusterSlot", "SlotHeartbeat", "give_back", "take_cluster_slot"]
