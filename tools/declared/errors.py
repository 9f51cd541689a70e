"""What is wrong with one call's arguments to a declared-schema tool, in words the model can act on.

The contract (`toolgate.tools.declared.tools`) decides *whether* a call fits its schema; this module
decides *what the model is told* when it does not: ``(path, problem)`` pairs for
`toolgate.tools.arguments.ArgumentsInvalid`. It is kept apart because its rule is different and
easy to break when editing validation: a problem is written from the schema only, never from the
input, which may hold anything the model (or an injected document) wrote. Values a JSON parser
could not have produced, and nesting too deep to validate safely, are screened here first.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from typing import Any

from jsonschema.exceptions import ValidationError as SchemaViolation

from toolgate.tools.declared.validator import PATTERN_TIMEOUT
from toolgate.tools.schema.walk import join

MAX_VALUE_DEPTH = 64
"""Arguments nested deeper than this are refused before validation (which recurses)."""

_MAX_SHOWN = 200


def value_problems(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """Values a JSON parser could not have produced (non-finite numbers, foreign types), and
    nesting too deep to validate; iterative, so hostile depth cannot exhaust the stack."""
    stack: list[tuple[Any, str, int]] = [(value, path, 0)]
    while stack:
        item, where, depth = stack.pop()
        shown = where or "(arguments)"
        if depth > MAX_VALUE_DEPTH:
            yield shown, f"is nested deeper than {MAX_VALUE_DEPTH} levels"
            return
        if isinstance(item, Mapping):
            if not all(isinstance(key, str) for key in item):
                yield shown, "object keys must be strings"
                continue
            stack.extend((sub, join(where, _shown_key(key)), depth + 1) for key, sub in item.items())
        elif isinstance(item, list):
            stack.extend((sub, join(where, str(index)), depth + 1) for index, sub in enumerate(item))
        elif isinstance(item, float) and not math.isfinite(item):
            yield shown, "must be a finite number"
        elif not (item is None or isinstance(item, str | int | float | bool)):
            yield shown, "is not a JSON value"


def error_order(error: SchemaViolation) -> tuple[str, str]:
    """Sort key of validation errors: by path, then keyword, so problems come in a stable order."""
    return (".".join(str(p) for p in error.absolute_path), str(error.validator))


_TEMPLATES = {
    "minimum": "must be >= {}",
    "maximum": "must be <= {}",
    "exclusiveMinimum": "must be > {}",
    "exclusiveMaximum": "must be < {}",
    "multipleOf": "must be a multiple of {}",
    "minLength": "must be at least {} characters long",
    "maxLength": "must be at most {} characters long",
    "pattern": "must match the pattern {}",
    "format": "must be in the format {}",
    "minItems": "must have at least {} items",
    "maxItems": "must have at most {} items",
    "uniqueItems": "items must be unique",
    "minProperties": "must have at least {} properties",
    "maxProperties": "must have at most {} properties",
    "contains": "must contain an item of the declared shape",
    "minContains": "must contain at least {} items of the declared shape",
    "maxContains": "must contain at most {} items of the declared shape",
}


def describe(error: SchemaViolation) -> list[tuple[str, str]]:
    """Path and problem of one validation error, from the schema only (never the input value)."""
    path = ".".join(_shown_key(str(p)) for p in error.absolute_path)
    where = path or "(arguments)"
    keyword = str(error.validator)
    value = error.validator_value
    if keyword == "required":
        present = error.instance if isinstance(error.instance, Mapping) else {}
        return [(join(path, str(name)), "is required") for name in value if name not in present]
    if keyword == "additionalProperties":
        declared = (error.schema.get("properties") or {}) if isinstance(error.schema, Mapping) else {}
        extras = (
            [k for k in error.instance if k not in declared] if isinstance(error.instance, Mapping) else []
        )
        return [(join(path, _shown_key(str(k))), "is not a declared property") for k in extras] or [
            (where, "has undeclared properties")
        ]
    if keyword == "type":
        kinds = value if isinstance(value, list) else [value]
        return [(where, "must be " + " or ".join(str(k) for k in kinds))]
    if keyword == "enum":
        return [(where, f"must be one of {_short(value)}")]
    if keyword == "const":
        return [(where, f"must be {_short(value)}")]
    if keyword == "anyOf":
        return _describe_any_of(error, where)
    if keyword == "pattern" and error.message == PATTERN_TIMEOUT:
        return [(where, f"{PATTERN_TIMEOUT} {_short(value)}")]
    if error.validator is None:  # a `false` subschema; jsonschema reports it at its parent's path
        return [(where, "holds a property or item that must not be sent")]
    if keyword == "False" or value is False:
        return [(where, "is not allowed here")]
    if keyword in _TEMPLATES:
        return [(where, _TEMPLATES[keyword].format(_short(value)))]
    return [(where, f"does not satisfy {keyword!r}")]


def _describe_any_of(error: SchemaViolation, where: str) -> list[tuple[str, str]]:
    """The one alternative the value's JSON type fits, explained; else a general statement."""
    by_branch: dict[int, list[SchemaViolation]] = {}
    for sub in error.context or []:
        branch = sub.relative_schema_path[0] if sub.relative_schema_path else -1
        if isinstance(branch, int):
            by_branch.setdefault(branch, []).append(sub)
    fitting = [
        errors
        for errors in by_branch.values()
        if not any(e.validator == "type" and not e.relative_path for e in errors)
    ]
    if len(fitting) == 1:
        return [p for sub in sorted(fitting[0], key=error_order) for p in describe(sub)]
    return [(where, "must match one of the declared alternatives")]


def _shown_key(key: str) -> str:
    shown = "".join(ch if ch.isprintable() else "?" for ch in key[:64])
    return shown + ("..." if len(key) > 64 else "")


_SHOWN: dict[int, tuple[Any, str]] = {}
"""Each declared list or object's shown text, by identity (kept alive beside it): a published
enum of 20,000 names was dumped whole once per refused array item, 13,000 times in one call."""


def _short(value: Any) -> str:
    entry = _SHOWN.get(id(value))
    if entry is not None and entry[0] is value:
        return entry[1]
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    shown = text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."
    if isinstance(value, list | dict):
        if len(_SHOWN) > 4096:
            _SHOWN.clear()
        _SHOWN[id(value)] = (value, shown)
    return shown


__all__ = ["MAX_VALUE_DEPTH", "describe", "error_order", "value_problems"]
