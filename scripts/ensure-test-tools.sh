#!/usr/bin/env bash
# Make sure the system tools the test suite needs (besides PostgreSQL) are present.
#
#   scripts/ensure-test-tools.sh
#
# - libfaketime (Debian package `faketime`): tests/test_clock_skew.py runs workers whose wall
#   clock is shifted by it. Missing and we are root with apt-get (CI: a fresh Debian machine),
#   the package is installed; otherwise a warning is printed.
# - Never fails the build itself: the tests decide. Without the tool they skip locally and fail
#   under CI=true, with the reason in pytest's report (same convention as scripts/with-postgres.sh).
set -euo pipefail

log() { printf 'ensure-test-tools: %s\n' "$*" >&2; }

have_libfaketime() {
    compgen -G '/usr/lib/*/faketime/libfaketime.so.1' >/dev/null \
        || compgen -G '/usr/lib/faketime/libfaketime.so.1' >/dev/null \
        || compgen -G '/usr/local/lib/faketime/libfaketime.so.1' >/dev/null \
        || compgen -G '/usr/lib64/faketime/libfaketime.so.1' >/dev/null
}

if have_libfaketime; then
    exit 0
fi

if [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    log "libfaketime not found; installing Debian's faketime package"
    if { apt-get update -qq \
            && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq faketime </dev/null; } >&2 \
        && have_libfaketime; then
        exit 0
    fi
    log "WARNING: apt-get install faketime failed"
else
    log "WARNING: libfaketime not found (and not root with apt-get to install it)"
fi
if [[ "${CI:-}" == "true" ]]; then
    log "WARNING: CI=true: the clock-skew tests (tests/test_clock_skew.py) will fail"
else
    log "WARNING: the clock-skew tests will be skipped; install it with: sudo apt-get install faketime"
fi
exit 0
