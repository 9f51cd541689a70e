"""``release.loaded``: the audit event a process writes when it serves a bundle the store has not
recorded as loaded last (a first start, an upgrade, a promotion).

Processes starting together (four workers, a server and a worker) each find the change; the
check and the append are one transaction under the audit chain's lock
(`Store.audit.append_after`), so the change is recorded once, by whichever process is first.
"""

from __future__ import annotations

from typing import Any

from toolgate.store.audit import Auditor
from toolgate.store.audit_records import AuditEvent, AuditEventIn
from toolgate.store.base import Store

EVENT = "release.loaded"


def record_release_loaded(store: Store, auditor: Auditor, detail: dict[str, Any]) -> AuditEvent | None:
    """Record ``detail`` (``manifest_sha256`` first of all) as loaded unless the latest
    ``release.loaded`` names the same manifest; the event recorded, else None."""

    def build(last: AuditEvent | None) -> AuditEventIn | None:
        if last is not None and last.detail.get("manifest_sha256") == detail["manifest_sha256"]:
            return None
        previous = last.tool_release if last else None
        return auditor.event(EVENT, "loaded", detail={**detail, "previous_release": previous})

    return store.audit.append_after(EVENT, build)


__all__ = ["EVENT", "record_release_loaded"]
