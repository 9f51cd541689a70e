#!/usr/bin/env bash
# Run every benchmark (quick by default; BENCH_ARGS=--full for more rounds), print each ratio next
# to its target, then regenerate the figures of BENCHMARKS.md from this run (bench/report.py).
# PostgreSQL parts need TOOLGATE_TEST_PG_URL or TOOLGATE_BENCH_PG_URL (`make bench` runs this
# under scripts/with-postgres.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
ARGS="${BENCH_ARGS:-}"
for bench in read_path write_path review_listing growth throughput audit_appends; do
    echo "### bench/$bench.py $ARGS"
    "$PY" "bench/$bench.py" $ARGS
done
"$PY" bench/profile_paths.py
"$PY" bench/lab6_breaker.py
"$PY" bench/hostile_turn.py
echo "### bench/gate_cases.py $ARGS"
"$PY" bench/gate_cases.py $ARGS
echo "### bench/token_budget.py"
"$PY" bench/token_budget.py
echo "### bench/tool_selection.py"
"$PY" bench/tool_selection.py
echo "### bench/report.py"
"$PY" bench/report.py
