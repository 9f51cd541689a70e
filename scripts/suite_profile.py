"""Group a pytest ``--durations=0`` report by cause, as a Markdown table.

    python scripts/suite_profile.py LOG [LOG ...]

Each LOG is the output of a run with ``--durations=0 --durations-min=0`` (``make test`` writes
``.build/test-durations.txt``). A step is one phase (setup, call, teardown) of one test; its cause
is read from the test's own file: a file that starts the real ``langgraph dev`` is "server", one
that drives Chromium is "browser", one that runs the CLI (in-process since issue 24, a process
before) or processes of its own is "CLI and subprocesses";
setup and teardown of a ``[postgres]`` or ``[sqlite]`` test are that backend's set-up. Why: the
suite's time is part of the product, and a cause can only be worked on once it is measured
(issue 24); the same script prints the before and after tables.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LINE = re.compile(r"^\s*(?P<s>\d+(?:\.\d+)?)s (?P<phase>setup|call|teardown)\s+(?P<node>\S+)")
SUMMARY = re.compile(r"(?P<text>\d+ passed[^=]*?) in (?P<s>[\d.]+)s")


def file_causes() -> dict[str, str]:
    """Each test file's main cost, from what its source (or its helper modules) starts."""
    causes: dict[str, str] = {}
    for path in sorted((REPO / "tests").glob("test_*.py")):
        text = path.read_text(encoding="utf-8")
        if "playwright" in text or "chromium" in text.lower():
            cause = "browser"
        elif "langgraph_dev" in text or "server_support" in text:
            cause = "server"
        elif re.search(r"\btoolgate\(\[|subprocess|Popen|multiprocessing|toolgate_cli", text):
            cause = "CLI and subprocesses"
        else:
            cause = "in-process"
        causes[f"tests/{path.name}"] = cause
    return causes


def cause_of(phase: str, node: str, causes: dict[str, str]) -> str:
    """The cause a step's time is charged to."""
    file = node.split("::", 1)[0]
    if phase != "call":
        if "[postgres" in node or "-postgres" in node:
            return "postgres set-up"
        if "[sqlite" in node or "-sqlite" in node:
            return "sqlite set-up"
        return f"{causes.get(file, 'in-process')} set-up"
    return causes.get(file, "in-process")


def profile(log: Path) -> tuple[dict[str, list[float]], dict[str, float], str]:
    """Steps by cause, seconds by file, and pytest's summary lines (one per phase)."""
    causes = file_causes()
    by_cause: dict[str, list[float]] = defaultdict(list)
    by_file: dict[str, float] = defaultdict(float)
    summaries: list[str] = []
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        if match := LINE.match(line):
            seconds = float(match["s"])
            by_cause[cause_of(match["phase"], match["node"], causes)].append(seconds)
            by_file[match["node"].split("::", 1)[0]] += seconds
        elif match := SUMMARY.search(line):
            summaries.append(f"{match['text']} in {float(match['s']):.0f}s")
    return by_cause, by_file, "; ".join(summaries)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    for name in argv:
        by_cause, by_file, summary = profile(Path(name))
        total = sum(sum(v) for v in by_cause.values()) or 1.0
        print(f"### {name}\n\n{summary or '(no pytest summary line)'}\n")
        print("| cause | steps | seconds | share |\n| --- | ---: | ---: | ---: |")
        for cause, steps in sorted(by_cause.items(), key=lambda kv: -sum(kv[1])):
            print(f"| {cause} | {len(steps)} | {sum(steps):.0f} | {100 * sum(steps) / total:.0f}% |")
        print(f"| **all steps** | {sum(len(v) for v in by_cause.values())} | {total:.0f} | 100% |\n")
        print("| slowest files | seconds |\n| --- | ---: |")
        for file, seconds in sorted(by_file.items(), key=lambda kv: -kv[1])[:15]:
            print(f"| {file} | {seconds:.0f} |")
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
