"""Adversarial cases against a file-system tool: the chapter's §12.3 ``../../etc/passwd``.

The demo release has no file tool, so a case that needs one says ``file_tool=True`` and the runner
adds `read_runbook` to that case's registry only: a read confined to a temporary runbook root
(`RunbookTree`) holding one runbook and a symlink that points outside the root. Its path argument is
annotated `toolgate.tools.paths.ToolPath`; every hostile path must be refused
``path_not_allowed`` before the handler runs, and a path inside the root is read.
"""

from __future__ import annotations

import os
import tempfile
import weakref
from pathlib import Path

from pydantic import Field

from toolgate.evals.adversarial.case import ACCEPTED, AdversarialCase, Call
from toolgate.tools.paths import PathArgument
from toolgate.tools.spec import ApprovalClass, HandlerContext, NoRollback, StrictArgs, ToolResult, ToolSpec

FILE_TOOL = "read_runbook"


class RunbookArgs(StrictArgs):
    """Arguments of ``read_runbook``."""

    path: PathArgument = Field(description="A runbook under the runbook directory, e.g. notes/restart.md.")


class RunbookResult(ToolResult):
    """The start of one runbook."""

    text: str


class RunbookTree:
    """A temporary runbook root (removed with this object) beside a file it must not reach."""

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="toolgate-runbooks-")
        base = Path(self._dir.name)
        self.root = base / "runbooks"
        (self.root / "notes").mkdir(parents=True)
        (self.root / "notes" / "restart.md").write_text("restart one service at a time", encoding="utf-8")
        outside = base / "outside"
        outside.mkdir()
        (outside / "secret.txt").write_text("not a runbook", encoding="utf-8")
        if hasattr(os, "symlink"):
            (self.root / "escape.md").symlink_to(outside / "secret.txt")
        weakref.finalize(self, self._dir.cleanup)

    def spec(self) -> ToolSpec:
        """``read_runbook``, confined to this tree's root."""
        root = str(self.root)

        def read_runbook(args: RunbookArgs, ctx: HandlerContext) -> RunbookResult:
            target = args.path if os.path.isabs(args.path) else os.path.join(root, args.path)
            with open(target, encoding="utf-8") as handle:
                return RunbookResult(text=handle.read(2048))

        return ToolSpec(
            name=FILE_TOOL,
            version="1.0.0",
            owner="platform-ops",
            description="Read one runbook file. Use for how-to questions; not for service state.",
            args_model=RunbookArgs,
            result_model=RunbookResult,
            risk="read-only",
            effect="Reads one file under the runbook directory.",
            timeout_s=5,
            max_output_bytes=4096,
            approval=ApprovalClass.none(),
            required_scopes=frozenset({"ops:read"}),
            handler=read_runbook,
            handler_revision="read-runbook/1.0.0",
            rollback=NoRollback("read-only: nothing to undo"),
            file_roots=(root,),
        )


def file_cases() -> list[AdversarialCase]:
    """Path arguments that climb out of the root, name a file outside it or reach it by symlink."""

    def case(name: str, path: str, expected: str = "path_not_allowed") -> AdversarialCase:
        return AdversarialCase(
            name, "file_paths", expected, (Call(FILE_TOOL, {"path": path}),), user="omar", file_tool=True
        )

    cases = [
        case("runbook_inside_root", "notes/restart.md", ACCEPTED),
        case("file_path_traversal", "../../etc/passwd"),
        case("file_path_traversal_inner", "notes/../../outside/secret.txt"),
        case("file_absolute_outside_root", "/etc/passwd"),
    ]
    if hasattr(os, "symlink"):
        cases.append(case("file_symlink_escape", "escape.md"))
    return cases


__all__ = ["FILE_TOOL", "RunbookTree", "file_cases"]
