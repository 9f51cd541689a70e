"""File-system arguments: a path the model supplies may only name something under the tool's
allow-listed roots.

A tool that reads or writes files declares which of its arguments are paths by annotating them
(``path: Annotated[str, ToolPath()]``, or the `PathArgument` alias) and names its roots on its spec
(``ToolSpec.file_roots``, absolute directories, from trusted configuration, never from the model).
The chapter's §12.3: a path segment that comes from model output shaped by a document it read is
an attack surface (``../../etc/passwd``), so every path argument is judged before any handler runs
(`path_problem`; dispatch refuses it ``path_not_allowed``, and a read is judged again at execute):

* a ``..`` segment is refused outright, wherever it would lead;
* a relative path is taken relative to the first root; an absolute one must lie under a root;
* the path is resolved (every symlink followed, `os.path.realpath`) and the *resolved* path must
  lie under a resolved root, so a symlink inside a root that points outside it is refused too.

A tool with a path argument and no roots does not load (a stop condition of `ToolSpec`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePath
from typing import Annotated, Any, get_args

from pydantic import BaseModel


@dataclass(frozen=True)
class ToolPath:
    """Marks a ``str`` argument as a file-system path judged against the tool's ``file_roots``."""


PathArgument = Annotated[str, ToolPath()]
"""A path argument: ``path: PathArgument``."""


def _marked(annotation: Any, seen: frozenset[int] = frozenset()) -> bool:
    """Whether a `ToolPath` marks ``annotation`` anywhere inside it (``PathArgument | None``,
    ``list[PathArgument]``, a nested model's field), not only at its top."""
    if isinstance(annotation, ToolPath):
        return True
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if id(annotation) in seen:
            return False
        inner, fields = seen | {id(annotation)}, annotation.model_fields.values()
        return any(_marked(m, inner) for info in fields for m in (*info.metadata, info.annotation))
    return any(_marked(arg, seen) for arg in get_args(annotation))


def path_fields(args_model: type[BaseModel]) -> tuple[str, ...]:
    """The top-level argument fields of ``args_model`` whose annotation marks a path anywhere: a
    `PathArgument` that is optional or in a list is a path argument all the same (judged, and
    needing roots), never one the dispatch check silently skips."""
    fields = getattr(args_model, "model_fields", {})
    return tuple(
        name
        for name, info in fields.items()
        if any(isinstance(m, ToolPath) for m in info.metadata) or _marked(info.annotation)
    )


def root_problems(roots: tuple[str, ...]) -> list[str]:
    """Why ``roots`` cannot serve as allow-listed roots (empty when they can)."""
    return [f"file root {root!r} must be an absolute path" for root in roots if not os.path.isabs(root)]


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def resolve(value: str, roots: tuple[str, ...]) -> str | None:
    """The real path ``value`` names when it lies under one of ``roots`` (after following every
    symlink of both), else None. Relative paths are taken relative to the first root."""
    if not roots or "\x00" in value or ".." in PurePath(value).parts:
        return None
    candidate = value if os.path.isabs(value) else os.path.join(roots[0], value)
    real = os.path.realpath(candidate)
    for root in roots:
        if _under(real, os.path.realpath(root)):
            return real
    return None


def path_problem(roots: tuple[str, ...], fields: tuple[str, ...], arguments: Mapping[str, Any]) -> str | None:
    """Why a call's path arguments are refused (None: each names something under ``roots``). The
    message names the argument and the rule, never the path (it may be an injected instruction)."""
    for name in fields:
        value = arguments.get(name)
        values = value if isinstance(value, list | tuple) else [value]
        for item in values:
            if item is None:
                continue
            if not isinstance(item, str):  # a nested path (a mapping, a model) fails closed
                return f"argument {name!r} must be a path string or a list of path strings"
            if ".." in PurePath(item).parts:
                return f"argument {name!r} climbs out with '..'; name a path under the allowed roots"
            if resolve(item, roots) is None:
                return f"argument {name!r} resolves outside the allowed roots (symlinks are followed)"
    return None


__all__ = ["PathArgument", "ToolPath", "path_fields", "path_problem", "resolve", "root_problems"]
