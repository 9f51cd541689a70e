"""``toolgate release init NAME``: a new release package with one read and one write tool.

The generated package is the shortest complete path from a function to an approved execution:
two typed functions (`toolgate.tools.shapes.functions.from_function`) over a small system of record kept in
the toolgate store, the operator policy of each (risk, approval, ownership), the release's
``policy.json``, its reviewed ``manifest.json`` (written here, from the generated code), a seed
file of people, and a test that passes as generated. Nothing in it is toolgate-internal: it uses
only the public API a team's own package would.

This module checks the name and writes the files; their text lives in
`toolgate.scaffold.release` (what toolgate loads and the manifest pins) and
`toolgate.scaffold.project` (the packaging, README, people and test around it).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from string import Template

from toolgate.errors import ConfigurationError
from toolgate.scaffold.project import GATE_CASES, IDENTITIES, PYPROJECT, README, TEST
from toolgate.scaffold.release import INIT, POLICY, RECORDS, RELEASE, TOOLS

_NAME = re.compile(r"^[a-z][a-z0-9-]{1,48}[a-z0-9]$")


def package_name(name: str) -> str:
    """The Python package of release ``name`` (``acme-tools`` -> ``acme_tools``)."""
    return name.replace("-", "_")


def scaffold(name: str, parent: Path) -> Path:
    """Write the release package ``name`` under ``parent``; returns its directory.

    Refuses a name that is not a lowercase distribution name, and an existing directory (nothing
    is overwritten). The reviewed manifest is then computed from the generated code and written
    beside the release."""
    if not _NAME.match(name):
        raise ConfigurationError(f"release name {name!r} must match {_NAME.pattern} (e.g. acme-tools)")
    root = parent / name
    if root.exists():
        raise ConfigurationError(f"{root} already exists; refusing to overwrite it")
    package = package_name(name)
    values = {"name": name, "package": package}
    files = {
        "pyproject.toml": PYPROJECT,
        "README.md": README,
        f"{package}/__init__.py": INIT,
        f"{package}/records.py": RECORDS,
        f"{package}/tools.py": TOOLS,
        f"{package}/release.py": RELEASE,
        f"tests/test_{package}.py": TEST,
    }
    for relative, template in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(Template(template).substitute(values), encoding="utf-8")
    _write_json(root / package / "policy.json", POLICY)
    _write_json(root / "identities.json", IDENTITIES)
    (root / "gate.jsonl").write_text(
        "".join(json.dumps(case, sort_keys=True) + "\n" for case in GATE_CASES), encoding="utf-8"
    )
    return root


def _write_json(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


__all__ = ["package_name", "scaffold"]
