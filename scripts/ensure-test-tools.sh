#!/usr/bin/env bash
# Make sure the system tools the test suite needs (besides PostgreSQL) are present.
#
#   scripts/ensure-test-tools.sh
#
# - libfaketime (Debian package `faketime`): tests/test_clock_skew.py runs workers whose wall
#   clock is shifted by it.
# - Chromium (Debian package `chromium`, /usr/bin/chromium): tests/test_console_browser.py drives
#   the reviewer console in it, headless, through Playwright (never a browser Playwright downloads).
# - A missing tool is installed when we are root with apt-get (CI: a fresh Debian machine);
#   otherwise a warning is printed.
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

have_chromium() {
    [[ -x /usr/bin/chromium ]]
}

apt_updated=0

# ensure TOOL CHECK PACKAGE TESTS: install Debian's PACKAGE when CHECK fails (root with apt-get),
# else warn that TESTS will be skipped (or fail under CI=true). Always returns 0.
ensure() {
    local tool=$1 check=$2 package=$3 tests=$4
    if "$check"; then
        return 0
    fi
    if [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
        log "$tool not found; installing Debian's $package package"
        if [[ $apt_updated -eq 0 ]] && apt-get update -qq >&2; then
            apt_updated=1
        fi
        if DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$package" </dev/null >&2 && "$check"; then
            return 0
        fi
        log "WARNING: apt-get install $package failed"
    else
        log "WARNING: $tool not found (and not root with apt-get to install it)"
    fi
    if [[ "${CI:-}" == "true" ]]; then
        log "WARNING: CI=true: $tests will fail"
    else
        log "WARNING: $tests will be skipped; install it with: sudo apt-get install $package"
    fi
    return 0
}

ensure libfaketime have_libfaketime faketime "the clock-skew tests (tests/test_clock_skew.py)"
ensure /usr/bin/chromium have_chromium chromium "the console browser tests (tests/test_console_browser.py)"
exit 0
