#!/usr/bin/env bash
# Every test: the workspace's unit, property and end-to-end tests, then the real MCP clients (Python
# SDK and MCP Inspector, pinned, installed into target/clients) against `cajaguard mcp` in front of
# the fixture shop. Each step's closing line says what passed.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

echo "== cargo test (workspace)"
# The proxy's end-to-end tests run the test shop's binary, which `cargo test` alone does not build
# (its package has no integration tests): build every binary first.
cargo build --workspace --bins --locked --quiet
cargo test --workspace --locked

echo "== real MCP clients through cajaguard mcp"
scratch=$(mktemp -d "${TMPDIR:-/tmp}/cajaguard-clients.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/examples"
cp examples/cajaguard.demo.json "$scratch/examples/"
target/debug/cajaguard keygen --out "$scratch/.cajaguard/keys" >/dev/null
bash tests/clients/run.sh --config "$scratch/examples/cajaguard.demo.json" --cajaguard target/debug/cajaguard
