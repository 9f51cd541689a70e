#!/usr/bin/env bash
# Run the whole pytest suite the way `make test` and CI do: in parallel, then the exclusive tests alone.
#
#   scripts/run-tests.sh [PYTEST_ARGS...]
#
# - Phase 1 runs every test not marked `exclusive` with pytest-xdist, one process per worker
#   (TOOLGATE_TEST_WORKERS, default: cores + 1, since many tests wait on subprocesses, servers
#   and databases), whole files per worker (--dist loadfile: a file's module-scoped server or
#   store is set up once), the slowest files first (tests/suite_order.py; --no-loadscope-reorder
#   keeps that order, where xdist would start the files with the most tests first). Each test has
#   its own database, temporary directory and ports, so workers share nothing but the PostgreSQL
#   server.
# - Phase 2 runs the tests marked `exclusive` (bursts of processes sized for the whole machine,
#   or a claim about every commit on the PostgreSQL server)
#   one at a time with nothing beside them.
# - Every step's duration (setup, call, teardown) goes to .build/test-durations.txt; at the end the
#   total wall time, the counts and the 25 slowest steps of both phases are printed
#   (`python scripts/suite_profile.py .build/test-durations.txt` groups them by cause).
# - TOOLGATE_SUITE_LIMIT_S (CI: 2700, 45 minutes) stops a suite that runs past it and fails with a
#   message saying so, long before CI's 90-minute wall.
# - PYTEST_ARGS go to both phases (e.g. -k foo, or a file); a phase that selects no test is fine as
#   long as the other one ran some. Exit status: the first failing phase's, else 0.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTEST="${PYTEST:-.venv/bin/pytest}"
WORKERS="${TOOLGATE_TEST_WORKERS:-$(($(nproc) + 1))}"
LIMIT_S="${TOOLGATE_SUITE_LIMIT_S:-0}"
OUT=.build
DURATIONS="$OUT/test-durations.txt"
mkdir -p "$OUT"
: >"$DURATIONS"
export TOOLGATE_TEST_DURATIONS="$PWD/$DURATIONS"

log() { printf 'run-tests: %s\n' "$*" >&2; }

start=$SECONDS
summaries=()
past_limit=""

# phase NAME PYTEST_ARGS...: run pytest (bounded by what is left of the limit); sets $rc
phase() {
    local name=$1
    shift
    local limit=() began=$SECONDS
    if [[ "$LIMIT_S" -gt 0 ]]; then
        local left=$((LIMIT_S - (SECONDS - start)))
        if [[ $left -le 0 ]]; then
            rc=124
        else
            limit=(timeout --signal=INT --kill-after=60 "$left")
        fi
    fi
    if [[ ${rc:-0} -ne 124 ]]; then
        rc=0
        "${limit[@]}" "$PYTEST" "$@" 2>&1 | tee "$OUT/test-$name.log" || rc=${PIPESTATUS[0]}
    fi
    if [[ $rc -eq 124 || $rc -eq 137 ]]; then
        past_limit=$name
    fi
    summaries+=("$name: $(grep -E '(passed|failed|errors?|no tests ran|deselected).* in [0-9.]+s' "$OUT/test-$name.log" | tail -1 | tr -d '=' | xargs) ($((SECONDS - began))s)")
}

phase parallel -n "$WORKERS" --dist loadfile --no-loadscope-reorder -m "not exclusive" -p no:cacheprovider "$@"
parallel_rc=$rc
exclusive_rc=0
if [[ $parallel_rc -ne 124 && $parallel_rc -ne 137 ]]; then
    phase exclusive -m exclusive -p no:cacheprovider "$@"
    exclusive_rc=$rc
fi

printf '\n==== slowest 25 steps of the suite (all of them: %s) ====\n' "$DURATIONS"
sort -rn "$DURATIONS" | head -25 || true  # head closes the pipe early (SIGPIPE for sort)
printf '\n==== suite total: %ss wall, %s workers ====\n' "$((SECONDS - start))" "$WORKERS"
printf '%s\n' "${summaries[@]}" | tee -a "$DURATIONS"
if [[ -n "$past_limit" ]]; then
    log "FAILED: the suite ran past its limit of ${LIMIT_S}s ($((LIMIT_S / 60)) minutes) in the $past_limit phase;"
    log "        it creeps: make the slowest steps above faster before it reaches CI's 90-minute wall"
fi

# pytest exits 5 when a phase selected no test: fine when the other phase ran tests
if [[ $parallel_rc -eq 5 && $exclusive_rc -eq 0 ]]; then parallel_rc=0; fi
if [[ $exclusive_rc -eq 5 && $parallel_rc -eq 0 ]]; then exclusive_rc=0; fi
if [[ $parallel_rc -ne 0 ]]; then exit "$parallel_rc"; fi
exit "$exclusive_rc"
