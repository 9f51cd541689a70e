"""Auditing a call refused because the remote tool it names drifted from its pin.

An MCP tool's handler checks, in the call's own session, that its server still lists the tool as
it was pinned at load (`toolgate.tools.shapes.mcp_pinned`), and raises `ToolDrifted` without
calling it when it does not. Handlers hold no auditor (loaded code never reaches the store), so
the trusted code that ran the handler appends ``handler.tool_drifted`` naming the tool and both
pins: an operator sees what changed, and that nothing ran, beside the failed call itself.
"""

from __future__ import annotations

import re
from typing import Any

from toolgate.errors import ToolDrifted
from toolgate.store.audit import Auditor
from toolgate.tools.spec import HandlerContext

PIN = re.compile(r"[0-9a-f]{64}")
"""A pin: SHA-256 in lowercase hex."""


def audit_drift(
    auditor: Auditor, exc: BaseException, ctx: HandlerContext, tool: str, /, **fields: Any
) -> bool:
    """Append ``handler.tool_drifted`` when ``exc`` is a `ToolDrifted` refusal. ``fields``: the
    call's audit fields. True when an event was appended."""
    if not isinstance(exc, ToolDrifted):
        return False
    fields = {**fields, "tool": tool}
    fields.setdefault("tenant_id", ctx.tenant_id)
    auditor.record(
        "handler.tool_drifted",
        "refused",
        user_id=ctx.user_id,
        code=exc.code,
        detail={"tool": tool, "pinned": _pin_shown(exc.pinned), "found": _pin_shown(exc.found)},
        **fields,
    )
    return True


def _pin_shown(value: object) -> str | None:
    """A pin as the audit keeps it: a SHA-256, None for none (the tool is gone), anything else
    ``not_a_pin`` (a definition without a canonical form). The exception comes from loaded code,
    which could put anything into it (a secret, a megabyte); the tool's name comes from its spec."""
    if value is None:
        return None
    return value if isinstance(value, str) and PIN.fullmatch(value) else "not_a_pin"


__all__ = ["audit_drift"]
