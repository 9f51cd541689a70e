"""`bench/report.py` rewrites the generated part of BENCHMARKS.md; asked for help, or given an
option it does not have, it must answer and leave the page alone (it used to ignore its
arguments and rewrite the page)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
