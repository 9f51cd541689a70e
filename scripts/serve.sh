#!/usr/bin/env bash
# Start the REAL `langgraph dev` for toolgate, offline, on a free loopback port (make serve).
#
# - Its own data directory (TOOLGATE_DATA_DIR, default .toolgate/server), apart from the CLI's
#   .toolgate, unless you point both at one directory or one PostgreSQL database.
# - No analytics, no version check, no LangSmith tracing unless LANGSMITH_TRACING is set.
# - On a store without identities, the demo people are added with their well-known demo tokens
#   (a local demo only; use `toolgate identities import` for anything else) and printed.
# - PORT overrides the port; HOST is always 127.0.0.1.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BIN=.venv/bin
export TOOLGATE_DATA_DIR="${TOOLGATE_DATA_DIR:-.toolgate/server}"
export LANGGRAPH_CLI_NO_ANALYTICS=1
export LANGGRAPH_NO_VERSION_CHECK=true
export LANGSMITH_TRACING="${LANGSMITH_TRACING:-false}"
PORT="${PORT:-$("$BIN/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"

if "$BIN/toolgate" identities seed-demo >/tmp/toolgate-serve-people.$$ 2>/dev/null; then
    echo "demo people added to $TOOLGATE_DATA_DIR (tokens are public: local demo only):"
    sed 's/^/  /' /tmp/toolgate-serve-people.$$
else
    echo "identities: this store already has people; tokens come from 'toolgate identities add|rotate-token'"
fi
rm -f /tmp/toolgate-serve-people.$$

URL="http://127.0.0.1:$PORT"
cat <<INFO

toolgate server:   $URL          (LangGraph API, for Studio, chat UIs and langgraph-sdk)
reviewer console:  $URL/console
every request:     Authorization: Bearer <token>   e.g. demo-token-cust-ada (requester), demo-token-fiona (reviewer)
data directory:    $TOOLGATE_DATA_DIR   (the CLI reviews it with TOOLGATE_DATA_DIR=$TOOLGATE_DATA_DIR)

INFO
exec "$BIN/langgraph" dev --host 127.0.0.1 --port "$PORT" --no-browser
