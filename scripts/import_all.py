#!/usr/bin/env python3
"""Prove an installed toolgate wheel is complete.

Run it with the python of a venv where the wheel (not an editable install) is installed,
from a directory outside the repository, in isolated mode:

    cd /somewhere/else && VENV/bin/python -I REPO/scripts/import_all.py REPO

The expected contents come from the SOURCE tree, not from the wheel:

* modules: every ``*.py`` under each folder mapped in ``[tool.setuptools] package-dir`` of
  REPO/pyproject.toml (recursively; each file belongs to its deepest mapped folder), e.g.
  ``graph/nodes/model.py`` -> ``toolgate.graph.nodes.model`` and ``graph/__init__.py`` ->
  ``toolgate.graph``. Each is imported and must come from this interpreter's
  site-packages, never from the repository. (``__main__`` modules are located, not run.)
* package data: every ``*.json`` / ``*.jsonl`` / ``py.typed`` under those folders, plus
  whatever ``[tool.setuptools.package-data]`` globs match, must be installed, byte-identical.
* no top-level ``graph``, ``tools``, ``policy``, ``store`` or ``evals`` may exist in
  site-packages (they must only exist as ``toolgate.<name>``).

Prints ``modules_imported=N missing=0`` and exits 0, or names every problem and exits 1.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import sys
import sysconfig
import tomllib
from pathlib import Path

FORBIDDEN_TOP_LEVEL = ("graph", "tools", "policy", "store", "evals")
DATA_SUFFIXES = (".json", ".jsonl")
DATA_NAMES = ("py.typed",)


def _skipped(rel: Path) -> bool:
    return any(part == "__pycache__" or part.startswith(".") for part in rel.parts)


def _is_relative_to(path: Path, other: Path) -> bool:
    try:
        path.relative_to(other)
    except ValueError:
        return False
    return True


class Layout:
    """The package -> folder mapping of the source tree."""

    def __init__(self, repo: Path) -> None:
        with (repo / "pyproject.toml").open("rb") as fh:
            data = tomllib.load(fh)
        setuptools_cfg = data.get("tool", {}).get("setuptools", {})
        package_dir: dict[str, str] = dict(setuptools_cfg.get("package-dir", {}))
        packages = setuptools_cfg.get("packages", [])
        if isinstance(packages, list):
            # packages listed without an explicit folder live at their dotted path
            for pkg in packages:
                if pkg not in package_dir:
                    parent = next(
                        (p for p in sorted(package_dir, key=len, reverse=True) if pkg.startswith(p + ".")),
                        None,
                    )
                    if parent is not None:
                        sub = pkg[len(parent) + 1 :].replace(".", "/")
                        package_dir[pkg] = f"{package_dir[parent]}/{sub}"
                    elif "" in package_dir:
                        package_dir[pkg] = f"{package_dir['']}/{pkg.replace('.', '/')}"
                    else:
                        package_dir[pkg] = pkg.replace(".", "/")
        if not package_dir:
            raise SystemExit("import_all: no [tool.setuptools] package-dir/packages in pyproject.toml")
        self.repo = repo
        self.dist_name: str = data["project"]["name"]
        self.package_data: dict[str, list[str]] = dict(setuptools_cfg.get("package-data", {}))
        # deepest folder first, so a file belongs to the most specific mapped package
        self.roots: list[tuple[str, Path]] = sorted(
            ((pkg, (repo / folder).resolve()) for pkg, folder in package_dir.items()),
            key=lambda item: len(item[1].parts),
            reverse=True,
        )

    def owner(self, path: Path) -> tuple[str, Path]:
        for pkg, folder in self.roots:
            if _is_relative_to(path, folder):
                return pkg, path.relative_to(folder)
        raise ValueError(path)

    def source_files(self) -> list[Path]:
        seen: set[Path] = set()
        for _pkg, folder in self.roots:
            if not folder.is_dir():
                continue
            for path in folder.rglob("*"):
                if path.is_file() and not _skipped(path.relative_to(folder)):
                    seen.add(path.resolve())
        return sorted(seen)

    def missing_folders(self) -> list[str]:
        return [f"{pkg} -> {folder}" for pkg, folder in self.roots if not folder.is_dir()]

    def module_name(self, path: Path) -> str:
        pkg, rel = self.owner(path)
        parts = list(rel.with_suffix("").parts)
        if parts and parts[-1] == "__init__":
            parts.pop()
        return ".".join([pkg, *parts] if pkg else parts)

    def installed_relpath(self, path: Path) -> Path:
        """Where a source file lands, relative to site-packages."""
        pkg, rel = self.owner(path)
        return Path(*pkg.split("."), rel) if pkg else rel


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: {argv[0]} REPO", file=sys.stderr)
        return 2
    # keep FAIL lines (stderr) and the summary (stdout) in order when both go to one pipe
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(line_buffering=True)
    repo = Path(argv[1]).resolve()
    layout = Layout(repo)

    # never let the source tree shadow the installed copy
    sys.path[:] = [p for p in sys.path if not p or not _is_relative_to(Path(p).resolve(), repo)]
    sys.path[:] = [p for p in sys.path if p]  # drop the cwd entry too (-I already does)
    paths = sysconfig.get_paths()
    site_dirs = sorted({Path(paths["purelib"]).resolve(), Path(paths["platlib"]).resolve()})
    if any(_is_relative_to(site, repo) for site in site_dirs):
        print(f"FAIL: site-packages {site_dirs} lies inside the repository {repo}", file=sys.stderr)
        return 1

    problems: list[str] = [f"mapped package folder missing: {m}" for m in layout.missing_folders()]
    files = layout.source_files()

    # ---- expected modules, from the source tree -------------------------------------------
    modules: dict[str, Path] = {}
    for path in files:
        if path.suffix == ".py":
            name = layout.module_name(path)
            if name:
                modules[name] = path
    if not modules:
        problems.append("no *.py files found under the mapped package folders (wrong repo path?)")

    imported = 0
    for name in sorted(modules):
        try:
            if name.rpartition(".")[2] == "__main__":
                spec = importlib.util.find_spec(name)  # locate only: importing would run the CLI
                origin = spec.origin if spec is not None else None
            else:
                origin = getattr(importlib.import_module(name), "__file__", None)
        except BaseException as exc:  # SystemExit/KeyboardInterrupt from a module body too
            source = modules[name].relative_to(repo)
            problems.append(f"module {name} ({source}): import failed: {type(exc).__name__}: {exc}")
            continue
        if origin is None:
            problems.append(f"module {name}: not found in the installed package")
            continue
        where = Path(origin).resolve()
        if _is_relative_to(where, repo):
            problems.append(f"module {name}: imported from the repository ({where}), not site-packages")
        elif not any(_is_relative_to(where, site) for site in site_dirs):
            problems.append(f"module {name}: imported from {where}, outside site-packages {site_dirs}")
        else:
            imported += 1

    # ---- package data -------------------------------------------------------------------------
    data_files = {p for p in files if p.suffix in DATA_SUFFIXES or p.name in DATA_NAMES}
    folders = dict(layout.roots)
    for pkg, globs in layout.package_data.items():
        folder = folders.get(pkg)
        if folder is None:
            continue
        for pattern in globs:
            data_files.update(p.resolve() for p in folder.glob(pattern) if p.is_file())
    data_ok = 0
    for src in sorted(data_files):
        rel = layout.installed_relpath(src)
        installed = next((site / rel for site in site_dirs if (site / rel).is_file()), None)
        if installed is None:
            problems.append(f"package data {src.relative_to(repo)}: not installed (expected {rel})")
        elif installed.read_bytes() != src.read_bytes():
            problems.append(f"package data {src.relative_to(repo)}: installed copy {installed} differs")
        else:
            data_ok += 1

    # ---- no stray top-level packages ----------------------------------------------------------
    for site in site_dirs:
        for name in FORBIDDEN_TOP_LEVEL:
            for cand in (site / name, site / f"{name}.py"):
                if cand.exists():
                    owners = [
                        d.metadata["Name"]
                        for d in importlib.metadata.distributions()
                        if any(Path(str(f)).parts[:1] == (cand.name,) for f in (d.files or ()))
                    ]
                    problems.append(
                        f"top-level {cand} is installed (owner: {', '.join(owners) or 'unknown'}); "
                        f"it must only exist as toolgate.{name}"
                    )
    try:
        dist_files = importlib.metadata.distribution(layout.dist_name).files or []
    except importlib.metadata.PackageNotFoundError:
        problems.append(f"distribution {layout.dist_name} is not installed in this interpreter")
        dist_files = []
    top_levels = sorted({Path(str(f)).parts[0] for f in dist_files if not str(f).startswith("..")})
    for top in top_levels:
        if top.removesuffix(".py") in FORBIDDEN_TOP_LEVEL:
            problems.append(f"wheel of {layout.dist_name} installs a top-level {top!r}")

    # ---- modules installed but absent from the source (stale build leftovers) -----------------
    installed_pkg_roots = {pkg.split(".")[0] for pkg, _ in layout.roots if pkg}
    extra = sorted(
        str(Path(str(f)).with_suffix("")).replace("/", ".").removesuffix(".__init__")
        for f in dist_files
        if str(f).endswith(".py") and Path(str(f)).parts[0] in installed_pkg_roots
    )
    extra = [m for m in extra if m not in modules]

    print(f"python={sys.executable}")
    print(f"site_packages={' '.join(map(str, site_dirs))}")
    print(f"distribution={layout.dist_name} top_level={','.join(top_levels)}")
    print(f"data_files_checked={data_ok} of {len(data_files)}")
    for name in extra:
        print(f"WARNING: installed module {name} has no source file in the repository (stale build?)")
    for problem in problems:
        print(f"FAIL: {problem}", file=sys.stderr)
    missing = len(modules) - imported
    print(f"modules_imported={imported} missing={missing}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
