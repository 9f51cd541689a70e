"""The test suite's hidden-write guard: every `Harness` compares each read tool call's system of
record before and after (`toolgate.evals.hidden_writes.HiddenWriteCheck`), and a test during which
a read changed a ``sor_*`` table fails, naming the tool and the table (conftest's
``pytest_runtest_call`` hook calls `fail_on_hidden_writes`).

A test that provokes a hidden write on purpose takes the violations with ``check.take()`` and
asserts them; what it took no longer fails it.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence

from toolgate.evals.hidden_writes import HiddenWrite, HiddenWriteCheck
from toolgate.store import Store
from toolgate.tools.registry import Registry
from toolgate.tools.spec import ToolSpec

_CHECKS: weakref.WeakSet[HiddenWriteCheck] = weakref.WeakSet()
_LOCK = threading.Lock()


def install(store: Store, specs: Sequence[ToolSpec]) -> tuple[HiddenWriteCheck, list[ToolSpec]]:
    """A check on ``store`` and ``specs`` with their reads compared; the guard watches the check."""
    check = HiddenWriteCheck(store)
    with _LOCK:
        _CHECKS.add(check)
    return check, check.wrap(specs)


def install_registry(store: Store, registry: Registry) -> tuple[HiddenWriteCheck, Registry]:
    """`install` for a whole registry: its tools and every tenant's own implementations."""
    check = HiddenWriteCheck(store)
    with _LOCK:
        _CHECKS.add(check)
    return check, registry.mapped(check.wrap)


def outstanding() -> list[HiddenWrite]:
    """Every violation no test has taken yet (and forget them)."""
    with _LOCK:
        checks = list(_CHECKS)
    return [v for check in checks for v in check.take()]


def fail_on_hidden_writes() -> None:
    """Raise an AssertionError naming each read that wrote, if any did."""
    found = outstanding()
    if found:
        lines = "\n".join(f"  {v} ({v.reason})" for v in found)
        raise AssertionError(f"a read tool changed its system of record:\n{lines}")
