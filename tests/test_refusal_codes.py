"""The refusal-code catalog (`toolgate.refusal_codes`) against the code that emits codes and the
cases that provoke them.

Emitted codes are read from source with `ast` (the modules `test_import_graph.scan` finds, minus
``evals/``: the evaluation harness holds the cases that *expect* codes and its own tooling's
refusals, not the gateway's). A code counts as emitted where it is a string literal (or a
module-level ``UPPER_CASE`` string constant) in one of these shapes:

- a typed refusal: ``Rejection(code=...)`` (family ``refusal``), ``ToolExecutionError("kind", ...)``
  (``execution``), ``ApprovalError("code", ...)`` (``approval``), ``ReleaseControlError("code",
  ...)`` (``release``), ``IdentityError(..., code=...)``, ``RunRefused("code", ...)`` and an HTTP
  API refusal ``Refusal(status, "code", ...)`` / ``_error(status, "code", ...)`` (``request``);
- an execution error record: a dict literal with ``"kind"`` and ``"message"`` keys (``execution``);
- a refusal helper: a call, in the module that defines it, of a function with a ``code``
  parameter that it hands on (``code=code``, or into a typed refusal), e.g. ``self._refused(op,
  "forged_proposal", ...)`` or ``audit_once(auditor, op, TOOL_NOT_IN_RELEASE, ...)``; its family
  is the typed refusal it builds, if any;
- ``code = "..."`` (an assignment or a class attribute) and a ``code`` parameter's default;
- in release control's modules (`RELEASE_MODULES`), a ``(code, message, ...)`` problem that a
  `ReleaseControlError` or a thread's stop is made of later (``release``): a tuple literal
  appended to a list named ``...problems``, returned by a function annotated to return
  ``tuple[str, str]...``, assigned to ``stop`` or handed to ``_halted``. (Elsewhere such tuples
  are other vocabularies: a bundle's registry problems, which are not listed, or return values.)

A code emitted in a typed shape must be listed under that family; one emitted through a helper or
an assignment under any family.
"""

from __future__ import annotations

import ast
import functools
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import get_args

from test_import_graph import REPO, scan

from toolgate.errors import REJECTION_CODES, STATE_CODES, RejectionCode
from toolgate.evals.adversarial.cases import CASES as ADVERSARIAL_CASES
from toolgate.evals.dataset.build import build_cases
from toolgate.refusal_codes import CATALOG, FAMILIES, CodeEntry, codes_of, lookup

TYPED: dict[str, tuple[int | None, str, str]] = {
    "Rejection": (None, "code", "refusal"),
    "ToolExecutionError": (0, "kind", "execution"),
    "ApprovalError": (0, "code", "approval"),
    "ReleaseControlError": (0, "code", "release"),
    "IdentityError": (None, "code", "request"),
    "RunRefused": (0, "code", "request"),
}
"""Typed refusal constructors: (position of the code, its keyword, its family)."""
RELEASE_MODULES = ("toolgate/releases/", "graph/rollout/")
"""Where a ``(code, message)`` tuple is a release-control problem (see the module docstring)."""
HTTP = ("Refusal", "_error")
"""HTTP API refusals: ``(status, code, message)``, recognized by an integer status first."""


@dataclass(frozen=True)
class Emission:
    code: str
    family: str | None
    """None: emitted through a helper or an assignment (any family will do)."""
    path: Path
    line: int
    shape: str
    retryable: bool | None = None
    """The constant ``retryable`` stated beside it (a keyword of the call, a key of the error
    record), if any."""

    def where(self) -> str:
        return f"{self.path}:{self.line}: {self.shape} emits {self.code!r}"


def _name(node: ast.expr) -> str | None:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def _literal(node: ast.expr | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _helpers(tree: ast.Module) -> dict[str, tuple[int, str | None]]:
    """Functions of a module that take a ``code`` and hand it on: name -> (position of ``code``
    among the arguments a caller passes, family of the typed refusal it builds or None)."""
    found: dict[str, tuple[int, str | None]] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        params = [a.arg for a in node.args.posonlyargs + node.args.args]
        if "code" not in params:
            continue
        family: str | None = None
        forwards = False
        for inner in ast.walk(node):
            if not isinstance(inner, ast.Call):
                continue
            callee = _name(inner.func) or ""
            position = TYPED[callee][0] if callee in TYPED else 1 if callee in HTTP else None
            passed = [k.value for k in inner.keywords if k.arg == "code"]
            if position is not None and len(inner.args) > position:
                passed.append(inner.args[position])
            if any(isinstance(a, ast.Name) and a.id == "code" for a in passed):
                forwards = True
                family = TYPED[callee][2] if callee in TYPED else "request" if callee in HTTP else family
        if forwards:
            found[node.name] = (params.index("code") - (params[:1] == ["self"]), family)
    return found


def _leading_codes(node: ast.expr | None) -> list[ast.expr]:
    """The code of a ``(code, message, ...)`` problem tuple literal (none for anything else)."""
    if isinstance(node, ast.Tuple) and len(node.elts) >= 2 and _literal(node.elts[0]) is not None:
        return [node.elts[0]]
    return []


def _release_problems(node: ast.AST) -> list[ast.expr]:
    """The codes of the ``(code, message, ...)`` problems ``node`` makes, in release control's
    shapes (see the module docstring)."""
    found: list[ast.expr] = []
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns is not None:
        if ast.unparse(node.returns).startswith("tuple[str, str"):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Return):
                    found += _leading_codes(inner.value)
    elif isinstance(node, ast.Call) and node.args:
        func = node.func
        appended = isinstance(func, ast.Attribute) and func.attr == "append"
        if appended and (_name(func.value) or "").endswith("problems"):  # type: ignore[union-attr]
            found += _leading_codes(node.args[0])
        if (_name(func) or "") == "_halted" and len(node.args) > 2:
            found += _leading_codes(node.args[2])
    elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "stop" for t in node.targets):
        found += _leading_codes(node.value)
    return found


def scan_emissions(trees: dict[Path, ast.Module]) -> list[Emission]:
    """Every code the modules ``trees`` (path -> parsed source) emit (see the module docstring)."""
    constants: dict[str, set[str]] = defaultdict(set)
    for tree in trees.values():
        for node in tree.body:
            if isinstance(node, ast.Assign) and _literal(node.value) is not None:
                for target in node.targets:
                    if isinstance(target, ast.Name) and target.id.isupper():
                        constants[target.id].add(str(_literal(node.value)))

    def texts(node: ast.expr) -> list[str]:
        """The codes ``node`` may be: a literal, a unique module constant, either branch of ``a if c
        else b``."""
        if isinstance(node, ast.IfExp):
            return [*texts(node.body), *texts(node.orelse)]
        name = _name(node)
        if _literal(node) is None and name and name.isupper() and len(constants[name]) == 1:
            return [next(iter(constants[name]))]
        return [str(_literal(node))] if _literal(node) else []

    found: list[Emission] = []
    for path, tree in trees.items():
        helpers = _helpers(tree)
        for node in ast.walk(tree):
            hits: list[tuple[ast.expr, str | None, str]] = []
            flag: ast.expr | None = None
            if isinstance(node, ast.Call):
                flag = next((k.value for k in node.keywords if k.arg == "retryable"), None)
                callee = _name(node.func) or ""
                if callee in TYPED:
                    position, keyword, family = TYPED[callee]
                    if position is not None and len(node.args) > position:
                        hits.append((node.args[position], family, callee))
                    hits += [(k.value, family, callee) for k in node.keywords if k.arg == keyword]
                elif callee in HTTP and len(node.args) > 1 and isinstance(node.args[0], ast.Constant):
                    if isinstance(node.args[0].value, int):
                        hits.append((node.args[1], "request", callee))
                elif callee in helpers:
                    position, family = helpers[callee]
                    if 0 <= position < len(node.args):
                        hits.append((node.args[position], family, callee))
                    hits += [(k.value, family, callee) for k in node.keywords if k.arg == "code"]
            elif isinstance(node, ast.Dict):
                keys = {_literal(k): v for k, v in zip(node.keys, node.values, strict=True) if k is not None}
                if "kind" in keys and "message" in keys:
                    hits.append((keys["kind"], "execution", "error record"))
                    flag = keys.get("retryable")
            elif isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and t.id == "code" for t in targets):
                    # literals only: ``code = SOME_CONSTANT`` is how other vocabularies pick a word
                    value = node.value
                    literals = [value.body, value.orelse] if isinstance(value, ast.IfExp) else [value]
                    hits += [(v, None, "code =") for v in literals if _literal(v)]
            if str(path).startswith(RELEASE_MODULES):
                hits += [(t, "release", "problem") for t in _release_problems(node)]
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                args = node.args.posonlyargs + node.args.args
                defaults = [
                    *zip(args[len(args) - len(node.args.defaults) :], node.args.defaults, strict=True),
                    *((a, d) for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults, strict=True) if d),
                ]
                hits += [(d, None, "default") for a, d in defaults if a.arg == "code" and _literal(d)]
            said = flag.value if isinstance(flag, ast.Constant) and isinstance(flag.value, bool) else None
            for value, family, shape in hits:
                found += [Emission(code, family, path, value.lineno, shape, said) for code in texts(value)]
    return found


@functools.cache
def emissions() -> tuple[Emission, ...]:
    """Every code the gateway's source emits: its modules, ``evals/`` aside."""
    modules, _ = scan()
    paths = sorted(m.path for m in modules.values() if m.folder != "evals")
    return tuple(
        scan_emissions({path: ast.parse((REPO / path).read_text(encoding="utf-8")) for path in paths})
    )


def test_the_scanner_reads_each_shape() -> None:
    """Each shape of the module docstring, in a module of its own: the scanner reports every
    code, with its family, and nothing else."""
    source = """
BUSY = "brand_busy"

def refuse(op, code, reason):
    auditor.record("x.refused", "refused", code=code)

def elsewhere(code="brand_default"):
    return code

Rejection(code="brand_refusal", message="m", retryable=True)
ToolExecutionError("brand_kind", "m")
ApprovalError("brand_decision", "m")
ReleaseControlError("brand_release", "m")
IdentityError("m", code="brand_identity")
RunRefused("brand_run", "m")
Refusal(422, "brand_body", "m")
error = {"kind": BUSY, "message": "m", "retryable": True}
refuse(op, "brand_helper", "r")
code = "brand_a" if x else "brand_b"
code = NOT_A_LITERAL
Refusal("brand_other_vocabulary", "$", "m")
record(code="brand_audit_only")
"""
    emitted = scan_emissions({Path("x.py"): ast.parse(source)})
    found = {(e.code, e.family) for e in emitted}
    assert {e.code: e.retryable for e in emitted if e.retryable is not None} == {
        "brand_refusal": True,
        "brand_busy": True,
    }
    assert found == {
        ("brand_default", None),
        ("brand_refusal", "refusal"),
        ("brand_kind", "execution"),
        ("brand_decision", "approval"),
        ("brand_release", "release"),
        ("brand_identity", "request"),
        ("brand_run", "request"),
        ("brand_body", "request"),
        ("brand_busy", "execution"),
        ("brand_helper", None),
        ("brand_a", None),
        ("brand_b", None),
    }


def test_the_scanner_reads_release_control_problems_only_in_release_control() -> None:
    """A ``(code, message)`` tuple is a release-control problem in release control's modules;
    the same shapes elsewhere (a bundle's registry problems, a return value) are not codes."""
    source = """
def shortfall(x) -> tuple[str, str] | None:
    if x:
        return "brand_short", "m"
    return None

def other(x) -> tuple[int, str]:
    return "not_a_problem", "m"

found.problems.append(("brand_missing", "m"))
problems.append(("brand_again", f"m {x}"))
stop = ("brand_stop", why, release)
self._halted(name, route, ("brand_halted", "m", ""))
seen.append(("not_a_problem_either", "m"))
"""
    tree = ast.parse(source)
    inside = {(e.code, e.family) for e in scan_emissions({Path("toolgate/releases/x.py"): tree})}
    assert inside == {
        ("brand_short", "release"),
        ("brand_missing", "release"),
        ("brand_again", "release"),
        ("brand_stop", "release"),
        ("brand_halted", "release"),
    }
    assert scan_emissions({Path("tools/x.py"): tree}) == []


def _catalog_where(entry: CodeEntry) -> str:
    return f"{entry.family} {entry.code!r}"


def test_every_emitted_code_is_in_the_catalog() -> None:
    listed = {(e.family, e.code) for e in CATALOG}
    codes = {e.code for e in CATALOG}
    missing = [
        e.where() + (f" (not listed under {e.family!r})" if e.family else "")
        for e in emissions()
        if ((e.family, e.code) not in listed if e.family else e.code not in codes)
    ]
    assert not missing, "add these codes to toolgate/refusal_codes.py:\n" + "\n".join(missing)


def test_every_catalog_code_is_emitted_somewhere() -> None:
    """A listed code nothing emits any more is a stale row (or an emitter the scanner lost)."""
    typed = {(e.family, e.code) for e in emissions() if e.family}
    untyped = {e.code for e in emissions() if not e.family}
    stale = [_catalog_where(e) for e in CATALOG if (e.family, e.code) not in typed and e.code not in untyped]
    assert not stale, f"listed but never emitted: {stale}"


KNOWN = [
    ('"kind": "resource_busy"', "resource_busy", "execution"),
    ('"kind": "worker_lost"', "worker_lost", "execution"),
    ('code="too_many_calls"', "too_many_calls", "refusal"),
    ('ApprovalError("self_approval"', "self_approval", "approval"),
    ('ReleaseControlError("same_release"', "same_release", "release"),
    ('code="thread_owner"', "thread_owner", "request"),
    ('(413, "body_too_large"', "body_too_large", "request"),
    ('"forged_proposal", "the proposal', "forged_proposal", None),
    ("TOOL_NOT_IN_RELEASE, reason", "tool_not_in_release", None),
    ('code = "reviewer_role_removed"', "reviewer_role_removed", None),
    ('"revoked", f"identity', "revoked", "request"),
]
"""Emitters of every shape, found by plain text search: the scanner must report each one at the
same file and line (else it has gone blind to a shape)."""


def test_the_scanner_sees_the_known_emitters() -> None:
    modules, _ = scan()
    seen = {(e.code, e.family, e.path, e.line) for e in emissions()}
    for snippet, code, family in KNOWN:
        places = [
            (m.path, number)
            for m in modules.values()
            for number, line in enumerate((REPO / m.path).read_text(encoding="utf-8").splitlines(), 1)
            if snippet in line
        ]
        assert places, f"{snippet!r} is no longer in the source: update KNOWN"
        for path, number in places:
            assert (code, family, path, number) in seen, f"{path}:{number}: the scanner misses {snippet!r}"


def test_rejection_code_is_the_refusal_family() -> None:
    assert get_args(RejectionCode) == REJECTION_CODES
    assert set(REJECTION_CODES) == set(codes_of("refusal"))
    assert len(codes_of("refusal")) == len(REJECTION_CODES)
    assert set(STATE_CODES) <= set(REJECTION_CODES)


def test_catalog_rows_are_unique_and_well_formed() -> None:
    rows = [(e.family, e.code) for e in CATALOG]
    assert len(rows) == len(set(rows)), [r for r in rows if rows.count(r) > 1]
    for entry in CATALOG:
        assert entry.family in FAMILIES, _catalog_where(entry)
        assert re.fullmatch(r"[a-z][a-z0-9_]*", entry.code), _catalog_where(entry)
        assert entry.owner in OWNERS, (_catalog_where(entry), entry.owner)
        assert entry.meaning.endswith(".") and "\n" not in entry.meaning, _catalog_where(entry)
        assert lookup(entry.family, entry.code) == entry


OWNERS = {
    "dispatch", "execute", "state", "delivery", "handler", "executor", "recovery", "admission",
    "approval", "review", "hitl", "server", "auth", "identity", "release", "cli",
}  # fmt: skip
"""The owners `CodeEntry.owner` names."""


def test_constant_retryable_flags_agree_with_the_catalog() -> None:
    """Where an emitter states ``retryable=True``/``False`` beside a literal code, it says what the
    catalog says: the catalog is the source (a code whose retryability depends on the occurrence
    is listed with None and not checked)."""
    wrong = [
        f"{e.where()} with retryable={e.retryable}, the catalog says {entry.retryable}"
        for e in emissions()
        if e.family is not None and e.retryable is not None
        for entry in [lookup(e.family, e.code)]  # type: ignore[arg-type]
        if entry is not None and entry.retryable is not None and entry.retryable != e.retryable
    ]
    assert not wrong, "\n".join(wrong)


def _case_codes() -> dict[str, set[str]]:
    """The codes the evaluation dataset and the adversarial suite expect, per family."""
    refusal: set[str] = {c.expected for c in ADVERSARIAL_CASES}
    approval: set[str] = set()
    for case in build_cases():
        refusal |= set(case.expected.calls.values()) | {case.expected.refusal or ""}
        approval |= {step.expect_refused for step in case.approvals if step.expect_refused}
    return {"refusal": refusal, "approval": approval}


def test_every_code_has_a_case_or_a_covering_test() -> None:
    """Each code is provoked by an evaluation case; one no case can provoke names the test file
    that does, which must exist and mention it."""
    cases = _case_codes()
    problems: list[str] = []
    for entry in CATALOG:
        by_case = entry.code in cases.get(entry.family, set())
        if entry.covered_by is None:
            if not by_case:
                problems.append(f"{_catalog_where(entry)}: no dataset or adversarial case expects it")
            continue
        if by_case:
            problems.append(f"{_catalog_where(entry)}: a case covers it; drop covered_by")
        test_file = REPO / entry.covered_by
        if not test_file.is_file():
            problems.append(f"{_catalog_where(entry)}: {entry.covered_by} does not exist")
        elif not re.search(rf"\b{entry.code}\b", test_file.read_text(encoding="utf-8")):
            problems.append(f"{_catalog_where(entry)}: {entry.covered_by} never mentions it")
    assert not problems, "\n".join(problems)
