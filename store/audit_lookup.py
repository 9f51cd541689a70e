"""A narrow look-up in the audit log: has this operation already recorded this event?

A caller that records an event at most once per operation (e.g. ``delivery.refused``, once per
operation, code and release: `toolgate.graph.delivery.refusals`) asks for the first match of one
event with its code and release, one row at most, instead of reading the operation's whole trail
on every attempt. The answer is a hint for not repeating evidence, never an authority: the event
itself is still appended to the hash chain like any other.
"""

from __future__ import annotations

import abc

from toolgate.store.audit_records import AuditEvent


class AuditLookup(abc.ABC):
    """The narrow audit look-up part of the `Store` contract."""

    @abc.abstractmethod
    def first_audit_event(
        self,
        operation_key: str,
        event: str,
        *,
        code: str | None = None,
        tool_release: str | None = None,
    ) -> AuditEvent | None:
        """The earliest (chain order) event ``event`` of ``operation_key``, with ``code`` and
        recorded by ``tool_release`` when given (None: any), or None. Reads one row at most."""


__all__ = ["AuditLookup"]
