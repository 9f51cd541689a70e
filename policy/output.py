"""Output sanitizing: what a handler returned, made safe to put in front of the model.

Order matters: validate against the tool's result model (contract drift is an error, not
garbage forwarded), keep only the model's fields (an allowlist fails safe when a new sensitive
field appears upstream), redact secret-looking values, then bound the size with an explicit
truncation marker, and label the provenance so the model treats it as data.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, ValidationError

from toolgate.errors import ToolExecutionError

REDACTED = "[REDACTED]"
TRUNCATED = "[TRUNCATED]"

_SECRET_PATTERNS = [
    re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}\b"),  # API keys (OpenAI style)
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),  # AWS access key ids
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}\b"),  # GitHub tokens
    re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\b"),  # JWTs
    re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._\-]{12,}"),
    re.compile(r"(?i)\b(password|passwd|pwd|secret|api[_-]?key|token)\s*[:=]\s*\S+"),
    re.compile(r"\b(?:\d[ -]?){13,19}\b"),  # card and long account numbers
]
_SECRET_KEYS = re.compile(
    r"(?i)(password|passwd|secret|(?<!preview_)token|api[_-]?key|card|iban|account_number|ssn)"
)
"""Keys whose values never reach the model. A ``preview_token`` is a signed, single-use handle the
model must pass back to confirm a preview; it authorizes nothing by itself."""


def redact_text(text: str) -> str:
    """Replace secret-looking substrings of ``text``."""
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(REDACTED, text)
    return text


def count_secrets(text: str) -> int:
    """How many secret-looking substrings ``text`` holds (for scans of logs and stored state)."""
    return sum(len(pattern.findall(text)) for pattern in _SECRET_PATTERNS)


def redact(value: Any, key: str = "") -> Any:
    """Redact a JSON-like value recursively (by key name and by value pattern)."""
    if key and _SECRET_KEYS.search(key) and not isinstance(value, dict | list):
        return REDACTED
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {k: redact(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v, key) for v in value]
    return value


def bound(payload: dict[str, Any], max_bytes: int) -> tuple[str, bool]:
    """Serialize ``payload`` within ``max_bytes``; over-long output is cut with a marker."""
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    if len(text.encode("utf-8")) <= max_bytes:
        return text, False
    budget = max(0, max_bytes - len(TRUNCATED) - 64)
    clipped = text.encode("utf-8")[:budget].decode("utf-8", errors="ignore")
    wrapper = json.dumps({"truncated": True, "marker": TRUNCATED, "partial": clipped}, ensure_ascii=False)
    return wrapper, True


def sanitize_result(result: Any, result_model: type[BaseModel]) -> dict[str, Any]:
    """Validate a handler result against its contract and reduce it to allowed, redacted fields."""
    try:
        if isinstance(result, result_model):
            model = result
        else:
            data = result.model_dump() if isinstance(result, BaseModel) else result
            model = result_model.model_validate(data)
    except ValidationError as exc:
        raise ToolExecutionError(
            "server_error", f"the tool's result broke its contract ({exc.error_count()} problem(s))"
        ) from exc
    redacted: dict[str, Any] = redact(model.model_dump(mode="json"))
    return redacted


__all__ = ["REDACTED", "TRUNCATED", "bound", "count_secrets", "redact", "redact_text", "sanitize_result"]
