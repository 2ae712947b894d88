#!/usr/bin/env bash
# `make serve`: reuse the Prefect server at PREFECT_API_URL, or start one on loopback, then serve the
# refresh-benchmark deployment on the profile's cron. Ctrl-C stops serving (a server we started stops too).
set -euo pipefail
cd "$(dirname "$0")/.."
PROFILE=${1:-default}
N=${2:-}
export PREFECT_API_URL=${PREFECT_API_URL:-http://127.0.0.1:4200/api}
started=""
if ! .venv/bin/python -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + '/health', timeout=2)" "$PREFECT_API_URL" 2>/dev/null; then
  mkdir -p outputs
  echo "starting a Prefect server on 127.0.0.1:4200 (log: outputs/prefect-server.log)"
  .venv/bin/prefect server start --host 127.0.0.1 --port 4200 > outputs/prefect-server.log 2>&1 &
  started=$!
  trap '[ -n "$started" ] && kill "$started" 2>/dev/null' EXIT
  for _ in $(seq 1 120); do
    .venv/bin/python -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + '/health', timeout=2)" "$PREFECT_API_URL" 2>/dev/null && break
    sleep 1
  done
fi
echo "serving refresh-benchmark (profile $PROFILE) against $PREFECT_API_URL; Ctrl-C to stop"
.venv/bin/python -m flows.schedules serve --profile "$PROFILE" ${N:+--n "$N"}
