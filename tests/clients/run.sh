#!/usr/bin/env bash
# Installs the pinned real MCP clients and runs the client smoke tests against `cajaguard mcp`.
#
#   tests/clients/run.sh --config FILE [--cajaguard BIN] [--install-only]
#   tests/clients/run.sh --direct-shop -- SHOP_CMD ARGS...      (developing the scripts only)
#
# Clients (pinned): Python `mcp` (requirements.txt) in a venv, and the MCP Inspector CLI
# (package.json + package-lock.json, `npm install` with the lock), both under target/clients/
# (git-ignored; override with CG_CLIENTS_DIR). After each install, verify_install.py checks that
# what landed on this machine is exactly what is pinned and names any package that is not
# (tested offline by test_verify_install.py). Needs only the PyPI and npm registries, and only
# when the pins changed since the last install. BIN defaults to target/debug/cajaguard.
#
# Runs: python_smoke.py in modes auto (2026-07-28 via server/discover) and legacy (initialize),
# and inspector_smoke.sh in eras modern and legacy: 4 x 3 checks, 4 purchases of 2 x Trail socks
# (USD 24.00 each, USD 96.00 in all), so give it a config whose home has that much window left.
# Last line: `clients: N passed, M failed`; exit status non-zero if any check failed.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
DEST="${CG_CLIENTS_DIR:-$ROOT/target/clients}"
PYTHON="${PYTHON:-python3}"
CONFIG="" CAJAGUARD="$ROOT/target/debug/cajaguard" INSTALL_ONLY=0 DIRECT=() SERVER=()
PY_MODES="${CG_PY_MODES:-auto,legacy}" INSPECTOR_ERAS="${CG_INSPECTOR_ERAS:-modern,legacy}"

while [ $# -gt 0 ]; do
  case "$1" in
    --config) CONFIG="$2"; shift 2 ;;
    --cajaguard) CAJAGUARD="$2"; shift 2 ;;
    --install-only) INSTALL_ONLY=1; shift ;;
    --direct-shop) DIRECT=(--direct-shop); shift ;;
    --) shift; SERVER=("$@"); break ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
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
trap 'rm -f "$LOG"' EXIT
set +e
"$DEST/venv/bin/python" "$HERE/python_smoke.py" --modes "$PY_MODES" "${DIRECT[@]}" "${PY_TARGET[@]}" | tee "$LOG.py"
bash "$HERE/inspector_smoke.sh" --inspector "$INSPECTOR" --eras "$INSPECTOR_ERAS" "${DIRECT[@]}" "${INS_TARGET[@]}" | tee "$LOG.ins"
set -e

passed=0 failed=0 skipped=0
for f in "$LOG.py" "$LOG.ins"; do
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
