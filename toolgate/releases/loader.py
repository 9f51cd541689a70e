"""Finding the release a process serves, from the one setting that names it (``TOOLGATE_RELEASE``).

Three forms, tried in this order:

- ``package.module:attribute`` — an importable module's `Release` (or a function returning one);
- ``path/to/release.py:attribute`` — the same, from a file of a package that is not installed
  (its package root goes on ``sys.path``, so the package's own imports work);
- a name registered in the entry-point group ``toolgate.releases`` — how installed packages,
  toolgate's demo among them, offer their releases by id (``ops-tools/1.1.0``).

The CLI, the LangGraph server and the worker all call `load_release`; nothing else imports a
release by name. A release is code loaded into the gateway, so whatever its import or its factory
raises (a `SystemExit` included) or returns becomes a `RegistryError` naming the reference: the
door that asked for it refuses with ``registry_invalid``, never crashes.
"""

from __future__ import annotations

import importlib
import sys
from importlib.metadata import entry_points
from pathlib import Path

from toolgate.errors import RegistryError, UnknownReleaseError
from toolgate.releases.bundle import Release

ENTRY_POINT_GROUP = "toolgate.releases"
"""Entry-point group under which installed packages register their releases by id."""


def load_release(reference: str) -> Release:
    """The release ``reference`` names; `UnknownReleaseError` when nothing answers to it."""
    reference = reference.strip()
    if not reference:
        raise UnknownReleaseError(reference, registered_releases())
    try:
        release = _target_release(reference)
    except RegistryError:
        raise
    except (Exception, SystemExit) as exc:  # the release's own code failed: contain it, name it
        raise RegistryError(
            f"release {reference!r} could not be loaded: its code raised {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(release, Release):
        raise RegistryError(f"{reference!r} is a {type(release).__name__}, not a toolgate Release")
    return release


def _target_release(reference: str) -> object:
    """What ``reference`` names, its factory called: a `Release` unless the reference is wrong."""
    module_part, colon, attribute = reference.rpartition(":")
    if colon and attribute.isidentifier() and module_part:
        target = getattr(_import(module_part, reference), attribute, None)
        if target is None:
            raise UnknownReleaseError(reference, registered_releases())
    else:
        found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == reference]
        if not found:
            raise UnknownReleaseError(reference, registered_releases())
        target = found[0].load()
    return target() if callable(target) and not isinstance(target, Release) else target


def registered_releases() -> list[str]:
    """Release ids installed packages register (entry points), sorted."""
    return sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))


def _import(module_part: str, reference: str) -> object:
    if module_part.endswith(".py") or "/" in module_part or "\\" in module_part:
        return _import_file(Path(module_part), reference)
    try:
        return importlib.import_module(module_part)
    except ModuleNotFoundError as exc:
        if exc.name and module_part.startswith(exc.name):
            raise UnknownReleaseError(reference, registered_releases()) from exc
        raise  # the release's own code imports something missing: named by `load_release`


def _import_file(path: Path, reference: str) -> object:
    """Import ``path`` as a module of its package, putting the package's root on ``sys.path``."""
    path = path.expanduser().resolve()
    if path.is_dir():
        path = path / "__init__.py"
    if not path.is_file():
        raise UnknownReleaseError(reference, registered_releases())
    parts = [path.stem] if path.name != "__init__.py" else []
    root = path.parent
    while (root / "__init__.py").exists():
        parts.insert(0, root.name)
        root = root.parent
    if not parts:
        raise UnknownReleaseError(reference, registered_releases())
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return importlib.import_module(".".join(parts))


__all__ = ["ENTRY_POINT_GROUP", "load_release", "registered_releases"]
