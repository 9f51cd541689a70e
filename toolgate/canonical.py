"""Canonical JSON and the digests and keys built on it.

Equal intent must give equal bytes: arguments are first normalized by their Pydantic model,
then encoded RFC 8785 style (sorted keys, no insignificant whitespace, UTF-8, one number form).
Approval digests, operation keys and audit hashes are SHA-256 over this form.
"""

from __future__ import annotations

import hashlib
import json
import math
from decimal import Decimal
from typing import Any


def _normalize(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float | Decimal):
        number = float(value)
        if not math.isfinite(number):
            raise ValueError("canonical JSON cannot encode NaN or infinity")
        # one number form: integral floats are written as integers (1.0 -> 1)
        return int(number) if number.is_integer() else number
    if isinstance(value, dict):
        return {str(k): _normalize(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalize(v) for v in value]
    raise TypeError(f"canonical JSON cannot encode {type(value).__name__}")


def canonical_json(value: Any) -> str:
    """Encode ``value`` as canonical JSON text (sorted keys, compact, UTF-8 characters kept)."""
    return json.dumps(_normalize(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256_hex(text: str) -> str:
    """SHA-256 of ``text`` encoded as UTF-8, as 64 lowercase hex characters."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def digest(value: Any) -> str:
    """SHA-256 hex digest of the canonical JSON form of ``value``."""
    return sha256_hex(canonical_json(value))


def operation_key(*, tenant_id: str, task_id: str, call_id: str, tool: str, arguments: dict[str, Any]) -> str:
    """The stable key of one intended effect: one accepted write call of one task.

    Derived from tenant, task (thread) id, the model's call id, tool and canonical arguments.
    The same model response delivered again (same call ids) finds the same operation, so it never
    runs twice; two calls that happen to be equal (two equal certificates the user asked for) are
    two operations, each approved and executed once. Made once at proposal time and kept in
    checkpointed state; never regenerated in a retry loop.
    """
    material = {"tenant": tenant_id, "task": task_id, "call": call_id, "tool": tool, "args": arguments}
    return "op_" + digest(material)[:32]


def idempotency_key_for(operation_key: str, purpose: str = "downstream") -> str:
    """The idempotency key a handler sends downstream, derived from the operation key."""
    return "idem_" + sha256_hex(f"{purpose}:{operation_key}")[:32]


__all__ = ["canonical_json", "digest", "idempotency_key_for", "operation_key", "sha256_hex"]
