#!/usr/bin/env bash
# Runs every cargo-fuzz target for a bounded time (default 45 s each) on its kept corpus
# (fuzz/corpus/<target>, small seed files committed). A crash fails the run and leaves the input in
# fuzz/artifacts/<target>/. New corpus entries found during the run go to a scratch folder, so a
# CI run never dirties the checkout.
#   scripts/fuzz.sh [seconds-per-target] [target...]
# Without targets it runs every [[bin]] of fuzz/Cargo.toml: config, tripwire, normalise (the
# tripwire's normaliser), approval, jsonrpc, display (text shown to people).
# cargo-fuzz needs nightly flags: RUSTC_BOOTSTRAP=1 lets the stable toolchain accept them.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-45}"
shift || true
export RUSTC_BOOTSTRAP=1 CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "== installing cargo-fuzz (crates.io)"
  cargo install cargo-fuzz --locked --quiet
fi

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cargo fuzz list --fuzz-dir fuzz)
fi
scratch=$(mktemp -d "${TMPDIR:-/tmp}/cajaguard-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

# One build of all targets first (debug assertions on, so overflow checks and asserts fire).
echo "== cargo fuzz build"
cargo fuzz build --fuzz-dir fuzz --debug-assertions -O
for target in "${targets[@]}"; do
  mkdir -p "$scratch/$target"
  echo "== fuzz $target for ${seconds}s (corpus fuzz/corpus/$target)"
  # -max_len bounds inputs as the proxy's own limits do; -rss_limit_mb keeps memory sane on CI.
  status=0
  cargo fuzz run --fuzz-dir fuzz --debug-assertions -O "$target" "$scratch/$target" "fuzz/corpus/$target" -- \
    -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    >"$scratch/$target.log" 2>&1 || status=$?
  grep -E '^(#[0-9]+ +DONE|stat::number_of_executed_units|stat::new_units_added)' "$scratch/$target.log" || true
  if [ "$status" -ne 0 ]; then
    tail -n 40 "$scratch/$target.log" >&2
    echo "fuzz: $target failed; the crashing input is in fuzz/artifacts/$target/" >&2
    exit 1
  fi
done
echo "fuzz: ${#targets[@]} targets, ${seconds}s each, no crash"
