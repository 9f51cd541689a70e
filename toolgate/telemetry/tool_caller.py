"""`ToolCaller`: who calls which version of a tool, with how much (a tool span's identity, §13.1)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toolgate.telemetry.attributes import ARGUMENT_BYTES, PRINCIPAL_HASH, TENANT_ID, TOOL_VERSION


@dataclass(frozen=True)
class ToolCaller:
    """Who calls which version of a tool, with how much: a tool span's identifying attributes."""

    version: str
    principal_hash: str | None
    """The auditor's keyed actor hash (``user_hmac_k...``): the raw user id never reaches a span."""
    tenant_id: str
    argument_bytes: int

    def attributes(self) -> dict[str, Any]:
        """The span attributes (no principal hash attribute when there is no principal)."""
        found = {TOOL_VERSION: self.version, TENANT_ID: self.tenant_id, ARGUMENT_BYTES: self.argument_bytes}
        return {**found, PRINCIPAL_HASH: self.principal_hash} if self.principal_hash else found


__all__ = ["ToolCaller"]
