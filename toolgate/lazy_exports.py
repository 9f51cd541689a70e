"""A package's public names, imported on first use (PEP 562 module ``__getattr__``).

Why: ``import toolgate.store`` (a migration script, a worker's child, a test's helper process)
runs ``toolgate/__init__`` first, and an eager ``__init__`` imports the whole graph stack with it
(LangGraph, LangChain, LangSmith: most of a process's start-up). With `lazy_exports` a name such
as ``toolgate.build_graph`` is imported when it is first read, and ``from toolgate import X``
works as before. Type checkers read the ``TYPE_CHECKING`` imports beside it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: each name of ``exports`` is read from the
    module it maps to on first access, then kept in ``namespace`` (the package's globals)."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__


__all__ = ["lazy_exports"]
