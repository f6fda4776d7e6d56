#!/usr/bin/env bash
# The keyless quickstart, end to end: builds CajaGuard and the fixture shop, makes an approver key,
# and shops through the proxy with the demo agent. Everything lives in ./.cajaguard (fresh each run).
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --quiet --bins
bin=target/debug
config=examples/cajaguard.demo.json
export CAJAGUARD_KEY_DIR=.cajaguard/keys

# Each command is printed shell-quoted (printf %q), so a line pasted into a shell runs as shown.
step() {
  local line
  printf -v line '%q ' "$@"
  if [ -t 1 ]; then printf '\n\033[1m$ %s\033[0m\n' "${line% }"; else printf '\n$ %s\n' "${line% }"; fi
}
# Each demo step prints its verdict; a refusal exits 3, which this walkthrough expects at times.
run() { step "$@"; "$@" || echo "(exit $?)"; }

step rm -rf .cajaguard
rm -rf .cajaguard
step export CAJAGUARD_KEY_DIR="$CAJAGUARD_KEY_DIR"
run "$bin/cajaguard" keygen
run "$bin/cajaguard-demo" --config "$config" buy "Trail socks" 2
step "$bin/cajaguard-demo" --config "$config" buy "Day pack"
out=$("$bin/cajaguard-demo" --config "$config" buy "Day pack" 2>&1) || true
printf '%s\n' "$out"
request_id=$(printf '%s\n' "$out" | grep -o 'cg-[0-9a-f]\{16\}' | head -n 1)
checkout_id=$(printf '%s\n' "$out" | grep -o 'gid://fixture/Checkout/[0-9]*' | head -n 1)
if [ -z "$request_id" ] || [ -z "$checkout_id" ]; then
  echo "demo: the day pack was not blocked for approval as expected" >&2
  exit 1
fi
run "$bin/cajaguard" pending --config "$config"
run "$bin/cajaguard" approve "$request_id" --config "$config" --yes --ttl 5m --note "demo"
run "$bin/cajaguard-demo" --config "$config" pay "$checkout_id"
run "$bin/cajaguard-demo" --config "$config" pay "$checkout_id"
run "$bin/cajaguard-demo" --config "$config" buy "Trail socks" 1 --token 4111111111111111
run "$bin/cajaguard" status --config "$config"
