"""The CLI's output line, ``key=value key=value``, with every value escaped so that a line says
only what its facts say.

Values come from people and models too (a reason, an effect, a requester's words, a tool's
arguments): a value holding a newline used to start a line of its own, so a rejection reason
``"ok\\nstatus=approved"`` printed as a second line that scripts read as a fact, and a value with a
space read as two. A value that is a plain word is printed as it is; any other (whitespace,
control characters, quotes, backslashes, or empty) is printed as a JSON string: one token, on the
same line, which ``json.loads`` turns back into the text; an ``=`` inside it is written ``\\u003d``,
so a quoted ``status=approved`` is not found even by a grep. A value the caller already wrote as a
JSON string (``effect=json.dumps(...)``) is quoted once, the same way.
"""

from __future__ import annotations

import json
import re
from typing import Any

_PLAIN = re.compile(r'[^\s"\\\x00-\x1f\x7f\u2028\u2029\x85]+')
"""A value printable as it is: no whitespace (any Unicode line break included), quote, backslash
or control character."""


def shown(value: Any) -> str:
    """``value`` as one token of a line (see the module)."""
    text = str(value)
    if _PLAIN.fullmatch(text):
        return text
    if len(text) >= 2 and text[0] == text[-1] == '"' and _is_json_string(text):
        text = json.loads(text)  # written as a JSON string already: quoted once, as below
    # ``=`` inside a quoted value is written ``\u003d`` (the same text to a JSON reader), so not
    # even a grep for ``status=approved`` can find a fact the value only quotes
    return json.dumps(text).replace("=", "\\u003d")


def _is_json_string(text: str) -> bool:
    """Whether ``text`` is exactly one JSON string literal, written on one line (``json.dumps``
    escapes every control character, so one written by it holds no raw line break)."""
    if any(c in text for c in "\n\r\u2028\u2029\x85") or any(ord(c) < 0x20 for c in text):
        return False
    try:
        return isinstance(json.loads(text), str)
    except ValueError:
        return False


def kv_line(**facts: Any) -> str:
    """One ``key=value`` line of ``facts``, each value escaped (`shown`)."""
    return " ".join(f"{key}={shown(value)}" for key, value in facts.items())


__all__ = ["kv_line", "shown"]
