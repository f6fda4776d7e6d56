#!/usr/bin/env bash
# Every test: the workspace's unit, property and end-to-end tests, then the real MCP clients (Python
# SDK and MCP Inspector, pinned, installed into target/clients) against `cajaguard mcp` in front of
# the fixture shop, over stdio and, against `cajaguard serve`, over Streamable HTTP. Each step's closing line says what passed.
#
# The shared-store (PostgreSQL) tests run against CAJAGUARD_TEST_POSTGRES_URL when it is set (CI
# sets it). Unset, a local PostgreSQL answering on 127.0.0.1:5432 (user postgres, trust auth) is
# used with a fresh database, dropped at exit; with neither, they are skipped and the last lines
# say so, because cargo's captured output would otherwise show them as `ok`.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

scratch=$(mktemp -d "${TMPDIR:-/tmp}/cajaguard-clients.XXXXXX")
test_db=""
cleanup() {
  rm -rf "$scratch"
  if [ -n "$test_db" ]; then
    psql -h 127.0.0.1 -U postgres -d postgres -qc "DROP DATABASE IF EXISTS $test_db WITH (FORCE)" >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT

postgres="skipped"
if [ -n "${CAJAGUARD_TEST_POSTGRES_URL:-}" ]; then
  postgres="the database CAJAGUARD_TEST_POSTGRES_URL names"
elif command -v psql >/dev/null \
  && PGCONNECT_TIMEOUT=3 psql -h 127.0.0.1 -U postgres -d postgres -w -qAtc 'SELECT 1' >/dev/null 2>&1; then
  test_db="cajaguard_test_$$"
  if psql -h 127.0.0.1 -U postgres -d postgres -w -v ON_ERROR_STOP=1 -qc "CREATE DATABASE $test_db" >/dev/null; then
    export CAJAGUARD_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:5432/$test_db"
    postgres="the local PostgreSQL (database $test_db, dropped at exit)"
  else
    test_db=""
  fi
fi
echo "== shared-store (PostgreSQL) tests: ${postgres}"

echo "== cargo build (every binary: the end-to-end tests run the fixture and test shops)"
cargo build --workspace --bins --locked
echo "== cargo test (workspace)"
cargo test --workspace --locked

echo "== client install check (tests/clients/verify_install.py, offline)"
python3 tests/clients/test_verify_install.py

echo "== real MCP clients through cajaguard mcp (stdio) and cajaguard serve (Streamable HTTP)"
mkdir -p "$scratch/examples"
cp examples/cajaguard.demo.json "$scratch/examples/"
target/debug/cajaguard keygen --out "$scratch/.cajaguard/keys" >/dev/null
bash tests/clients/run.sh --config "$scratch/examples/cajaguard.demo.json" --cajaguard target/debug/cajaguard

echo "== passkey approval in headless Chromium (tests/browser; SKIPPED without chromium)"
bash tests/browser/run.sh --bin target/debug

if [ "$postgres" = "skipped" ]; then
  echo "test: the shared-store (PostgreSQL) tests were SKIPPED: no CAJAGUARD_TEST_POSTGRES_URL and no"
  echo "  PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth). To run them, start one there, or set"
  echo "  CAJAGUARD_TEST_POSTGRES_URL=postgres://USER@HOST:5432/DB (a database the tests may fill) and run again."
else
  echo "test: every test passed; the shared-store tests ran against ${postgres}"
fi
