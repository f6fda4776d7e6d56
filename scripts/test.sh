#!/usr/bin/env bash
# Every test: the workspace's unit, property and end-to-end tests, then the real MCP clients (Python
# SDK and MCP Inspector, pinned, installed into target/clients) against `cajaguard mcp` in front of
# the fixture shop. Each step's closing line says what passed.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

echo "== cargo build (every binary: the end-to-end tests run the fixture and test shops)"
cargo build --workspace --bins --locked
echo "== cargo test (workspace)"
cargo test --workspace --locked

echo "== client install check (tests/clients/verify_install.py, offline)"
python3 tests/clients/test_verify_install.py

echo "== real MCP clients through cajaguard mcp"
scratch=$(mktemp -d "${TMPDIR:-/tmp}/cajaguard-clients.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/examples"
cp examples/cajaguard.demo.json "$scratch/examples/"
target/debug/cajaguard keygen --out "$scratch/.cajaguard/keys" >/dev/null
bash tests/clients/run.sh --config "$scratch/examples/cajaguard.demo.json" --cajaguard target/debug/cajaguard
