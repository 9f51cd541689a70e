"""What a model response may put into checkpointed state, decided before it is stored.

A tool call's arguments and even its id are untrusted input. Some values cannot be judged at
all, and some would crash the machinery before dispatch could refuse them: integers beyond 64
bits (the checkpoint serializer), NaN and Infinity (canonical JSON), NUL characters (PostgreSQL
text), arguments that are too large or too deeply nested, a tool name longer than any tool's
(``unknown_tool``), and more calls in one turn than the gateway judges. Such a call is
*screened*: moved to ``invalid_tool_calls`` with a short, safe preview instead of its arguments,
and its stable code kept in ``screened`` so dispatch refuses it with that code and a
`ToolMessage` carrying the same call id.

Secret-looking values in arguments are never rewritten: what runs must be what was judged and
approved. A call holding one is screened (``secret_in_arguments``) unless its tool declares
``secret_arguments="review"``, in which case its real arguments go on to a proposal that a
reviewer sees as they are. A call whose tool name holds one, parsed or not, is screened the same
way, always (no tool is named so). The model's text itself carries no authority and is redacted; the
provider's opaque items (reasoning with its encrypted content, signatures, item and call ids) are
kept byte for byte, since the next request must carry them back as they came, except that an
integer past 64 bits anywhere in the response (a token count, metadata, an item's field: the
provider's or a proxy's number) is kept as its decimal text, which the checkpoint can hold.
"""

from __future__ import annotations

import json
import math
import unicodedata
from collections import Counter
from collections.abc import Mapping
from typing import Any

from langchain_core.messages import AIMessage

from toolgate.policy.decisions import Rejection
from toolgate.policy.output import count_secrets, redact_text
from toolgate.tools.arguments import INT64_RANGE
from toolgate.tools.registry import Registry
from toolgate.tools.spec import MAX_NAME_LENGTH

MAX_ARGUMENT_BYTES = 65_536
MAX_ARGUMENT_DEPTH = 16
MAX_CALL_ID_CHARS = 256
PREVIEW_CHARS = 200
INT_RANGE = INT64_RANGE
"""Integers the checkpoint serializer and every database column can hold."""


SCREEN_REJECTIONS: dict[str, Rejection] = {
    "malformed_arguments": Rejection(
        code="malformed_arguments",
        message="Arguments must be one JSON object matching the tool schema, within the size and nesting limits.",
        retryable=True,
    ),
    "non_finite_number": Rejection(
        code="non_finite_number",
        message="Numbers must be finite: NaN and Infinity are not accepted.",
        retryable=True,
    ),
    "number_out_of_range": Rejection(
        code="number_out_of_range",
        message="Integers must fit in 64 bits.",
        retryable=True,
    ),
    "nul_character": Rejection(
        code="nul_character",
        message="Text, names and call ids must not contain NUL characters.",
        retryable=True,
    ),
    "unknown_tool": Rejection(
        code="unknown_tool",
        message="No tool with that name is available.",
        retryable=True,
    ),
    "secret_in_arguments": Rejection(
        code="secret_in_arguments",
        message="Arguments must not carry secrets (API keys, passwords, tokens, card numbers). "
        "Do not repeat the value; tell the user to use the product's secure flow instead.",
        retryable=True,
        suggestion="call again without the secret-looking value",
    ),
}
"""How dispatch refuses a call screened by `screen_response` (``too_many_calls`` aside)."""


def too_many_calls(limit: int) -> Rejection:
    """The refusal of every call past the per-turn limit."""
    return Rejection(
        code="too_many_calls",
        message=f"Not judged: more than {limit} tool calls in one turn. Make fewer calls at a time.",
        retryable=True,
    )


def argument_problem(args: Any) -> tuple[str, str] | None:
    """``(code, message)`` when ``args`` cannot be judged, else None (iterative: no recursion)."""
    if not isinstance(args, dict):
        return "malformed_arguments", "arguments must be one JSON object"
    stack: list[tuple[Any, int]] = [(args, 1)]
    size = 0
    while stack:
        value, depth = stack.pop()
        if depth > MAX_ARGUMENT_DEPTH:
            return "malformed_arguments", f"arguments are nested deeper than {MAX_ARGUMENT_DEPTH} levels"
        if isinstance(value, dict):
            size += 2
            for key, item in value.items():
                if not isinstance(key, str) or "\x00" in key:
                    return "nul_character", "argument names must be text without NUL characters"
                size += len(key) + 3
                stack.append((item, depth + 1))
        elif isinstance(value, list | tuple):
            size += 2 + len(value)
            stack.extend((v, depth + 1) for v in value)
        elif isinstance(value, str):
            if "\x00" in value:
                return "nul_character", "arguments must not contain NUL characters"
            size += len(value.encode("utf-8", errors="replace")) + 2
        elif isinstance(value, bool) or value is None:
            size += 5
        elif isinstance(value, int):
            if not INT_RANGE[0] <= value <= INT_RANGE[1]:
                return "number_out_of_range", "integers must fit in 64 bits"
            size += 20
        elif isinstance(value, float):
            if not math.isfinite(value):
                return "non_finite_number", "numbers must be finite (no NaN or Infinity)"
            size += 24
        else:
            return "malformed_arguments", "arguments must be plain JSON values"
        if size > MAX_ARGUMENT_BYTES:
            return "malformed_arguments", f"arguments exceed {MAX_ARGUMENT_BYTES} bytes"
    return None


def call_id_problem(call_id: Any) -> tuple[str, str] | None:
    """``(code, message)`` when a call id cannot be stored and audited as it is."""
    text = str(call_id or "")
    if "\x00" in text:
        return "nul_character", "the call id contains a NUL character"
    if len(text) > MAX_CALL_ID_CHARS:
        return "malformed_arguments", f"the call id is longer than {MAX_CALL_ID_CHARS} characters"
    return None


def holds_secret(value: Any) -> bool:
    """True when any string in a JSON value, a key included, looks like a secret (API key, token,
    card number...): an argument's name is the model's text as much as its value."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if count_secrets(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return False


def _safe_text(value: Any, limit: int = PREVIEW_CHARS) -> str:
    """A short preview that can be stored anywhere: no NUL or other control characters, redacted."""
    if not isinstance(value, str):
        try:
            value = json.dumps(value, default=repr)
        except (TypeError, ValueError, RecursionError):
            value = "<unserializable>"
    value = value[: limit * 2]
    if not value.isprintable():
        value = "".join(
            "\ufffd" if unicodedata.category(ch) == "Cc" and ch not in "\n\t" else ch for ch in value
        )
    return redact_text(value)[:limit]


def _parse_error(call: Mapping[str, Any]) -> str:
    """The client's reason an unparseable call is invalid, as it may be stored: without the
    arguments it repeats (``langchain-openai`` quotes them whole: "Function f arguments: <all of
    them> are not valid JSON"), redacted and bounded like a preview."""
    error = str(call.get("error") or "arguments are not valid JSON")
    args = call.get("args")
    if isinstance(args, str) and args.strip():
        error = error.replace(args, "<the arguments>")
    return _safe_text(error)


def _screened(call: Mapping[str, Any], message: str) -> dict[str, Any]:
    return {
        "type": "invalid_tool_call",
        "name": _safe_text(call.get("name") or "", 64),
        "id": call.get("id"),
        "args": "{}",
        "error": message,
    }


CALL_ITEMS: dict[str, tuple[str, str, Any]] = {
    "function_call": ("call_id", "arguments", None),
    "custom_tool_call": ("call_id", "input", ""),
    "tool_use": ("id", "input", {}),
}
"""Content blocks that are a provider's own copy of a call: block type -> (id key, arguments key,
replacement when the call was moved aside; None: the moved record's arguments text)."""


def _redacted_block(block: Any) -> Any:
    """A text or refusal block with its words redacted (its ids and annotations kept); any other
    block is returned as the same object."""
    if not isinstance(block, dict):
        return block
    field = {"text": "text", "refusal": "refusal"}.get(str(block.get("type")))
    if field is None or not isinstance(block.get(field), str):
        return block
    return {**block, field: redact_text(block[field])}


def _screened_content(content: Any, kept: set[str], moved: Mapping[str, Mapping[str, Any]]) -> Any:
    """The content as it may be stored and sent back to the provider.

    Model-visible words (a string, text and refusal blocks) are redacted. Every other block is an
    opaque provider item (a reasoning item with its encrypted content, a signed thinking block, a
    kept call) and stays the very same object, byte for byte: the provider checks it when it comes
    back, and nothing here reads or shows it. The one exception is the provider's copy of a call
    that was not kept: its arguments become what the call's record holds (the screened placeholder
    or the safe preview), so what screening removed does not come back through the copy, while the
    item and call ids stay, so the call's refusal still answers it."""
    if isinstance(content, str):
        return redact_text(content)
    if not isinstance(content, list):
        return content
    out: list[Any] = []
    for block in content:
        item = CALL_ITEMS.get(str(block.get("type"))) if isinstance(block, dict) else None
        if item is None:
            out.append(_redacted_block(block))
            continue
        id_key, args_key, replacement = item
        call_id = str(block.get(id_key) or "")
        if call_id in kept:
            out.append(block)
            continue
        record = moved.get(call_id, {})
        safe_args = record.get("args", "{}") if replacement is None else replacement
        out.append(
            {
                **block,
                "name": record.get("name", _safe_text(block.get("name") or "", 64)),
                args_key: safe_args,
            }
        )
    return out


def _fits(value: Any, depth: int = 0) -> bool:
    """Whether every integer in ``value`` fits in 64 bits (what the checkpoint serializer holds)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return INT_RANGE[0] <= value <= INT_RANGE[1]
    if depth > MAX_ARGUMENT_DEPTH * 4:
        return True
    if isinstance(value, dict):
        return all(_fits(v, depth + 1) for v in value.values())
    if isinstance(value, list | tuple):
        return all(_fits(v, depth + 1) for v in value)
    return True


def _storable(value: Any, depth: int = 0) -> Any:
    """``value`` with each integer past 64 bits written as its decimal text: the provider's (or a
    proxy's) numbers in metadata and opaque items, which the checkpoint serializer refuses. The
    very same object when it holds none."""
    if _fits(value, depth):
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, dict):
        return {k: _storable(v, depth + 1) for k, v in value.items()}
    return [_storable(v, depth + 1) for v in value]


def screen_response(
    message: AIMessage, registry: Registry, *, max_calls: int
) -> tuple[AIMessage, dict[str, str]]:
    """The response as it may be stored, and the screening code of every call moved aside."""
    kept: list[Any] = []
    moved: list[Any] = []
    screened: dict[str, str] = {}
    listed: list[tuple[Mapping[str, Any], bool]] = [(c, False) for c in message.tool_calls]
    listed += [(c, True) for c in message.invalid_tool_calls]
    # a call without an id is named by its place here, in the kept message too: its answer must
    # name a call the provider is sent back (dispatch names it the same: `proposed_calls`)
    calls = [(c if c.get("id") else {**c, "id": f"call_missing_{i}"}, bad) for i, (c, bad) in enumerate(listed)]
    # one id names one call: the turn keeps one record per id, so of two calls under one id one
    # would vanish unanswered while the other ran; neither can be answered as itself
    uses = Counter(str(call.get("id") or "") for call, _ in calls)
    for index, (call, invalid) in enumerate(calls):
        call_id = str(call.get("id") or "")
        problem = call_id_problem(call_id)
        if problem is None and call_id and uses[call_id] > 1:
            problem = ("malformed_arguments", "another call of this turn has the same call id")
        if problem is None and index >= max_calls:
            problem = ("too_many_calls", f"more than {max_calls} calls in one turn")
        if problem is None and len(str(call.get("name") or "")) > MAX_NAME_LENGTH:  # names no tool
            problem = ("unknown_tool", f"the tool name is longer than {MAX_NAME_LENGTH} characters")
        if problem is None and count_secrets(str(call.get("name") or "")):  # the model's text too
            problem = ("secret_in_arguments", "the tool name holds a secret-looking value")
        if problem is None and not invalid:
            problem = argument_problem(call.get("args"))
            if problem is None and holds_secret(call.get("args")):
                spec = registry.get(str(call.get("name") or ""))
                if spec is None or spec.secret_arguments != "review":
                    problem = ("secret_in_arguments", "arguments hold a secret-looking value")
        if problem is not None:
            code, text = problem
            moved.append(_screened(call, text))
            if call_id:
                screened[call_id] = code
        elif invalid:
            moved.append(
                {**call, "args": _safe_text(call.get("args"), MAX_ARGUMENT_BYTES), "error": _parse_error(call)}
            )
        else:
            kept.append(call)
    # the raw provider copy of the calls would carry what was just screened out; tool_calls is the record
    extra = {k: v for k, v in message.additional_kwargs.items() if k not in ("tool_calls", "function_call")}
    moved_ids = {str(c.get("id") or "") for c in moved}
    kept_ids = {str(c.get("id") or "") for c in kept} - moved_ids
    content = _screened_content(message.content, kept_ids, {str(c.get("id") or ""): c for c in moved})
    update: dict[str, Any] = {
        "tool_calls": kept,
        "invalid_tool_calls": moved,
        "additional_kwargs": _storable(extra),
        "content": [_storable(block) for block in content] if isinstance(content, list) else content,
        "response_metadata": _storable(message.response_metadata),
        # the model node has counted it already; a count past 64 bits is no count to keep
        "usage_metadata": message.usage_metadata if _fits(message.usage_metadata) else None,
    }
    return message.model_copy(update=update), screened


__all__ = [
    "INT_RANGE",
    "MAX_ARGUMENT_BYTES",
    "MAX_ARGUMENT_DEPTH",
    "MAX_CALL_ID_CHARS",
    "SCREEN_REJECTIONS",
    "argument_problem",
    "call_id_problem",
    "holds_secret",
    "screen_response",
    "too_many_calls",
]
