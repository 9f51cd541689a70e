"""Bounds on what a model response may put into checkpointed state.

A tool call's arguments are untrusted input. Oversized or deeply nested arguments would bloat
every later checkpoint and model turn, and nesting beyond the serializer's depth crashes the
checkpointer itself. Such calls are moved to ``invalid_tool_calls`` (with a short, truncated
preview) before the response is stored, so dispatch refuses them as ``malformed_arguments``.

Secrets never enter checkpoints: secret-looking values (API keys, passwords, card numbers, ...)
in the model's text and in its call arguments are replaced before the response is stored.
"""

from __future__ import annotations

import json
from typing import Any

from langchain_core.messages import AIMessage

from toolgate.policy.output import redact_text

MAX_ARGUMENT_BYTES = 65_536
MAX_ARGUMENT_DEPTH = 16
PREVIEW_CHARS = 200


def argument_problem(args: Any) -> str | None:
    """Why ``args`` is out of bounds (depth first, measured without recursion), or None."""
    stack: list[tuple[Any, int]] = [(args, 1)]
    size = 0
    while stack:
        value, depth = stack.pop()
        if depth > MAX_ARGUMENT_DEPTH:
            return f"arguments are nested deeper than {MAX_ARGUMENT_DEPTH} levels"
        if isinstance(value, dict):
            size += 2 + sum(len(str(k)) + 3 for k in value)
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list | tuple):
            size += 2 + len(value)
            stack.extend((v, depth + 1) for v in value)
        elif isinstance(value, str):
            size += len(value.encode("utf-8", errors="replace")) + 2
        else:
            size += 8
        if size > MAX_ARGUMENT_BYTES:
            return f"arguments exceed {MAX_ARGUMENT_BYTES} bytes"
    return None


def _preview(value: Any) -> str:
    if isinstance(value, str):
        return value[:PREVIEW_CHARS]
    try:
        return json.dumps(value)[:PREVIEW_CHARS]
    except (TypeError, ValueError, RecursionError):
        return "<unserializable>"


def bound_response(message: AIMessage) -> AIMessage:
    """The response with out-of-bounds calls moved to ``invalid_tool_calls``."""
    kept: list[Any] = []
    moved: list[Any] = list(message.invalid_tool_calls)
    for call in message.tool_calls:
        problem = argument_problem(call.get("args"))
        if problem is None:
            kept.append(call)
        else:
            moved.append(
                {
                    "type": "invalid_tool_call",
                    "name": call.get("name"),
                    "id": call.get("id"),
                    "args": _preview(call.get("args")),
                    "error": problem,
                }
            )
    bounded: list[Any] = []
    for invalid in moved:
        raw = invalid.get("args")
        if isinstance(raw, str) and len(raw) > MAX_ARGUMENT_BYTES:
            invalid = {
                **invalid,
                "args": raw[:PREVIEW_CHARS],
                "error": f"arguments exceed {MAX_ARGUMENT_BYTES} bytes",
            }
        bounded.append(invalid)
    redacted_calls = [{**call, "args": _redact_values(call.get("args"))} for call in kept]
    redacted_invalid = [{**call, "args": _redact_values(call.get("args"))} for call in bounded]
    update: dict[str, Any] = {
        "tool_calls": redacted_calls,
        "invalid_tool_calls": redacted_invalid,
        "additional_kwargs": _redact_values(dict(message.additional_kwargs)),
    }
    if isinstance(message.content, str):
        update["content"] = redact_text(message.content)
    else:
        update["content"] = _redact_values(message.content)
    return message.model_copy(update=update)


def _redact_values(value: Any) -> Any:
    """Secret-looking substrings replaced in every string of a JSON-like value (keys untouched)."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {k: _redact_values(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_values(v) for v in value]
    return value


__all__ = ["MAX_ARGUMENT_BYTES", "MAX_ARGUMENT_DEPTH", "argument_problem", "bound_response"]
