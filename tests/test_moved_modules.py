"""The previous layout's module names still import (`toolgate.moved_modules`), each as the module
that holds its code now, with a warning; nothing of toolgate's own uses them."""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys

import pytest
import test_import_graph as layout

from toolgate.moved_modules import MOVED_MODULES, MOVED_TO_PACKAGE


@pytest.mark.parametrize("old", sorted(MOVED_MODULES))
def test_an_old_module_name_is_the_new_module(old: str) -> None:
    new = importlib.import_module(MOVED_MODULES[old])
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {MOVED_MODULES[old]}"):
        found = importlib.import_module(old)
    assert found is new


@pytest.mark.parametrize("package", sorted(MOVED_TO_PACKAGE))
def test_a_package_answers_its_old_modules_names(package: str) -> None:
    old_code = importlib.import_module(MOVED_TO_PACKAGE[package])
    names = [
        n
        for n in getattr(old_code, "__all__", ())
        if not n.startswith("_") and importlib.util.find_spec(f"{package}.{n}") is None
    ]  # a name that is also a submodule's is the submodule (test below)
    assert names, f"{MOVED_TO_PACKAGE[package]} declares no public names"
    imported = importlib.import_module(package)
    for name in names:
        with pytest.warns(DeprecationWarning, match=f"{package}.{name} moved"):
            assert getattr(imported, name) is getattr(old_code, name)
    with pytest.raises(AttributeError):
        _ = imported.no_such_name


def test_a_submodule_is_never_shadowed_by_an_old_name() -> None:
    """``from toolgate.graph.review import edits`` is the submodule, whatever the old module held."""
    out = subprocess.run(
        [
            sys.executable,
            "-W",
            "error",
            "-c",
            "from toolgate.graph.review import edits; print(edits.__name__)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "toolgate.graph.review.edits"


def test_toolgate_itself_imports_no_old_name() -> None:
    _, imports = layout.scan()
    old = [imp.where() for imp in imports if imp.target in MOVED_MODULES]
    assert not old, "imports of a moved module's old name:\n" + "\n".join(old)


def test_every_successor_exists() -> None:
    modules, _ = layout.scan()
    missing = sorted(
        new for new in {*MOVED_MODULES.values(), *MOVED_TO_PACKAGE.values()} if new not in modules
    )
    assert not missing
