r"""The validator of declared JSON Schemas: Draft 2020-12, with ``multipleOf`` in exact decimals.

``jsonschema`` checks ``multipleOf`` in binary floating point, so a price of ``19.99`` is "not a
multiple of 0.01" (``19.99 / 0.01`` is ``1998.9999999999998``): about one cent value in nine
would be refused against the schema's plain meaning. Here both numbers are read as the decimals
they were written as (the shortest text that round-trips, what the model sent and the schema
says) and divided exactly. Formats are asserted as `toolgate.tools.declared.formats` says.

``pattern`` is an ECMA-262 regular expression, which ``jsonschema`` searches with Python's
``re``, and the two differ exactly where an anchored pattern bounds a string: Python's ``$``
also matches before a final newline (``^[a-z]+\.txt$`` took ``"a.txt\n"``) and its ``\d``,
``\w`` and ``\b`` take letters and digits of every script (``^\d{4}$`` took ``"٢٠٢٦"``).
Here a ``$`` outside a character class is the end of the text (``\Z``) and ``\d``, ``\w``
(and ``\D``, ``\W`` outside a class) are their ASCII classes, as ECMA-262 means them; ``\s`` and
``\b`` keep Python's Unicode meaning, close to ECMA-262's. A pattern Python cannot compile that
way is searched as ``jsonschema`` does.

A published ``pattern`` is a third party's program run on the model's text: ``^(a|a)*$`` against
``"aaa…!"`` backtracks for ever, and Python's ``re`` cannot be interrupted. Patterns are searched
with ``regex`` (``re``'s syntax, with a timeout) inside a time budget of one call
(`pattern_budget`, `CALL_PATTERN_SECONDS`): a value the budget runs out on is refused
``schema_invalid`` ("could not be checked against the pattern in time"), never searched longer.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import re
import time
from collections.abc import Iterator, Mapping
from decimal import Decimal, InvalidOperation, localcontext
from typing import Any

import regex
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError
from jsonschema.validators import extend

from toolgate.tools.declared.formats import ASSERTED_FORMATS


def _multiple_of(
    validator: Any, step: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "number"):
        return
    try:
        with localcontext() as exact:
            exact.prec = 800  # every float's decimal text fits: the remainder is exact
            fits = Decimal(repr(instance)) % Decimal(repr(step)) == 0
    except (InvalidOperation, ValueError):
        fits = False
    if not fits:
        yield ValidationError(f"is not a multiple of {step}")


_ASCII_CLASSES = {"d": "0-9", "w": "A-Za-z0-9_"}
r"""ECMA-262's ``\d`` and ``\w``: ASCII only, where Python's take every script's digits and letters."""


CALL_PATTERN_SECONDS = 1.0
"""Time all ``pattern`` searches of one call's validation may take together (a legitimate pattern
takes microseconds on the largest argument a call may carry)."""

PATTERN_TIMEOUT = "could not be checked against the pattern in time"
"""The message of a ``pattern`` error whose search ran out of time (`toolgate.tools.declared.errors`)."""

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("pattern_deadline", default=None)


@contextlib.contextmanager
def pattern_budget(seconds: float = CALL_PATTERN_SECONDS) -> Iterator[None]:
    """Share ``seconds`` among every ``pattern`` search made inside (one call's validation);
    outside any budget each search has ``seconds`` of its own."""
    token = _DEADLINE.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


@functools.lru_cache(maxsize=1024)
def ecma_pattern(pattern: str) -> regex.Pattern[str] | None:
    """``pattern`` compiled as ECMA-262 means it (see the module docstring), or None when Python
    cannot compile it so."""
    out: list[str] = []
    i, in_class = 0, False
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            escape = pattern[i : i + 2]
            letter = escape[1:]
            if letter.lower() in _ASCII_CLASSES and not (in_class and letter.isupper()):
                members = _ASCII_CLASSES[letter.lower()]
                escape = members if in_class else f"[{'^' if letter.isupper() else ''}{members}]"
            out.append(escape)  # any other escape (``\$`` too) stays as written
            i += 2
            continue
        if in_class:
            in_class = char != "]"
            if char == "[":  # a member, as in ECMA-262 and re; regex would read ``[:alpha:]`` as a class
                char = r"\["
        elif char == "[":
            in_class = True
            start = i + 2 if pattern.startswith("[^", i) else i + 1
            if pattern.startswith("]", start):  # Python: a ``]`` first in a class is a member
                out.append(pattern[i : start + 1])
                i = start + 1
                continue
        elif char == "$":
            char = r"\Z"
        out.append(char)
        i += 1
    translated = "".join(out)
    try:
        re.compile(translated)  # what re cannot compile (``\p{L}``, ``\K``) stays refused as before
        return regex.compile(translated)
    except (re.error, regex.error):
        return None


def _pattern(validator: Any, pattern: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "string"):
        return
    deadline = _DEADLINE.get()
    left = CALL_PATTERN_SECONDS if deadline is None else deadline - time.monotonic()
    try:
        if left <= 0:
            raise TimeoutError
        compiled = ecma_pattern(pattern)
        found = (compiled if compiled is not None else regex.compile(pattern)).search(instance, timeout=left)
    except TimeoutError:
        yield ValidationError(PATTERN_TIMEOUT)
        return
    if not found:
        yield ValidationError(f"does not match {pattern!r}")


def _json_key(value: Any) -> Any:
    """A hashable key equal for two JSON values exactly when JSON Schema calls them equal: numbers
    by value (``1`` and ``1.0``), ``true`` apart from ``1``, objects whatever their key order."""
    if isinstance(value, bool) or value is None:
        return ("literal", value)
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, int | float):
        return ("number", value)  # Python's equal int and float hash alike
    if isinstance(value, Mapping):
        return ("object", frozenset((key, _json_key(item)) for key, item in value.items()))
    if isinstance(value, list | tuple):
        return ("array", tuple(_json_key(item) for item in value))
    return ("other", id(value))


def _unique_items(
    validator: Any, unique: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    """``uniqueItems`` in linear time: ``jsonschema`` compares unsortable items (objects) pairwise,
    and 5,000 small objects in one 64 KiB call took over a minute of dispatch."""
    if not (unique and validator.is_type(instance, "array")):
        return
    keys = {_json_key(item) for item in instance}
    if len(keys) != len(instance):
        yield ValidationError("has non-unique elements")


_MEMBERS: dict[int, tuple[Any, frozenset[Any]]] = {}
"""Each declared ``enum`` list's member keys, by the list's identity (the list kept alive beside
them, so an identity is never reused while cached)."""


def _members(enums: list[Any]) -> frozenset[Any]:
    entry = _MEMBERS.get(id(enums))
    if entry is None or entry[0] is not enums:
        if len(_MEMBERS) > 4096:
            _MEMBERS.clear()
        entry = (enums, frozenset(_json_key(member) for member in enums))
        _MEMBERS[id(enums)] = entry
    return entry[1]


def _enum(validator: Any, enums: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    """``enum`` by one set lookup: ``jsonschema`` compares the value with every member, and a
    published enum of 20,000 names checked 13,000 array items for well over a minute."""
    if _json_key(instance) not in _members(enums):
        yield ValidationError("is not one of the declared values")


DeclaredValidator: Any = extend(
    Draft202012Validator,
    {"multipleOf": _multiple_of, "pattern": _pattern, "uniqueItems": _unique_items, "enum": _enum},
)
"""`Draft202012Validator` with an exact ``multipleOf``, ECMA-262 ``pattern`` and ``uniqueItems``
and ``enum`` in linear time."""


def declared_validator(schema: Mapping[str, Any]) -> Any:
    """The validator of one declared (already checked) schema."""
    return DeclaredValidator(schema, format_checker=ASSERTED_FORMATS)


__all__ = [
    "CALL_PATTERN_SECONDS",
    "PATTERN_TIMEOUT",
    "DeclaredValidator",
    "declared_validator",
    "ecma_pattern",
    "pattern_budget",
]
