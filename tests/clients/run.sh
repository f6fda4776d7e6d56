#!/usr/bin/env bash
# Installs the pinned real MCP clients and runs the client smoke tests against `cajaguard mcp`
# (stdio), then the same clients over MCP Streamable HTTP against `cajaguard serve`.
#
#   tests/clients/run.sh --config FILE [--cajaguard BIN] [--install-only] [--stdio-only]
#   tests/clients/run.sh --direct-shop -- SHOP_CMD ARGS...      (developing the scripts only)
#
# Clients (pinned): Python `mcp` (requirements.txt) in a venv, and the MCP Inspector CLI
# (package.json + package-lock.json, `npm install` with the lock), both under target/clients/
# (git-ignored; override with CG_CLIENTS_DIR). After each install, verify_install.py checks that
# what landed on this machine is exactly what is pinned and names any package that is not
# (tested offline by test_verify_install.py). Needs only the PyPI and npm registries, and only
# when the pins changed since the last install. BIN defaults to target/debug/cajaguard.
#
# Runs, over stdio: python_smoke.py in modes auto (2026-07-28 via server/discover) and legacy
# (initialize), and inspector_smoke.sh in eras modern and legacy: 4 x 3 checks, 4 purchases of
# 2 x Trail socks (USD 24.00 each, USD 96.00 in all), so give it a config whose home has that much
# window left.
# Then the service (skipped with --stdio-only or --direct-shop): a scratch copy of the config
# beside it (so its relative paths still resolve) with a fresh home of its own and
# "serve": {"listen": "127.0.0.1:<free port>"}; `cajaguard agent add smoke` mints the token (its
# stdout); `cajaguard serve` runs in the background. The Python SDK's streamable HTTP client in
# modes legacy, auto and 2026-07-28, and the Inspector CLI's HTTP transport in eras legacy and
# modern, each list tools, read cajaguard_status, pay 1 x Day pack (USD 89.00: refused, blocked /
# pending_approval) and 1 x Trail socks (USD 12.00: allow), all with `Authorization: Bearer`, and
# see a token the gate never made refused with its reason: 5 x 5 checks. Then SIGTERM must stop the service with exit 0, and `cajaguard audit verify` pass
# on its home: 3 service checks (listening, graceful shutdown, audit). The service is killed on
# any exit. The fresh home's window (the config's caps) must hold USD 48.00 + 89.00.
# Last line: `clients: N passed, M failed`; exit status non-zero if any check failed.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
DEST="${CG_CLIENTS_DIR:-$ROOT/target/clients}"
PYTHON="${PYTHON:-python3}"
CONFIG="" CAJAGUARD="$ROOT/target/debug/cajaguard" INSTALL_ONLY=0 STDIO_ONLY=0 DIRECT=() SERVER=()
PY_MODES="${CG_PY_MODES:-auto,legacy}" INSPECTOR_ERAS="${CG_INSPECTOR_ERAS:-modern,legacy}"
HTTP_PY_MODES="${CG_HTTP_PY_MODES:-legacy,auto,2026-07-28}" HTTP_INSPECTOR_ERAS="${CG_HTTP_INSPECTOR_ERAS:-legacy,modern}"

while [ $# -gt 0 ]; do
  case "$1" in
    --config) CONFIG="$2"; shift 2 ;;
    --cajaguard) CAJAGUARD="$2"; shift 2 ;;
    --install-only) INSTALL_ONLY=1; shift ;;
    --stdio-only) STDIO_ONLY=1; shift ;;
    --direct-shop) DIRECT=(--direct-shop); shift ;;
    --) shift; SERVER=("$@"); break ;;
    -h|--help) sed -n '2,29p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

abspath() { case "$1" in /*) printf '%s\n' "$1" ;; *) printf '%s/%s\n' "$(pwd)" "$1" ;; esac; }
stamp_ok() { [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; }

# --- install (idempotent: re-installs only when a pin file changed) --------------------------
mkdir -p "$DEST"
py_sum="$(cat "$HERE/requirements.txt" | sha256sum | cut -d' ' -f1)"
if ! stamp_ok "$DEST/venv/.cg-stamp" "$py_sum" || [ ! -x "$DEST/venv/bin/python" ]; then
  echo "run.sh: installing Python clients into $DEST/venv"
  rm -rf "$DEST/venv"
  "$PYTHON" -m venv "$DEST/venv"
  "$DEST/venv/bin/pip" install --disable-pip-version-check -q -r "$HERE/requirements.txt"
  "$DEST/venv/bin/python" "$HERE/verify_install.py" python "$HERE/requirements.txt"
  echo "$py_sum" >"$DEST/venv/.cg-stamp"
fi

node_sum="$(cat "$HERE/package.json" "$HERE/package-lock.json" | sha256sum | cut -d' ' -f1)"
INSPECTOR="$DEST/node/node_modules/.bin/mcp-inspector"
if ! stamp_ok "$DEST/node/.cg-stamp" "$node_sum" || [ ! -x "$INSPECTOR" ]; then
  echo "run.sh: installing the MCP Inspector into $DEST/node"
  rm -rf "$DEST/node"
  mkdir -p "$DEST/node"
  cp "$HERE/package.json" "$HERE/package-lock.json" "$DEST/node/"
  # Not `npm ci`: it refuses a lock whose optional dependencies for other platforms npm would
  # resolve differently today (vite's Windows-only napi-windows-process-start-time appeared in
  # the registry after the lock was made), although nothing installed here changes. `npm install`
  # with the lock present installs the locked versions and may rewrite the lock's other-platform
  # entries; that rewrite is not trusted or compared. verify_install.py checks instead that every
  # package npm really installed (node_modules/.package-lock.json) has the version and integrity
  # the committed lock pins, naming any that differs.
  (cd "$DEST/node" && npm install --no-audit --no-fund --ignore-scripts --loglevel=error)
  "$PYTHON" "$HERE/verify_install.py" npm "$HERE/package-lock.json" "$DEST/node/node_modules/.package-lock.json"
  echo "$node_sum" >"$DEST/node/.cg-stamp"
fi
echo "run.sh: python mcp $("$DEST/venv/bin/python" -c 'import importlib.metadata as m; print(m.version("mcp"))'),"\
  "inspector $("$INSPECTOR" --version 2>/dev/null | head -1), node $(node --version)"
[ "$INSTALL_ONLY" = 1 ] && exit 0

# --- run ---------------------------------------------------------------------------------------
if [ ${#SERVER[@]} -gt 0 ]; then
  PY_TARGET=(-- "${SERVER[@]}")
  INS_TARGET=(-- "${SERVER[@]}")
else
  [ -n "$CONFIG" ] || { echo "run.sh: --config FILE is required" >&2; exit 2; }
  CONFIG="$(abspath "$CONFIG")"
  CAJAGUARD="$(abspath "$CAJAGUARD")"
  [ -f "$CONFIG" ] || { echo "run.sh: no config at $CONFIG" >&2; exit 2; }
  [ -x "$CAJAGUARD" ] || { echo "run.sh: no cajaguard binary at $CAJAGUARD (cargo build -p cajaguard)" >&2; exit 2; }
  PY_TARGET=(--config "$CONFIG" --cajaguard "$CAJAGUARD")
  INS_TARGET=(--config "$CONFIG" --cajaguard "$CAJAGUARD")
fi

LOG="$(mktemp "${TMPDIR:-/tmp}/cg-clients.XXXXXX")"
SERVE_DIR="" SERVE_CONFIG="" SERVE_PID=""
cleanup() {
  if [ -n "$SERVE_PID" ]; then kill -KILL "$SERVE_PID" 2>/dev/null || true; fi
  rm -f "$LOG" "$LOG".*
  [ -z "$SERVE_CONFIG" ] || rm -f "$SERVE_CONFIG"
  [ -z "$SERVE_DIR" ] || rm -rf "$SERVE_DIR"
}
trap cleanup EXIT
set +e
"$DEST/venv/bin/python" "$HERE/python_smoke.py" --modes "$PY_MODES" "${DIRECT[@]}" "${PY_TARGET[@]}" | tee "$LOG.py"
bash "$HERE/inspector_smoke.sh" --inspector "$INSPECTOR" --eras "$INSPECTOR_ERAS" "${DIRECT[@]}" "${INS_TARGET[@]}" | tee "$LOG.ins"
set -e
LOGS=("$LOG.py" "$LOG.ins")

# --- the service: the same clients over Streamable HTTP against `cajaguard serve` -------------
# serve_check NAME OK DETAIL: one service check, counted like a client's.
SERVE_PASSED=0 SERVE_FAILED=0
serve_check() {
  if [ "$2" = 1 ]; then
    echo "PASS service $1${3:+ ($3)}"; SERVE_PASSED=$((SERVE_PASSED + 1))
  else
    echo "FAIL service $1: $3"; SERVE_FAILED=$((SERVE_FAILED + 1))
    [ -s "$SERVE_DIR/serve.log" ] && tail -n 20 "$SERVE_DIR/serve.log" | sed 's/^/    serve: /'
  fi
  return 0
}
run_service() {
  SERVE_DIR="$(mktemp -d "${TMPDIR:-/tmp}/cg-serve.XXXXXX")"
  local port token waited=0
  port="$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  SERVE_CONFIG="$(dirname "$CONFIG")/.cajaguard-serve.$$.json"
  "$PYTHON" - "$CONFIG" "$SERVE_CONFIG" "$SERVE_DIR/home" "127.0.0.1:$port" <<'PY'
import json, sys
src, dst, home, listen = sys.argv[1:]
with open(src, encoding="utf-8") as f:
    config = json.load(f)
config["home"] = home
config.setdefault("serve", {})["listen"] = listen
with open(dst, "x", encoding="utf-8") as f:
    json.dump(config, f, indent=2)
PY
  echo "== the service: cajaguard serve --config $SERVE_CONFIG (listen 127.0.0.1:$port, home $SERVE_DIR/home)"
  if ! token="$("$CAJAGUARD" agent add smoke --config "$SERVE_CONFIG" 2>"$SERVE_DIR/agent.err")" \
    || ! [[ "$token" =~ ^cg_agent_[A-Za-z0-9_-]+$ ]]; then
    serve_check listening 0 "cajaguard agent add smoke printed no token: $(head -c 400 "$SERVE_DIR/agent.err")"
    return
  fi
  "$CAJAGUARD" serve --config "$SERVE_CONFIG" </dev/null >"$SERVE_DIR/serve.out" 2>"$SERVE_DIR/serve.log" &
  SERVE_PID=$!
  until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
    if ! kill -0 "$SERVE_PID" 2>/dev/null; then
      wait "$SERVE_PID"; local rc=$?
      SERVE_PID=""
      serve_check listening 0 "cajaguard serve exited ($rc) before listening"
      return
    fi
    if [ "$waited" -ge 300 ]; then serve_check listening 0 "nothing listens on 127.0.0.1:$port after 30 s"; return; fi
    sleep 0.1; waited=$((waited + 1))
  done
  serve_check listening 1 "http://127.0.0.1:$port/mcp, agent smoke"
  local url="http://127.0.0.1:$port/mcp"
  CG_AGENT_TOKEN="$token" "$DEST/venv/bin/python" "$HERE/python_smoke.py" --url "$url" --modes "$HTTP_PY_MODES" \
    --quantity 1 --blocked-product "Day pack" | tee "$LOG.pyhttp"
  CG_AGENT_TOKEN="$token" bash "$HERE/inspector_smoke.sh" --inspector "$INSPECTOR" --url "$url" --eras "$HTTP_INSPECTOR_ERAS" \
    --quantity 1 --blocked-product "Day pack" | tee "$LOG.inshttp"
  LOGS+=("$LOG.pyhttp" "$LOG.inshttp")

  # Graceful shutdown: SIGTERM, then exit 0 within 30 s.
  kill -TERM "$SERVE_PID"
  local rc="" i
  for i in $(seq 1 300); do
    kill -0 "$SERVE_PID" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$SERVE_PID" 2>/dev/null; then
    serve_check "graceful shutdown" 0 "still running 30 s after SIGTERM"
  else
    wait "$SERVE_PID"; rc=$?
    SERVE_PID=""
    if [ "$rc" = 0 ]; then serve_check "graceful shutdown" 1 "SIGTERM, exit 0"
    else serve_check "graceful shutdown" 0 "exit $rc after SIGTERM"; fi
  fi
  if "$CAJAGUARD" audit verify --config "$SERVE_CONFIG" >"$SERVE_DIR/audit.out" 2>&1; then
    serve_check "audit verify" 1 "$(head -n 1 "$SERVE_DIR/audit.out")"
  else
    serve_check "audit verify" 0 "$(head -c 600 "$SERVE_DIR/audit.out")"
  fi
}
if [ "$STDIO_ONLY" = 0 ] && [ ${#SERVER[@]} -eq 0 ]; then
  set +e
  run_service
  set -e
  echo "service: $SERVE_PASSED passed, $SERVE_FAILED failed" | tee "$LOG.serve"
  LOGS+=("$LOG.serve")
fi

passed=0 failed=0 skipped=0
for f in "${LOGS[@]}"; do
  last="$(grep -E '^[a-z-]+: [0-9]+ passed, [0-9]+ failed' "$f" | tail -1 || true)"
  rm -f "$f"
  if [ -z "$last" ]; then failed=$((failed + 1)); continue; fi   # a script died before its summary
  p="$(sed -E 's/.* ([0-9]+) passed.*/\1/' <<<"$last")"
  q="$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$last")"
  s="$(grep -oE '[0-9]+ skipped' <<<"$last" | cut -d' ' -f1 || true)"
  passed=$((passed + p)) failed=$((failed + q)) skipped=$((skipped + ${s:-0}))
done
line="clients: $passed passed, $failed failed"
[ "$skipped" -gt 0 ] && line="$line, $skipped skipped"
echo "$line"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
