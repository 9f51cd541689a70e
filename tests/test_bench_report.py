"""`bench/report.py` rewrites the generated part of BENCHMARKS.md; asked for help, or given an
option it does not have, it must answer and leave the page alone (it used to ignore its
arguments and rewrite the page)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(("args", "code", "said"), [(["--help"], 0, "usage:"), (["--full"], 2, "unrecognized")])
def test_the_report_answers_its_arguments_and_writes_nothing_then(args: list[str], code: int, said: str) -> None:
    page = ROOT / "BENCHMARKS.md"
    before = page.read_bytes()
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "report.py"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == code, done.stderr
    assert said in done.stdout + done.stderr and "wrote" not in done.stdout
    assert page.read_bytes() == before


def _report_module() -> Any:
    """``bench/report.py`` (standard library only) loaded under a name of its own."""
    spec = importlib.util.spec_from_file_location("toolgate_bench_report", ROOT / "bench" / "report.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_page_names_the_commit_the_results_were_measured_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regenerated later, the page named whatever was checked out then: each result now records
    its own commit (``+changes`` when tracked files differed from it)."""
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    # in a process of its own: the bench's helpers set process-wide warning filters
    recorded = subprocess.run(
        [sys.executable, "-c", "import _common; print(_common.machine()['commit'])"],
        cwd=ROOT / "bench",
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.strip()
    assert recorded in (head, head + "+changes")
    report = _report_module()
    for found in (ROOT / "bench" / "results").glob("*.json"):
        body = json.loads(found.read_text(encoding="utf-8"))
        body.setdefault("machine", {})["commit"] = "abc1234"
        (tmp_path / found.name).write_text(json.dumps(body), encoding="utf-8")
    monkeypatch.setattr(report, "RESULTS", tmp_path)
    first = next(line for line in report.generated() if line.startswith("Figures of one"))
    assert "run on `abc1234`" in first and head not in first
