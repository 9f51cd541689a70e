"""A Python-typed tool's argument model may run its team's own code: validated contained, then.

Validating arguments against a Pydantic model runs only pydantic-core unless the model brings
code of its own: a field or model validator, a serializer (the kept arguments are the model's
dump), a default factory, a computed field, a custom ``__init__`` or ``model_post_init``, an
enum's ``_missing_``, a type with its own validation function, a default object copied on each
use, or patterns matched by Python's backtracking ``re``. That code is the tool team's, loaded by
a release like its handler (`toolgate.tools.loaded_code`): it may raise anything, hang, or be
slow by design. A model with none of it validates inline, as it always did (the common case: it
costs no hop); one with any is validated on a loaded-code worker under the lookup deadline, so a
hang refuses that call (at dispatch ``check_failed``) instead of holding the run. Inside loaded
code already (a semantic check building its handler arguments) it runs inline, under the
deadline of what runs it.

Which models run their own code is read once per model class from its core schema.
"""

from __future__ import annotations

import enum
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel

from toolgate.store.handler_access import HANDLER_ACCESS
from toolgate.tools import loaded_code

T = TypeVar("T")

_SAFE_DEFAULTS = (type(None), bool, int, float, str, enum.Enum)
_OWN_CODE_KEYS = frozenset({"post_init", "custom_init"})
"""Core-schema keys that, when true, mean validation calls the model's own methods."""


def _runs_code(node: Any) -> bool:
    """Whether a core-schema node (or anything under it) makes validation or the dump call code
    other than pydantic-core's (see the module docstring)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "metadata":  # JSON Schema generation only, never validation
                continue
            if key in _OWN_CODE_KEYS and value:
                return True
            if key == "type" and value == "computed-field":
                return True
            if key == "regex_engine" and value == "python-re":
                return True
            if key == "cls" and isinstance(value, type):  # the class validated into, not called
                if node.get("type") == "enum" and _enum_runs_code(value):
                    return True  # a value that is no member is passed to the class: ``_missing_``
                continue
            if key == "default" and not _plain(value):
                return True  # copied on each use: its own ``__deepcopy__`` may run
            if _runs_code(value):
                return True
        return False
    if isinstance(node, (list, tuple)):
        return any(_runs_code(item) for item in node)
    return callable(node)


def _enum_runs_code(cls: type) -> bool:
    """Whether an enum's lookup of a value that is no member runs code outside the ``enum``
    module (its own ``_missing_``, or a metaclass of its own)."""
    missing = getattr(getattr(cls, "_missing_", None), "__func__", None)
    return getattr(missing, "__module__", "enum") != "enum" or type(cls).__module__ != "enum"


def _plain(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return all(_plain(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return isinstance(value, _SAFE_DEFAULTS)


_RUNS_CODE: weakref.WeakKeyDictionary[type[BaseModel], bool] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def runs_own_code(model: type[BaseModel]) -> bool:
    """Whether validating (and dumping) ``model`` may run code of the tool's team."""
    with _LOCK:
        known = _RUNS_CODE.get(model)
    if known is None:
        try:
            known = _runs_code(model.__pydantic_core_schema__)
        except Exception:  # a schema that cannot be read is treated as the worst case
            known = True
        with _LOCK:
            _RUNS_CODE[model] = known
    return known


def contained(model: type[BaseModel], fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``, a validation with ``model``: inline when the model runs no code of its own or
    when already inside loaded code, else as a `toolgate.tools.loaded_code.lookup` (raises
    `TimeoutError`, `HandlerAborted` or what ``fn`` raised)."""
    if HANDLER_ACCESS.get() is not None or not runs_own_code(model):
        return fn(*args)
    result: T = loaded_code.lookup(fn, *args)
    return result


__all__ = ["contained", "runs_own_code"]
