"""The README's newcomer walkthrough and the commands ``make demo`` prints run exactly as written.

The walkthrough block (the fenced block after the ``tests/test_readme_commands.py`` marker in
README.md) runs in one bash process, line by line as written, in a directory that holds a copy of
the Makefile and this test's venv as ``.venv``, the way a fresh clone holds them after
``make demo``. Only ``make`` is wrapped, with ``-o .venv/.stamp``, so the Makefile never
reinstalls the shared venv. Every command must exit 0 except those whose comment says
``exit 2``; every ``# ->`` comment must match a line the block printed. Then each command of the
demo's last section runs as printed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO

pytestmark = pytest.mark.slow

MARKER = "<!-- tests/test_readme_commands.py runs this block exactly as written -->"
VENV = Path(sys.executable).parent.parent


def _walkthrough() -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    after = text.split(MARKER, 1)[1].lstrip("\n")
    assert after.startswith("```bash\n"), "the marker must sit right above a ```bash block"
    return after.removeprefix("```bash\n").split("\n```", 1)[0].splitlines()


def _is_command(line: str) -> bool:
    return bool(line.strip()) and not line.lstrip().startswith("#")


def _expected_exit(line: str) -> int:
    return 2 if "exit 2" in line.partition(" # ")[2] else 0


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLGATE_") and k != "OPENAI_API_KEY"}
    env.update({"LANGSMITH_TRACING": "false", "TOOLGATE_ALLOW_MODEL_REQUESTS": "0"})
    return env


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """A directory shaped like a fresh clone after ``make demo`` created its venv."""
    if not (VENV / "bin" / "toolgate").exists() or shutil.which("make") is None:
        pytest.skip("needs make and the toolgate console script beside this interpreter")
    shutil.copy(REPO / "Makefile", tmp_path / "Makefile")
    (tmp_path / ".venv").symlink_to(VENV, target_is_directory=True)
    return tmp_path


def test_readme_walkthrough_and_demo_commands_run_as_written(clone: Path) -> None:
    lines = _walkthrough()
    commands = [line for line in lines if _is_command(line)]
    assert commands[0].startswith("make demo") and "toolgate run" in "\n".join(commands)
    rc_file = clone / ".rc"
    script = ["set -o pipefail", 'make() { command make -o .venv/.stamp "$@"; }']
    for line in lines:
        script.append(line)
        if _is_command(line):
            script.append(f'echo "$? {_expected_exit(line)}" >> {rc_file}')
    ran = subprocess.run(
        ["bash", "-c", "\n".join(script)],
        cwd=clone,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    transcript = f"{ran.stdout}\n{ran.stderr}"
    results = [tuple(map(int, row.split())) for row in rc_file.read_text().splitlines()]
    assert len(results) == len(commands), transcript
    for command, (got, expected) in zip(commands, results, strict=True):
        assert got == expected, f"{command!r} exited {got}, expected {expected}\n{transcript}"

    for line in lines:  # what the README says each command prints, it prints
        if line.startswith("# -> "):
            pattern = ".*?".join(re.escape(part) for part in line.removeprefix("# -> ").split("..."))
            assert re.search(pattern, ran.stdout), f"README promises {line!r}\n{transcript}"
    assert "demo=PASS" in ran.stdout and "error=self_approval" in ran.stderr

    section = ran.stdout.split("\n== 10.", 1)[1].split("\ndemo=", 1)[0].splitlines()[1:]
    printed = [line for line in section if _is_command(line)]
    assert any("audit trace op_" in c for c in printed) and any("--call call_" in c for c in printed)
    for command in printed:
        assert "TOOLGATE_DATA_DIR=.toolgate/demo" in command, command
        result = subprocess.run(
            ["bash", "-c", command], cwd=clone, env=_env(), capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, f"{command!r} exited {result.returncode}\n{result.stderr}"
        assert "error=" not in result.stderr, result.stderr


def test_make_reset_deletes_the_data_and_keeps_the_venv(tmp_path: Path) -> None:
    if shutil.which("make") is None:
        pytest.skip("needs make")
    shutil.copy(REPO / "Makefile", tmp_path / "Makefile")
    for path in (".venv/bin", ".toolgate/demo", ".toolgate/server", ".langgraph_api"):
        (tmp_path / path).mkdir(parents=True)
        (tmp_path / path / "data").write_text("x")
    subprocess.run(["make", "reset"], cwd=tmp_path, check=True, capture_output=True, timeout=60)
    assert (tmp_path / ".venv/bin/data").exists()
    assert not (tmp_path / ".toolgate").exists() and not (tmp_path / ".langgraph_api").exists()
    listed = subprocess.run(
        ["make", "help"], cwd=tmp_path, check=True, capture_output=True, text=True, timeout=60
    ).stdout
    assert re.search(r"^make reset .*keeping \.venv", listed, re.M), listed
    assert re.search(r"^make clean .*\.venv", listed, re.M), listed
