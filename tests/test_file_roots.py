"""File-system tools (issue 32, the chapter's §12.3): a path argument (annotated `ToolPath`) may only
name something under the tool's allow-listed roots. ``..`` segments, absolute paths outside the
roots and symlinks that resolve outside them are refused ``path_not_allowed`` at dispatch, before
any handler runs; a read is judged again at execute (a symlink can be swapped in between).
A real temporary directory with real symlinks.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pydantic import Field
from support import REFUND_REQUEST, Harness, audit_events, principal, start, tool_messages

from toolgate.errors import RegistryError
from toolgate.graph.review.decisions import decide
from toolgate.policy.authority import RecordedCall
from toolgate.store import Store
from toolgate.testing import ScriptedChatModel, ai, open_test_app, tool_call
from toolgate.tools import Registry
from toolgate.tools.paths import PathArgument, path_fields, path_problem
from toolgate.tools.spec import (
    ApprovalClass,
    HandlerContext,
    NoRollback,
    StrictArgs,
    ToolResult,
    ToolSpec,
    inventory_text,
    manifest_fields,
)

pytestmark = pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")


class ReadFileArgs(StrictArgs):
    path: PathArgument = Field(description="A file under the runbook directory, e.g. notes/restart.md.")


class ReadFileResult(ToolResult):
    text: str


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    """``root`` (the allowed runbooks) beside ``outside`` (a secret it must not reach)."""
    root, outside = tmp_path / "runbooks", tmp_path / "outside"
    (root / "notes").mkdir(parents=True)
    outside.mkdir()
    (root / "notes" / "restart.md").write_text("restart with care")
    (outside / "secret.txt").write_text("the outside secret")
    (root / "escape").symlink_to(outside / "secret.txt")  # inside the root, resolves outside
    (root / "escape_dir").symlink_to(outside, target_is_directory=True)
    (root / "alias.md").symlink_to(root / "notes" / "restart.md")  # a symlink that stays inside
    return {"root": root, "outside": outside}


def read_file_spec(root: Path, calls: list[str]) -> ToolSpec:
    def read_file(args: ReadFileArgs, ctx: HandlerContext) -> ReadFileResult:
        calls.append(args.path)
        target = args.path if os.path.isabs(args.path) else os.path.join(root, args.path)
        with open(target, encoding="utf-8") as handle:
            return ReadFileResult(text=handle.read(4096))

    return ToolSpec(
        name="read_runbook",
        version="1.0.0",
        owner="platform-ops",
        description="Read one runbook file. Use for how-to questions; not for service state.",
        args_model=ReadFileArgs,
        result_model=ReadFileResult,
        risk="read-only",
        effect="Reads one file under the runbook directory.",
        timeout_s=5,
        max_output_bytes=8192,
        approval=ApprovalClass.none(),
        required_scopes=frozenset({"ops:read"}),
        handler=read_file,
        handler_revision="read-runbook/1.0.0",
        rollback=NoRollback("read-only: nothing to undo"),
        file_roots=(str(root),),
    )


def test_paths_are_judged_against_the_resolved_roots(tree: dict[str, Path]) -> None:
    roots, fields = (str(tree["root"]),), ("path",)
    allowed = ["notes/restart.md", str(tree["root"] / "notes" / "restart.md"), "alias.md", "missing/new.md"]
    for path in allowed:
        assert path_problem(roots, fields, {"path": path}) is None, path
    refused = {
        "../outside/secret.txt": "'..'",
        "notes/../../outside/secret.txt": "'..'",
        str(tree["outside"] / "secret.txt"): "outside the allowed roots",
        "/etc/passwd": "outside the allowed roots",
        "escape": "outside the allowed roots",
        "escape_dir/secret.txt": "outside the allowed roots",
        str(tree["root"]) + "-sibling/x": "outside the allowed roots",  # a prefix is not a parent
    }
    for path, why in refused.items():
        problem = path_problem(roots, fields, {"path": path})
        assert problem is not None and why in problem, path
        assert path not in problem  # the message names the rule, never the path


def test_traversal_absolute_and_escaping_symlinks_are_refused_before_the_handler(
    store: Store, tree: dict[str, Path]
) -> None:
    harness = Harness(store)
    calls: list[str] = []
    spec = read_file_spec(tree["root"], calls)
    registry = Registry.of(harness.registry.release, [*harness.registry.tools.values(), spec], harness.system)
    asked = {
        "c-ok": "notes/restart.md",
        "c-alias": "alias.md",
        "c-dots": "../outside/secret.txt",
        "c-abs": str(tree["outside"] / "secret.txt"),
        "c-link": "escape",
    }
    model = ScriptedChatModel(
        responses=[ai("", *(tool_call("read_runbook", {"path": p}, c) for c, p in asked.items())), ai("done")]
    )
    app = open_test_app(model=model, tools=registry, policy=harness.policy, store=store, start=False)
    state = start(app.compiled(), "read the runbooks", "omar", "t-files")
    answers = {m.tool_call_id: json.loads(str(m.content)) for m in tool_messages(state)}
    assert sorted(calls) == ["alias.md", "notes/restart.md"]  # the handler ran for the two allowed paths only
    assert (
        answers["c-ok"]["data"]["text"] == "restart with care" and answers["c-alias"]["status"] == "completed"
    )
    for refused in ("c-dots", "c-abs", "c-link"):
        assert answers[refused]["status"] == "rejected" and answers[refused]["error"] == "path_not_allowed"
        assert answers[refused]["retryable"] is False
    assert "the outside secret" not in json.dumps(answers)
    rejected = [e for e in audit_events(store, "call.rejected") if e.code == "path_not_allowed"]
    assert sorted(e.call_id for e in rejected) == ["c-abs", "c-dots", "c-link"]


def test_a_symlink_swapped_in_after_dispatch_is_refused_at_execute(
    store: Store, tree: dict[str, Path]
) -> None:
    harness = Harness(store)
    calls: list[str] = []
    spec = read_file_spec(tree["root"], calls)
    registry = Registry.of(harness.registry.release, [*harness.registry.tools.values(), spec], harness.system)
    gateway = open_test_app(tools=registry, policy=harness.policy, store=store, start=False).gateway
    call = RecordedCall(
        call_id="c-swap", tool="read_runbook", read=True, arguments={"path": "notes/today.md"}
    )
    (tree["root"] / "notes" / "today.md").write_text("today")
    assert (
        gateway.authority.at_execute(principal("omar"), call, thread_id="t", proposal=None).rejection is None
    )
    (tree["root"] / "notes" / "today.md").unlink()
    (tree["root"] / "notes" / "today.md").symlink_to(tree["outside"] / "secret.txt")
    verdict = gateway.authority.at_execute(principal("omar"), call, thread_id="t", proposal=None)
    assert verdict.rejection is not None and verdict.rejection.code == "path_not_allowed"
    assert calls == []


class OptionalPathsArgs(StrictArgs):
    path: PathArgument | None = Field(default=None, description="A runbook file, e.g. notes/restart.md.")
    more: list[PathArgument] = Field(default_factory=list, description="More runbook files.")


def test_an_optional_or_listed_path_argument_is_judged_like_any_other(
    store: Store, tree: dict[str, Path]
) -> None:
    """``PathArgument | None`` and ``list[PathArgument]`` are path arguments too (their marker
    sits inside the annotation, not on the field): judged at dispatch, and needing roots to load."""
    assert path_fields(OptionalPathsArgs) == ("path", "more")
    harness = Harness(store)
    calls: list[str] = []
    root = tree["root"]

    def read_files(args: OptionalPathsArgs, ctx: HandlerContext) -> ReadFileResult:
        texts = []
        for path in [p for p in (args.path, *args.more) if p is not None]:
            calls.append(path)
            with open(path if os.path.isabs(path) else os.path.join(root, path), encoding="utf-8") as handle:
                texts.append(handle.read(4096))
        return ReadFileResult(text="\n".join(texts))

    spec = replace(
        read_file_spec(root, []), args_model=OptionalPathsArgs, handler=read_files, handler_revision="files/1"
    )
    assert spec.path_arguments == ("path", "more")
    with pytest.raises(RegistryError, match="need file_roots"):
        replace(spec, file_roots=())
    registry = Registry.of(harness.registry.release, [*harness.registry.tools.values(), spec], harness.system)
    asked = {
        "c-ok": {"path": "notes/restart.md", "more": ["alias.md"]},
        "c-abs": {"path": str(tree["outside"] / "secret.txt")},
        "c-list": {"more": ["notes/restart.md", "escape"]},
        "c-list-dots": {"more": ["../outside/secret.txt"]},
        "c-nested": {"more": [["escape"]]},
    }
    model = ScriptedChatModel(
        responses=[ai("", *(tool_call("read_runbook", args, c) for c, args in asked.items())), ai("done")]
    )
    app = open_test_app(model=model, tools=registry, policy=harness.policy, store=store, start=False)
    state = start(app.compiled(), "read the runbooks", "omar", "t-optional-files")
    answers = {m.tool_call_id: json.loads(str(m.content)) for m in tool_messages(state)}
    assert calls == ["notes/restart.md", "alias.md"]  # the handler ran for the allowed call only
    assert answers["c-ok"]["status"] == "completed"
    for refused in ("c-abs", "c-list", "c-list-dots"):
        assert answers[refused]["status"] == "rejected" and answers[refused]["error"] == "path_not_allowed"
    assert answers["c-nested"]["status"] == "rejected"  # not a list of strings: never reaches the handler
    assert "the outside secret" not in json.dumps(answers)
    rejected = [e for e in audit_events(store, "call.rejected") if e.code == "path_not_allowed"]
    assert sorted(e.call_id for e in rejected) == ["c-abs", "c-list", "c-list-dots"]
    assert path_problem((str(root),), ("more",), {"more": [{"p": "escape"}]}) == (
        "argument 'more' must be a path string or a list of path strings"
    )


def test_a_symlink_swapped_in_after_approval_is_refused_before_the_write_runs(
    store: Store, tree: dict[str, Path]
) -> None:
    """A write's path is judged again right before its claim: approved while it named a file under
    the root, it is refused ``path_not_allowed`` (audited, the handler never runs) once a symlink
    out of the root has been swapped in, however long after the approval."""
    harness = Harness(store)
    refund = harness.registry.tools["issue_refund"]
    root = tree["root"]

    class ReceiptArgs(refund.args_model):  # type: ignore[name-defined,misc]
        receipt: PathArgument = Field(description="Where to file the receipt, e.g. receipts/today.txt.")

    written: list[str] = []

    def file_receipt(args: Any, ctx: HandlerContext) -> Any:
        written.append(args.receipt)
        with open(os.path.join(root, args.receipt), "w", encoding="utf-8") as handle:
            handle.write("refund receipt")
        return refund.result_model(
            refund_id="R-1", order_id=args.order_id, amount_cents=args.amount_cents, status="refunded"
        )

    spec = replace(
        refund, args_model=ReceiptArgs, handler=file_receipt, handler_revision="receipt/1", file_roots=(str(root),)
    )
    harness.registry = Registry.of(
        harness.registry.release,
        [spec if s.name == "issue_refund" else s for s in harness.registry.tools.values()],
        harness.system,
    )
    arguments = {"order_id": "O-5512", "amount_cents": 4999, "reason": "damaged", "receipt": "today.txt"}
    model = ScriptedChatModel(responses=[ai("", tool_call("issue_refund", arguments, "c1")), ai("done")])
    state = start(harness.graph(model), REFUND_REQUEST, "cust-ada", "t-receipt")
    facts = state["__interrupt__"][0].value["toolgate"]["proposals"][0]
    gateway = harness.gateway()
    decide(gateway, facts["proposal_id"], principal("fiona"), "approve")
    (root / "today.txt").symlink_to(tree["outside"] / "secret.txt")  # swapped in after the approval
    key = facts["operation_key"]
    gateway.executor.deliver(key, worker_id="w1")
    assert written == []  # the handler never ran
    assert (tree["outside"] / "secret.txt").read_text() == "the outside secret"
    refused = [e for e in store.audit.events(operation_key=key) if e.event == "operation.refused"]
    assert [e.code for e in refused] == ["path_not_allowed"]
    assert store.operations.get(key).status == "approved"  # not claimed: it stays approved


def test_a_path_argument_needs_absolute_roots(tree: dict[str, Path]) -> None:
    spec = read_file_spec(tree["root"], [])
    assert spec.path_arguments == ("path",) and path_fields(ReadFileArgs) == ("path",)
    with pytest.raises(RegistryError, match="need file_roots"):
        replace(spec, file_roots=())
    with pytest.raises(RegistryError, match="absolute"):
        replace(spec, file_roots=("runbooks",))


def test_the_roots_and_path_arguments_are_part_of_the_reviewed_manifest(tree: dict[str, Path]) -> None:
    spec = read_file_spec(tree["root"], [])
    root = str(tree["root"])
    assert manifest_fields(spec)["file_access"] == {"roots": [root], "path_arguments": ["path"]}
    assert f" file_roots={root}" in inventory_text(spec)  # the registry audit's inventory line
    wider = replace(spec, file_roots=(root, "/srv/other"))
    assert manifest_fields(wider) != manifest_fields(spec)  # widening the roots is a reviewed change
