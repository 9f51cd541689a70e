"""Canonical JSON and the digests and keys built on it.

Equal intent must give equal bytes: arguments are first normalized by their Pydantic model, then
encoded in toolgate's own canonical form. Approval digests, operation keys and audit hashes are
SHA-256 over this form, so it is frozen: changing any rule below changes every stored digest,
operation key and audit hash (``tests/test_canonical.py`` pins it).

The form, exactly:

- object keys sorted by Unicode code point at every depth (a non-string key is written as
  ``str(key)``); no whitespace: ``,`` and ``:`` separators;
- strings as Python's ``json`` writes them with ``ensure_ascii=False``: characters kept as
  themselves (UTF-8 once hashed), only ``"``, ``\\`` and control characters below U+0020 escaped;
- integers in full decimal digits, however large; ``true``, ``false``, ``null``; tuples as arrays;
- a float (or `decimal.Decimal`, converted to float first) with an integral value as that integer
  in full digits (``1.0`` is ``1``, ``-0.0`` is ``0``, ``1e21`` is ``1000000000000000000000``),
  any other float in Python's shortest round-trip form (``0.1``, ``1e-07``);
- NaN and infinity refused (`ValueError`), any other type refused (`TypeError`).

It is not RFC 8785 (JCS), though close to it: RFC 8785 writes every number in ECMAScript's form
(``1e+21``, ``1e-7``, integers beyond 2**53 rounded through a double) and sorts keys by UTF-16
code units, which orders a key holding a character beyond U+FFFF before one holding a character
in U+E000..U+FFFF; this form orders them by code point. Do not verify these digests with a JCS
library.
"""

from __future__ import annotations

import hashlib
import json
import math
from decimal import Decimal
from typing import Any

_AS_IS: frozenset[type] = frozenset((str, int, bool, type(None)))
"""Exact types the form writes as they are (their subclasses take the general path below)."""


def _normalize(value: Any) -> Any:
    kind = type(value)
    if kind in _AS_IS:  # the common values first, by exact type: the same result, fewer checks
        return value
    if kind is dict:
        return {k if type(k) is str else str(k): _normalize(v) for k, v in value.items()}
    if kind is list:
        return [_normalize(v) for v in value]
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


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode
_ORDERED = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
"""The encoders of `canonical_json` and `ordered_json`, made once (what ``json.dumps`` writes
with the same options; with options it makes a new encoder at every call, which costs more than
encoding a short value)."""


def canonical_json(value: Any) -> str:
    """Encode ``value`` in toolgate's canonical JSON form (see the module docstring; not RFC 8785)."""
    return _CANONICAL(_normalize(value))


def ordered_json(value: Any) -> str:
    """``value`` with the canonical form's values (one number form, no whitespace) but its keys in
    the order they came: how the store keeps a proposal's arguments, so the handler receives them
    in the order and shape the model sent. Never digest or key this text: that is `canonical_json`'s."""
    return _ORDERED(_normalize(value))


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


__all__ = ["canonical_json", "digest", "idempotency_key_for", "operation_key", "ordered_json", "sha256_hex"]
