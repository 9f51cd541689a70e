"""Start-up of the ``toolgate`` command line against a bare interpreter's (issue 28, item 4).

Rounds alternate (bare ``python -c pass``, ``toolgate --help``, ``toolgate proposals list`` on a
fresh ``toolgate init`` store), so machine load hits every side alike; the result is each
command's median wall time as a ratio to the bare interpreter's, with the spread, written to
``bench/results/cli_start.json``. Usage: ``.venv/bin/python bench/cli_start.py [--rounds N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
COMMANDS: dict[str, list[str]] = {
    "help": ["--help"],
    "proposals_list": ["proposals", "list"],
}


def _timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True, timeout=300)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    rounds = parser.parse_args().rounds
    with tempfile.TemporaryDirectory() as data:
        env = {**os.environ, "TOOLGATE_DATA_DIR": data, "TOOLGATE_MODEL": "offline"}
        toolgate = [sys.executable, "-m", "toolgate"]
        subprocess.run([*toolgate, "init"], env=env, check=True, capture_output=True)
        times: dict[str, list[float]] = {"bare": [], **{name: [] for name in COMMANDS}}
        for _ in range(rounds):
            times["bare"].append(_timed([sys.executable, "-c", "pass"], env))
            for name, args in COMMANDS.items():
                times[name].append(_timed([*toolgate, *args], env))
    bare = statistics.median(times["bare"])
    result = {
        "rounds": rounds,
        "bare_median_s": round(bare, 4),
        "load_average": os.getloadavg()[0],
        **{
            name: {
                "median_s": round(statistics.median(values), 4),
                "ratio_to_bare": round(statistics.median(values) / bare, 2),
                "min_s": round(min(values), 4),
                "max_s": round(max(values), 4),
            }
            for name, values in times.items()
            if name != "bare"
        },
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "cli_start.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
