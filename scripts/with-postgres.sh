#!/usr/bin/env bash
# Run a command against a throwaway local PostgreSQL server.
#
#   scripts/with-postgres.sh CMD [ARGS...]
#
# Starts a private server (fresh data dir under /tmp, 127.0.0.1 only, a free port,
# trust auth, superuser "postgres"), exports
#     TOOLGATE_TEST_PG_URL=postgresql://postgres@127.0.0.1:PORT/postgres
# runs CMD, then stops the server and deletes the data dir, and exits with CMD's exit code.
#
# - TOOLGATE_TEST_PG_URL already set: CMD is exec'd as is (use that server).
# - Server binaries come from /usr/lib/postgresql/<highest>/bin (or $TOOLGATE_PG_BINDIR);
#   when missing and we are root, Debian's `postgresql` package is installed with apt-get.
#   /usr/local/bin/pg_ctl & co. are deliberately not used (they may be wrappers).
# - initdb refuses to run as root, so as root the server runs as the `postgres` OS user.
# - The server cannot be started: with CI=true this is an error (exit 1); otherwise a
#   warning is printed and CMD runs without the variable (PostgreSQL tests then skip).
# - The server is stopped on EXIT/INT/TERM, and a small watchdog stops it even if this
#   script is SIGKILLed. (A SIGTERM sent to this script alone is handled once CMD, which
#   runs in the foreground so Ctrl-C/stdin behave normally, has exited.)
# - TOOLGATE_PG_START_TIMEOUT (default 30) bounds the server start, in seconds.
set -euo pipefail

log() { printf 'with-postgres: %s\n' "$*" >&2; }

if [[ $# -eq 0 ]]; then
    echo "usage: $0 CMD [ARGS...]" >&2
    exit 2
fi

if [[ -n "${TOOLGATE_TEST_PG_URL:-}" ]]; then
    exec "$@"
fi

START_TIMEOUT="${TOOLGATE_PG_START_TIMEOUT:-30}"

# ---------------------------------------------------------------------------
# Failure policy: no server -> hard error under CI, warning + run anyway otherwise.
# ---------------------------------------------------------------------------
# no_server REASON CMD [ARGS...]
no_server() {
    local reason="$1"
    shift
    if [[ "${CI:-}" == "true" ]]; then
        log "ERROR: $reason (CI=true: refusing to run the tests without PostgreSQL)"
        exit 1
    fi
    log "WARNING: $reason"
    log "WARNING: running without TOOLGATE_TEST_PG_URL; tests that need PostgreSQL will be skipped"
    unset TOOLGATE_TEST_PG_URL
    cleanup_now  # exec skips the EXIT trap
    trap - EXIT INT TERM
    exec "$@"
}

# ---------------------------------------------------------------------------
# State + cleanup (set up before anything is created, so every exit path is covered).
# ---------------------------------------------------------------------------
PGTMP=""
BINDIR=""
SERVER_STARTED=0
WATCHDOG_PID=""

stop_server() {
    if [[ "$SERVER_STARTED" == 1 ]]; then
        SERVER_STARTED=0
        # run from inside the temp dir: the postgres user may not be able to read our cwd
        (cd "$PGTMP" && as_pg "$BINDIR/pg_ctl" -D "$PGTMP/data" -m immediate -w -t 30 stop) >/dev/null 2>&1 || true
    fi
}

cleanup_now() {
    if [[ -n "$WATCHDOG_PID" ]]; then
        kill "$WATCHDOG_PID" 2>/dev/null || true
        WATCHDOG_PID=""
    fi
    stop_server
    if [[ -n "$PGTMP" ]]; then
        rm -rf "$PGTMP"
        PGTMP=""
    fi
}

on_exit() {
    local rc=$?
    trap - EXIT INT TERM
    cleanup_now
    return "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

find_bindir() {
    local d best=""
    # highest major version first (sort -V handles 9.6 < 10 < 15 < 16)
    while IFS= read -r d; do
        if [[ -x "$d/initdb" && -x "$d/pg_ctl" && -x "$d/postgres" && -x "$d/pg_isready" ]]; then
            best="$d"
            break
        fi
    done < <(compgen -G '/usr/lib/postgresql/*/bin' | sort -Vr)
    printf '%s' "$best"
}

if [[ -n "${TOOLGATE_PG_BINDIR:-}" ]]; then
    # explicit override (another install location); no apt fallback then
    BINDIR="$TOOLGATE_PG_BINDIR"
    [[ -x "$BINDIR/initdb" && -x "$BINDIR/pg_ctl" && -x "$BINDIR/pg_isready" ]] \
        || no_server "TOOLGATE_PG_BINDIR=$BINDIR has no initdb/pg_ctl/pg_isready" "$@"
else
    BINDIR="$(find_bindir)"
fi
if [[ -z "$BINDIR" ]]; then
    if [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
        log "PostgreSQL server binaries not found; installing Debian's postgresql package"
        if ! { apt-get update -qq \
                && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql </dev/null; } >&2; then
            no_server "apt-get install postgresql failed" "$@"
        fi
        BINDIR="$(find_bindir)"
    fi
    [[ -n "$BINDIR" ]] || no_server "no PostgreSQL server binaries under /usr/lib/postgresql/*/bin" "$@"
fi

# ---------------------------------------------------------------------------
# As root, run the server tools as the `postgres` OS user (initdb refuses root).
# ---------------------------------------------------------------------------
if [[ $EUID -eq 0 ]]; then
    id -u postgres >/dev/null 2>&1 || no_server "running as root but there is no 'postgres' OS user" "$@"
    if command -v runuser >/dev/null 2>&1; then
        as_pg() { runuser -u postgres -- "$@"; }
    else
        as_pg() { su -s /bin/sh postgres -c "$(printf '%q ' "$@")"; }
    fi
else
    as_pg() { "$@"; }
fi

free_port() {
    python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()'
}

# Always under /tmp: the postgres user must be able to traverse every parent directory,
# and the unix socket path must stay short (< 108 bytes).
PGTMP="$(mktemp -d /tmp/toolgate-pg.XXXXXX)"
chmod 700 "$PGTMP"
if [[ $EUID -eq 0 ]]; then chown postgres: "$PGTMP"; fi
DATADIR="$PGTMP/data"
SOCKDIR="$PGTMP"
LOGFILE="$PGTMP/server.log"

dump_log() {
    if [[ -f "$LOGFILE" ]]; then
        log "---- server log ($LOGFILE) ----"
        cat "$LOGFILE" >&2 || true
        log "---- end of server log ----"
    fi
}

# ---------------------------------------------------------------------------
# initdb + start (a few attempts, in case another process grabs the port we picked).
# ---------------------------------------------------------------------------
t0=$SECONDS
if ! (cd "$PGTMP" && as_pg "$BINDIR/initdb" -D "$DATADIR" --auth=trust -U postgres \
        -E UTF8 --no-locale --no-sync --no-instructions) >"$PGTMP/initdb.log" 2>&1; then
    cat "$PGTMP/initdb.log" >&2
    no_server "initdb failed (output above)" "$@"
fi

PORT=""
for attempt in 1 2 3; do
    port="$(free_port)"
    : >"$LOGFILE"
    if [[ $EUID -eq 0 ]]; then chown postgres: "$LOGFILE"; fi
    if (cd "$PGTMP" && as_pg "$BINDIR/pg_ctl" -D "$DATADIR" -l "$LOGFILE" -w -t "$START_TIMEOUT" \
            -o "-p $port -k $SOCKDIR -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
            start) >/dev/null 2>&1; then
        SERVER_STARTED=1
        # pg_ctl -w already waited; confirm over TCP exactly as the tests will connect
        deadline=$((SECONDS + START_TIMEOUT))
        until "$BINDIR/pg_isready" -q -h 127.0.0.1 -p "$port" -U postgres -d postgres; do
            if ((SECONDS >= deadline)); then break; fi
            sleep 0.2
        done
        if "$BINDIR/pg_isready" -q -h 127.0.0.1 -p "$port" -U postgres -d postgres; then
            PORT="$port"
            break
        fi
        stop_server
    fi
    log "attempt $attempt: server did not come up on port $port"
    dump_log
done

if [[ -z "$PORT" ]]; then
    no_server "PostgreSQL did not start (3 attempts, ${START_TIMEOUT}s timeout each; server log above)" "$@"
fi

# Watchdog: if this script dies without running its traps (SIGKILL), stop the server.
# Own session so a process-group kill of the caller does not take it out first; no
# inherited stdio so it never keeps a pipe (e.g. CI's log) open.
parent=$$
setsid bash -c '
    while kill -0 "$0" 2>/dev/null; do sleep 1; done
    cd "$1" 2>/dev/null || exit 0
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$2/pg_ctl" -D "$1/data" -m immediate -w stop || true
    else
        "$2/pg_ctl" -D "$1/data" -m immediate -w stop || true
    fi
    cd / && rm -rf "$1"
' "$parent" "$PGTMP" "$BINDIR" </dev/null >/dev/null 2>&1 &
WATCHDOG_PID=$!

export TOOLGATE_TEST_PG_URL="postgresql://postgres@127.0.0.1:${PORT}/postgres"
log "PostgreSQL $("$BINDIR/postgres" --version | awk '{print $3}') ready on 127.0.0.1:${PORT} in $((SECONDS - t0))s (data: $DATADIR)"

set +e
"$@"
rc=$?
set -e
exit "$rc"
