"""JSON from outside, parsed within a nesting bound.

Python's ``json`` parser recurses once per level, so a few thousand nested brackets (a 9,000-deep
body is 18 KB) raise `RecursionError`, which is not a `ValueError`: every door that caught
``ValueError`` for bad JSON answered it with a crash (a 500, a failed run, a traceback) instead of
its refusal. Every door that parses JSON someone else wrote (an HTTP body, a CLI argument, a
model's function-call arguments, the offline model's ``call`` lines) measures the nesting first,
in one linear pass that never recurses, and refuses past `MAX_JSON_DEPTH` with a `JSONTooDeep`,
which *is* a `ValueError`, so the door's existing refusal answers it.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_JSON_DEPTH = 128
"""Deepest nesting accepted at a door: far beyond any decision, edit or tool call (arguments are
held to 16 levels after parsing), far below where the parser's recursion gives out."""


class JSONTooDeep(ValueError):
    """A JSON text nested deeper than the door accepts (refused before it is parsed)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"JSON nested deeper than {limit} levels")
        self.limit = limit


_STRUCTURE = re.compile(r'[\[\]{}"\\]')
"""The only characters that matter for nesting: brackets, quotes and the escape character."""


def nesting_exceeds(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``text`` opens more than ``limit`` arrays and objects inside each other (brackets
    inside strings do not count). One pass over the structural characters only, no recursion;
    stops at the first level past it."""
    depth = 0
    in_string = False
    skip = -1  # the position of a character an escape consumed
    for match in _STRUCTURE.finditer(text):
        at, char = match.start(), match.group()
        if at == skip:
            continue
        if in_string:
            if char == "\\":
                skip = at + 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return True
        elif char in "]}":
            depth -= 1
    return False


def loads(text: str | bytes, *, max_depth: int = MAX_JSON_DEPTH, **options: Any) -> Any:
    """`json.loads` of ``text`` after checking its nesting (`JSONTooDeep` past ``max_depth``);
    ``options`` are `json.loads`'s own."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    if nesting_exceeds(text, max_depth):
        raise JSONTooDeep(max_depth)
    return json.loads(text, **options)


__all__ = ["MAX_JSON_DEPTH", "JSONTooDeep", "loads", "nesting_exceeds"]
