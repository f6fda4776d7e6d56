#!/usr/bin/env bash
# The passkey browser test (tests/browser/passkey_e2e.py): headless Debian Chromium with a virtual
# authenticator against `cajaguard web`. Installs the pinned `websockets` into target/browser-venv
# (only when requirements.txt changed). Without chromium it prints a SKIPPED line and exits 0.
#
#   tests/browser/run.sh [--bin target/debug] [--screenshot docs/approval-page.png]
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
if ! command -v chromium >/dev/null; then
  echo "SKIPPED: passkey browser test: chromium is not installed (apt-get install -y chromium)"
  exit 0
fi
VENV="${CG_BROWSER_VENV:-$ROOT/target/browser-venv}"
sum="$(sha256sum "$HERE/requirements.txt" | cut -d' ' -f1)"
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$VENV/.cg-stamp" 2>/dev/null)" != "$sum" ]; then
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --disable-pip-version-check -q -r "$HERE/requirements.txt"
  echo "$sum" > "$VENV/.cg-stamp"
fi
exec timeout 600 "$VENV/bin/python" "$HERE/passkey_e2e.py" "$@"
