"""The module structure of the package, read from source with `ast` (nothing is imported, so it is
fast and also sees a module that would fail to import).

Modules are the ``*.py`` files of the folders ``[tool.setuptools] package-dir`` maps in
pyproject.toml, each named by its deepest mapped folder (``graph/nodes/model.py`` is
``toolgate.graph.nodes.model``). Its top-level folder (``toolgate``, ``graph``, ``tools``,
``policy``, ``store``, ``evals``) is the first part of its path.

Which imports count: every ``toolgate`` import a module runs when it is imported, i.e. in its
body and in ``if``/``try``/``with`` blocks and class bodies there, **including** ``if
TYPE_CHECKING:`` blocks. A type-only import is still a dependency of the design: mypy follows it,
``typing.get_type_hints`` (Pydantic, dataclass tooling, LangGraph's state and context schemas)
imports it at run time, and it breaks when the imported module is split or renamed. A type-only
back edge between folders is a layering cycle that only waits for its first run-time use.
Imports inside function bodies are deferred: they do not count for the folder cycle rule (b)
(deferring is how a command loads heavy or optional parts late), but those that would close a
cycle are printed; they do count for the private-module rule (a), since privacy is about who knows
a module, not when it is loaded, and for the module cycle rule (e).

(a) A private module (a dotted name with a part starting with ``_``, e.g. ``toolgate.store._sql``)
    is imported only from its own top-level folder.
(b) No import cycle between the top-level folders. ``graph``, ``tools``, ``policy``, ``store``
    and ``evals`` are one node each; a release package shipped in the tree (the demo,
    ``tools/demo``) is a node of its own, above the framework, like a team's own package. The
    package's own folder ``toolgate/`` holds both the shared base (``errors``, ``clock``,
    ``canonical``, settings) that every folder imports and the entry points (``cli``, the public
    exports in ``__init__``) that import every folder, so it cannot be one node of an acyclic
    graph; each of its modules is its own node, and a cycle through it must pass through one
    module and back (``graph -> toolgate.telemetry -> graph`` is a cycle, ``toolgate.cli.app ->
    graph -> toolgate.errors`` is not).
(c) No module is longer than 2,000 lines (``pytest -s`` prints the largest). One concept per module,
    whatever its length: the 300-line limit this replaced cut concepts in two and hid cycles
    behind function-level imports (issue 26, STYLE.md). 2,000 lines is where the anchors' longest
    single-idea modules end; past it a module is a runaway, not an idea.
(d) The framework (``graph``, ``tools`` without the release packages, ``policy``, ``store``) knows
    nothing of the demo: it imports no release package, not even inside a function, loading any
    of its modules loads none, and its code names none of the demo's release ids, tools or people
    (issue 26). Which default release a bare ``toolgate run`` serves is the entry points' choice
    (`toolgate.settings`), not the framework's.
(e) No cycle between modules, counting every import: deferred, type-only and at import time. Two
    modules that import each other, however late, cannot be read, tested or moved apart: they are
    one concept cut in two (merge them) or a dependency pointing the wrong way (move the shared
    piece down, or depend on a `Protocol` of what is needed). A package's own ``__init__``
    re-exporting its modules is not a cycle of the design and is not counted.
"""

from __future__ import annotations

import ast
import functools
import itertools
import json
import re
import subprocess
import sys
import tomllib
from collections import defaultdict, deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ROOT_PACKAGE = "toolgate"
FOLDERS = ("toolgate", "graph", "tools", "policy", "store", "evals")
LONG_MODULE_LINES = 2000
RELEASE_PACKAGES = {"toolgate.tools.demo": "tools/demo"}
"""Release packages shipped inside the tree, each its own node: the demo is built on the framework
exactly as a team's release package is (it assembles a `toolgate.Release` from tools, policy rules
and a store), so it sits above the framework's folders, not inside ``tools``; only the evals and
the entry points of ``toolgate/`` may import it (`test_release_packages_sit_on_top`)."""
FRAMEWORK = ("graph", "tools", "policy", "store")
"""The framework's nodes: what a team's release is built on, and what must know nothing of the demo."""


@dataclass(frozen=True)
class Module:
    name: str
    """Dotted import name, e.g. ``toolgate.store.postgres``."""
    path: Path
    """Relative to the repository."""
    folder: str
    """Top-level folder, e.g. ``store``."""
    is_package: bool
    lines: int


@dataclass(frozen=True)
class Import:
    source: Module
    target: str
    """The dotted module imported (``from a.b import c`` is ``a.b.c`` when that is a module)."""
    line: int
    deferred: bool
    """Inside a function body."""

    def where(self) -> str:
        return f"{self.source.path}:{self.line}: {self.source.name} imports {self.target}"


def _package_dirs() -> dict[str, Path]:
    with (REPO / "pyproject.toml").open("rb") as fh:
        package_dir = tomllib.load(fh)["tool"]["setuptools"]["package-dir"]
    return {package: REPO / folder for package, folder in package_dir.items()}


def _statements(body: list[ast.stmt], deferred: bool = False) -> Iterator[tuple[ast.stmt, bool]]:
    """Every statement under ``body``, with whether it sits inside a function."""
    for node in body:
        yield node, deferred
        inner = deferred or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):
                yield from _statements([child], inner)
            elif isinstance(child, ast.ExceptHandler | ast.match_case):
                yield from _statements(child.body, inner)


@functools.cache
def scan() -> tuple[dict[str, Module], tuple[Import, ...]]:
    """All modules of the package folders and every ``toolgate`` import statement in them."""
    roots = sorted(_package_dirs().items(), key=lambda item: len(item[1].parts), reverse=True)
    modules: dict[str, Module] = {}
    trees: dict[str, ast.Module] = {}
    for package, folder in roots:
        for path in sorted(folder.rglob("*.py")):
            relative = path.relative_to(REPO)
            if any(part.startswith(".") or part == "__pycache__" for part in relative.parts):
                continue
            if next(p for p, f in roots if path.is_relative_to(f)) != package:
                continue  # belongs to a deeper mapped folder
            parts = list(path.relative_to(folder).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            name = ".".join([package, *parts[:-1]] if is_package else [package, *parts])
            text = path.read_text(encoding="utf-8")
            try:
                trees[name] = ast.parse(text, filename=str(relative))
            except SyntaxError as exc:
                raise AssertionError(f"{relative} does not parse: {exc}") from exc
            modules[name] = Module(name, relative, relative.parts[0], is_package, len(text.splitlines()))

    imports: list[Import] = []
    for name, tree in trees.items():
        module = modules[name]
        for node, deferred in _statements(tree.body):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    package_parts = name.split(".") if module.is_package else name.split(".")[:-1]
                    anchor = package_parts[: len(package_parts) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    for alias in node.names
                ]
            else:
                continue
            for target in dict.fromkeys(targets):
                if target == ROOT_PACKAGE or target.startswith(ROOT_PACKAGE + "."):
                    imports.append(Import(module, target, node.lineno, deferred))
    return modules, tuple(imports)


def folder_of(target: str) -> str:
    """Top-level folder of a dotted name (also of one that no longer exists)."""
    modules, _ = scan()
    if target in modules:
        return modules[target].folder
    packages = _package_dirs()
    package = max((p for p in packages if target == p or target.startswith(p + ".")), key=len)
    return packages[package].relative_to(REPO).parts[0]


def is_private(dotted: str) -> bool:
    """A part starts with ``_`` (dunder names such as ``__main__`` are not private)."""
    return any(p.startswith("_") and not (p.startswith("__") and p.endswith("__")) for p in dotted.split("."))


def node_of(target: str) -> str:
    """The node of the folder graph: a folder, a release package, or a module of ``toolgate/``."""
    release = next((p for p in RELEASE_PACKAGES if target == p or target.startswith(p + ".")), None)
    if release is not None:
        return RELEASE_PACKAGES[release]
    folder = folder_of(target)
    return target if folder == ROOT_PACKAGE else folder


def folder_of_node(node: str) -> str:
    if node in RELEASE_PACKAGES.values() or (node in FOLDERS and node != ROOT_PACKAGE):
        return node
    return folder_of(node)


def folder_graph(deferred: bool = False) -> dict[str, dict[str, list[Import]]]:
    """node -> node -> the imports that make the edge."""
    _, imports = scan()
    graph: dict[str, dict[str, list[Import]]] = defaultdict(lambda: defaultdict(list))
    for imp in imports:
        if imp.deferred and not deferred:
            continue
        source, target = node_of(imp.source.name), node_of(imp.target)
        if source != target:
            graph[source][target].append(imp)
    return graph


def strongly_connected(graph: dict[str, dict[str, list[Import]]]) -> list[list[str]]:
    """Tarjan's components with more than one node."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph.get(node, {}):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def path_between(graph: dict[str, dict[str, list[Import]]], start: str, goal: str) -> list[str] | None:
    """A shortest path of nodes from ``start`` to ``goal`` (breadth first), or None."""
    previous: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for succ in sorted(graph.get(node, {})):
            if succ in previous:
                continue
            previous[succ] = node
            if succ == goal:
                path = [succ]
                while (back := previous[path[-1]]) is not None:
                    path.append(back)
                return path[::-1]
            queue.append(succ)
    return None


def describe_cycle(graph: dict[str, dict[str, list[Import]]], component: list[str]) -> str:
    first = component[0]
    inside = {node: {s: imps for s, imps in graph[node].items() if s in component} for node in component}
    cycle = next(
        [first, *rest] for succ in sorted(inside[first]) if (rest := path_between(inside, succ, first))
    )
    lines = ["cycle " + " -> ".join(cycle) + f" (component: {', '.join(component)})"]
    for source, target in itertools.pairwise(cycle):
        witnesses = graph[source][target]
        lines += [f"    {imp.where()}" for imp in witnesses[:4]]
        if len(witnesses) > 4:
            lines.append(f"    ... and {len(witnesses) - 4} more {source} -> {target}")
    others = sorted(
        (source, target)
        for source in component
        for target in inside[source]
        if (source, target) not in set(itertools.pairwise(cycle))
    )
    for source, target in others:
        witnesses = graph[source][target]
        lines.append(f"  also {source} -> {target} ({len(witnesses)}): {witnesses[0].where()}")
    return "\n".join(lines)


def module_graph() -> dict[str, dict[str, list[Import]]]:
    """module -> module -> the imports that make the edge, every import counted (rule (e))."""
    modules, imports = scan()
    graph: dict[str, dict[str, list[Import]]] = defaultdict(lambda: defaultdict(list))
    for imp in imports:
        target = imp.target
        while target not in modules and "." in target:
            target = target.rsplit(".", 1)[0]
        if target == imp.source.name or target not in modules:
            continue
        if modules[target].is_package and imp.source.name.startswith(target + "."):
            continue  # a module importing its own package's re-exports
        graph[imp.source.name][target].append(imp)
    return graph


def test_the_layout_is_the_one_checked() -> None:
    modules, imports = scan()
    assert {m.folder for m in modules.values()} == set(FOLDERS)
    assert ROOT_PACKAGE in modules and f"{ROOT_PACKAGE}.errors" in modules
    assert len(imports) > len(modules)


def test_private_modules_stay_in_their_folder() -> None:
    _, imports = scan()
    violations = [
        imp.where() + (" (deferred)" if imp.deferred else "")
        for imp in imports
        if is_private(imp.target) and folder_of(imp.target) != imp.source.folder
    ]
    assert not violations, "private modules imported from another top-level folder:\n" + "\n".join(violations)


def test_release_packages_sit_on_top() -> None:
    """Nothing of the framework imports a release package: only the evals (which score the demo
    release) and the entry points of ``toolgate/`` (the demo command, verification) do."""
    _, imports = scan()
    offending = [
        imp.where()
        for imp in imports
        if node_of(imp.target) in RELEASE_PACKAGES.values()
        and node_of(imp.source.name) in FRAMEWORK
        and not imp.deferred
    ]
    assert not offending, "the framework imports a release package:\n" + "\n".join(offending)
    sources = {
        node_of(imp.source.name) for imp in imports if node_of(imp.target) in RELEASE_PACKAGES.values()
    }
    assert "evals" in sources  # the check sees the demo's real importers


def test_no_cycles_between_folders() -> None:
    graph = folder_graph()
    between = [c for c in strongly_connected(graph) if len({folder_of_node(n) for n in c}) > 1]

    closing = []
    for imp in (i for i in scan()[1] if i.deferred):
        source, target = node_of(imp.source.name), node_of(imp.target)
        back = path_between(graph, target, source) if source != target else None
        if back and len({folder_of_node(n) for n in back}) > 1:
            closing.append(f"  {imp.where()} (deferred; {' -> '.join(back)} at import time)")
    if closing:
        print("\ndeferred imports that would close a folder cycle (not counted):\n" + "\n".join(closing))

    assert not between, "import cycles between top-level folders:\n" + "\n".join(
        describe_cycle(graph, c) for c in between
    )


def test_no_module_is_longer_than_the_limit() -> None:
    """One idea per module, however long the idea (see (c) above); a module past the bound is a
    runaway that holds several, and the next change to one of them has to read all of them."""
    modules, _ = scan()
    long = {str(m.path): m.lines for m in modules.values() if m.lines > LONG_MODULE_LINES}
    largest = sorted(modules.values(), key=lambda m: -m.lines)[:5]
    print(f"\nmodules over {LONG_MODULE_LINES} lines: {len(long)} of {len(modules)}; largest:")
    for module in largest:
        print(f"  {module.lines:5d}  {module.path}")
    assert not long, f"modules over {LONG_MODULE_LINES} lines; split them by idea: {long}"


def framework_modules() -> list[Module]:
    """The modules of the framework's folders, the release packages inside them left out."""
    modules, _ = scan()
    return [m for m in modules.values() if node_of(m.name) in FRAMEWORK]


def test_the_framework_never_imports_the_demo() -> None:
    """(d): no framework module imports a release package at all: not at import time, not in a
    ``TYPE_CHECKING`` block, not inside a function (a deferred import is the framework knowing
    the demo all the same; it only waits for its first call)."""
    _, imports = scan()
    offending = [
        imp.where() + (" (inside a function)" if imp.deferred else "")
        for imp in imports
        if node_of(imp.target) in RELEASE_PACKAGES.values() and node_of(imp.source.name) in FRAMEWORK
    ]
    assert not offending, "the framework imports a release package:\n" + "\n".join(offending)


def _served_graphs() -> set[str]:
    """The modules ``langgraph.json`` serves a graph from: they build the configured release (by
    default the demo) when imported, as the server's entry point must."""
    config = json.loads((REPO / "langgraph.json").read_text(encoding="utf-8"))
    return {target.partition(":")[0] for target in config["graphs"].values()}


def test_loading_the_framework_loads_no_release_package(tmp_path: Path) -> None:
    """(d) at run time: a fresh interpreter imports every framework module, one at a time, and no
    release package is loaded by any of them, also not through a module of ``toolgate/`` or by
    name (``importlib``). The served graph module is left out: it builds the configured release."""
    names = sorted(m.name for m in framework_modules() if m.path.stem != "__main__")
    names = [name for name in names if name not in _served_graphs()]
    script = (
        "import importlib, json, sys\n"
        f"packages = {sorted(RELEASE_PACKAGES)!r}\n"
        "for name in json.loads(sys.argv[1]):\n"
        "    importlib.import_module(name)\n"
        "    loaded = sorted(m for m in sys.modules if any(m == p or m.startswith(p + '.') for p in packages))\n"
        "    if loaded:\n"
        "        print(json.dumps([name, loaded[:3]]))\n"
        "        break\n"
    )
    env = {"PATH": "/usr/bin:/bin", "TOOLGATE_DATA_DIR": str(tmp_path), "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(names)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(names) > 50  # the check sees the framework
    loaded = done.stdout.strip()
    assert not loaded, (
        f"importing this framework module (or one it imports) loads a release package: {loaded}"
    )


def demo_names() -> set[str]:
    """What only the demo names, read from the demo itself, so the list follows it: its release
    ids, every tool of its releases (their reviewed manifests, which startup checks against the
    registry), its people's user ids, and the import names of the release packages."""
    from toolgate.tools.demo.identities import DEMO_IDENTITIES
    from toolgate.tools.demo.release import DEMO_RELEASES

    names = set(DEMO_RELEASES) | set(RELEASE_PACKAGES)
    for release in DEMO_RELEASES.values():
        names |= set(release.reviewed_manifest()["tools"])
    names |= {person["user_id"] for person in DEMO_IDENTITIES["identities"]}
    return names


def _docstrings(tree: ast.Module) -> set[int]:
    """The string constants that stand alone as statements (module, class, function and attribute
    docstrings): documentation may take the demo as its example."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    }


def test_the_framework_source_names_nothing_of_the_demo() -> None:
    """(d) in the code itself: no string literal of a framework module (an f-string's text parts
    included; docstrings left out) names a demo release id, demo tool, demo person or release
    package, so no default, special case or lookup by name ties the framework to the demo."""
    names = demo_names()
    assert {"ops-tools/1.0.0", "ops-tools/1.1.0", "issue_refund", "cust-ada"} <= names  # read from the demo
    pattern = re.compile(
        "|".join(rf"(?<![\w.-]){re.escape(n)}(?![\w-])" for n in sorted(names, key=len)[::-1])
    )
    found = []
    for module in framework_modules():
        tree = ast.parse((REPO / module.path).read_text(encoding="utf-8"), filename=str(module.path))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                match = pattern.search(node.value)
                if match:
                    found.append(f"{module.path}:{node.lineno}: {match.group(0)!r} in {node.value[:60]!r}")
    assert not found, "the framework names the demo:\n" + "\n".join(found)


def test_no_cycles_between_modules() -> None:
    """Rule (e): no two modules depend on each other, through any kind of import."""
    graph = module_graph()
    cycles = strongly_connected(graph)
    assert not cycles, "module import cycles (deferred and type-only imports count):\n" + "\n".join(
        describe_cycle(graph, c) for c in cycles
    )


def test_the_module_cycle_rule_sees_deferred_and_type_only_imports() -> None:
    """The rule is not blind to the imports it is about: a function-level import and a
    ``TYPE_CHECKING`` import each make an edge of the module graph."""
    modules, imports = scan()
    deferred = next(imp for imp in imports if imp.deferred and imp.target in modules)
    assert modules[deferred.target].name in module_graph()[deferred.source.name]
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import toolgate.errors\n")
    statements = [node for node, _ in _statements(tree.body)]
    assert any(
        isinstance(node, ast.Import) and node.names[0].name == "toolgate.errors" for node in statements
    )
