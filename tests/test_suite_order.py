"""The suite starts its slowest files first (tests/suite_order.py), and reorders without losing
or splitting anything."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from suite_order import SLOWEST, slowest_first

TESTS = Path(__file__).resolve().parent


def _items(*names: str) -> list[Any]:
    """Stand-ins for collected tests: ``file.py::n`` for each name (only ``path`` is read)."""
    return [SimpleNamespace(path=TESTS / name.split("::")[0], nodeid=name) for name in names]


def test_the_slowest_files_come_first_in_their_order_and_the_rest_keep_theirs() -> None:
    items = _items("test_a.py::1", "test_b.py::1", "test_slow.py::1", "test_b.py::2", "test_slower.py::1")
    items.append(items.pop(2))  # a file's tests need not be next to each other in the input
    slowest_first(items, ["test_slower.py", "test_slow.py", "test_gone.py"])
    assert [i.nodeid for i in items] == [
        "test_slower.py::1",
        "test_slow.py::1",
        "test_a.py::1",
        "test_b.py::1",
        "test_b.py::2",
    ]


def test_every_listed_file_exists_and_is_listed_once() -> None:
    assert SLOWEST, "the list is empty: every file would start in collection order"
    assert len(set(SLOWEST)) == len(SLOWEST)
    missing = [name for name in SLOWEST if not (TESTS / name).is_file()]
    assert not missing, f"renamed or removed, so they no longer start first: {missing}"
