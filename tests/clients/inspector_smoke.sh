#!/usr/bin/env bash
# Smoke test: the MCP Inspector CLI (npm @modelcontextprotocol/inspector, `--cli`) drives
# `cajaguard mcp --config FILE` over stdio, once per protocol era:
#   modern  `--protocol-era modern`: pins 2026-07-28 (server/discover, per-request _meta);
#           it fails instead of falling back if the server does not offer 2026-07-28;
#   legacy  `--protocol-era legacy`: the initialize handshake (the CLI offers 2025-11-25).
#           (Ad-hoc command runs default to legacy; we always pass the era explicitly.)
# Each era runs three checks: tools/list, cajaguard_status, and a purchase of
# 2 x "Trail socks" (search_catalog -> create_checkout -> update_checkout -> complete_checkout)
# that must complete with `_meta.cajaguard.verdict == "allow"`.
# Every Inspector call is a separate process, so each call starts a fresh proxy (and shop);
# the purchase relies on the shop keeping its state in its directory.
#
# Usage:
#   inspector_smoke.sh --inspector BIN --cajaguard BIN --config FILE [--eras modern,legacy]
#   inspector_smoke.sh --inspector BIN --direct-shop [--eras ...] -- SHOP_CMD ARGS...   (testing only)
# BIN for --inspector is node_modules/.bin/mcp-inspector. JSON is read with `node`, which the
# Inspector needs anyway. Final line: `inspector-cli: N passed, M failed[, K skipped]`.
set -u

INSPECTOR="" CAJAGUARD="" CONFIG="" ERAS="modern,legacy" DIRECT=0 VERBOSE=0
PRODUCT="Trail socks" QTY=2 HANDLER="fixture_test_handler" TOKEN="cg_test_demo_token_01"
PROFILE="https://agent.example/profile" TIMEOUT="${INSPECTOR_TIMEOUT:-60}"
SERVER=()
while [ $# -gt 0 ]; do
  case "$1" in
    --inspector) INSPECTOR="$2"; shift 2 ;;
    --cajaguard) CAJAGUARD="$2"; shift 2 ;;
    --config) CONFIG="$2"; shift 2 ;;
    --eras) ERAS="$2"; shift 2 ;;
    --direct-shop) DIRECT=1; shift ;;
    --product) PRODUCT="$2"; shift 2 ;;
    --token) TOKEN="$2"; shift 2 ;;
    -v|--verbose) VERBOSE=1; shift ;;
    --) shift; SERVER=("$@"); break ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "inspector_smoke.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$INSPECTOR" ] || { echo "inspector_smoke.sh: --inspector is required" >&2; exit 2; }
if [ ${#SERVER[@]} -eq 0 ]; then
  [ -n "$CAJAGUARD" ] && [ -n "$CONFIG" ] || { echo "inspector_smoke.sh: give --cajaguard and --config, or -- CMD" >&2; exit 2; }
  SERVER=("$CAJAGUARD" mcp --config "$CONFIG")
fi
command -v node >/dev/null || { echo "inspector_smoke.sh: node not found" >&2; exit 2; }

PASSED=0 FAILED=0 SKIPPED=0
WORK="$(mktemp -d "${TMPDIR:-/tmp}/cg-inspector.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
echo "inspector-cli: $("$INSPECTOR" --version 2>/dev/null | head -1), server: ${SERVER[*]}"

# jq-like helper: `jget FILE 'js expression over r'` prints the value (objects as JSON).
jget() {
  node -e '
    const fs = require("fs");
    let r; try { r = JSON.parse(fs.readFileSync(process.argv[1], "utf8")); } catch (e) { process.exit(3); }
    let v; try { v = (new Function("r", "return (" + process.argv[2] + ");"))(r); } catch (e) { v = undefined; }
    if (v === undefined || v === null) process.exit(1);
    process.stdout.write(typeof v === "object" ? JSON.stringify(v) : String(v));
  ' "$1" "$2"
}
# JSON builder: `jbuild 'js expression' k=v...` with the pairs as variables in scope (strings).
jbuild() {
  node -e '
    const [expr, ...pairs] = process.argv.slice(1);
    const env = {}; for (const p of pairs) { const i = p.indexOf("="); env[p.slice(0, i)] = p.slice(i + 1); }
    const f = new Function(...Object.keys(env), "return (" + expr + ");");
    process.stdout.write(JSON.stringify(f(...Object.values(env))));
  ' "$@"
}
uuid() { node -e 'process.stdout.write(require("crypto").randomUUID())'; }

# inspect ERA OUTFILE ARGS... : runs one Inspector CLI call, JSON result on OUTFILE, stderr kept beside it.
inspect() {
  local era="$1" out="$2"; shift 2
  local rc=0 quiet=-q
  [ "$VERBOSE" = 1 ] && quiet=""   # -q also hides the server's own stderr
  timeout "$TIMEOUT" "$INSPECTOR" --cli --protocol-era "$era" --format json $quiet "$@" -- "${SERVER[@]}" \
    >"$out" 2>"$out.err" || rc=$?
  if [ "$VERBOSE" = 1 ] || [ $rc -ne 0 ]; then
    echo "  [$era] inspector $* -> exit $rc" >&2
    [ -s "$out.err" ] && sed 's/^/    stderr: /' "$out.err" | head -20 >&2
  fi
  return $rc
}

fail() { echo "FAIL inspector-cli[$ERA] $CHECK: $*"; FAILED=$((FAILED + 1)); }
pass() { echo "PASS inspector-cli[$ERA] $CHECK${1:+ ($1)}"; PASSED=$((PASSED + 1)); }
skip() { echo "SKIP inspector-cli[$ERA] $CHECK: $*"; SKIPPED=$((SKIPPED + 1)); }
meta_json() { jbuild '{"ucp-agent": {"profile": p}, "idempotency-key": k}' p="$PROFILE" k="$(uuid)"; }

check_tools() {
  CHECK="tools/list"
  local out="$WORK/$ERA-tools.json"
  inspect "$ERA" "$out" --method tools/list || { fail "inspector exited non-zero: $(head -c 400 "$out.err")"; return; }
  local names
  names="$(jget "$out" 'r.result.tools.map(t => t.name).sort().join(" ")')" || { fail "no tools in $(head -c 300 "$out")"; return; }
  echo "  [$ERA] tools: $names"
  for t in complete_checkout search_catalog create_checkout update_checkout; do
    case " $names " in *" $t "*) ;; *) fail "tools/list lacks $t"; return ;; esac
  done
  if [ "$DIRECT" = 1 ]; then pass "skipped: cajaguard_status presence and the tool allowlist (direct shop)"; return; fi
  case " $names " in *" cajaguard_status "*) ;; *) fail "tools/list lacks cajaguard_status"; return ;; esac
  local leaked
  leaked="$(jget "$out" 'r.result.tools.map(t => t.name).filter(n => ![
      "create_checkout","get_checkout","update_checkout","complete_checkout","cancel_checkout",
      "create_cart","get_cart","update_cart","cancel_cart","search_catalog","lookup_catalog",
      "get_product","get_order","cajaguard_status","cajaguard_approval_status","cajaguard_freeze"].includes(n)).join(" ")')"
  [ -z "$leaked" ] || { fail "tools/list shows non-UCP tools: $leaked"; return; }
  pass
}

check_status() {
  CHECK="cajaguard_status"
  if [ "$DIRECT" = 1 ]; then skip "cajaguard_status (direct shop)"; return; fi
  local out="$WORK/$ERA-status.json"
  inspect "$ERA" "$out" --method tools/call --tool-name cajaguard_status --tool-args-json '{}' \
    || { fail "inspector exited non-zero: $(head -c 400 "$out"; head -c 400 "$out.err")"; return; }
  local mode caps
  mode="$(jget "$out" 'r.result.structuredContent.mode')" || { fail "structuredContent lacks mode: $(head -c 400 "$out")"; return; }
  caps="$(jget "$out" 'Object.keys(r.result.structuredContent.caps).join(",")')" || { fail "structuredContent lacks caps"; return; }
  echo "  [$ERA] cajaguard_status mode=$mode caps=$caps"
  pass
}

check_purchase() {
  CHECK="purchase"
  local out="$WORK/$ERA-search.json" args item checkout status line_items instrument
  args="$(jbuild '{"meta": {"ucp-agent": {"profile": p}}, "catalog": {"query": q}}' p="$PROFILE" q="$PRODUCT")"
  inspect "$ERA" "$out" --method tools/call --tool-name search_catalog --tool-args-json "$args" \
    || { fail "search_catalog: $(head -c 400 "$out")"; return; }
  item="$(jget "$out" '(() => { const ps = r.result.structuredContent.products;
      const p = ps.find(p => String(p.title).toLowerCase() === '"$(jbuild 'q.toLowerCase()' q="$PRODUCT")"') || ps[0];
      return (p.variants && p.variants[0] && p.variants[0].id) || p.id; })()')" \
    || { fail "search_catalog found no product: $(head -c 400 "$out")"; return; }

  out="$WORK/$ERA-create.json"
  args="$(jbuild '{"meta": JSON.parse(m), "checkout": {"line_items": [{"item": {"id": i}, "quantity": Number(n)}]}}' \
    m="$(meta_json)" i="$item" n="$QTY")"
  inspect "$ERA" "$out" --method tools/call --tool-name create_checkout --tool-args-json "$args" \
    || { fail "create_checkout: $(head -c 400 "$out")"; return; }
  checkout="$(jget "$out" 'r.result.structuredContent.id')" || { fail "create_checkout gave no id: $(head -c 400 "$out")"; return; }
  line_items="$(jget "$out" '(r.result.structuredContent.line_items || []).filter(li => li.id && li.item)
      .map(li => ({id: li.id, item: {id: li.item.id}, quantity: li.quantity}))')" || line_items='[]'
  [ "$line_items" != "[]" ] || line_items="$(jbuild '[{"item": {"id": i}, "quantity": Number(n)}]' i="$item" n="$QTY")"
  echo "  [$ERA] checkout $checkout item=$item"

  instrument="$(jbuild '{"id": "pi_1", "handler_id": h, "type": "card", "credential": {"type": "token", "token": t}}' \
    h="$HANDLER" t="$TOKEN")"
  out="$WORK/$ERA-update.json"
  args="$(jbuild '{"meta": JSON.parse(m), "id": c, "checkout": {"line_items": JSON.parse(l), "payment": {"instruments": [JSON.parse(pi)]}}}' \
    m="$(meta_json)" c="$checkout" l="$line_items" pi="$instrument")"
  inspect "$ERA" "$out" --method tools/call --tool-name update_checkout --tool-args-json "$args" \
    || { fail "update_checkout: $(head -c 400 "$out")"; return; }
  echo "  [$ERA] after update status=$(jget "$out" 'r.result.structuredContent.status')"

  out="$WORK/$ERA-complete.json"
  args="$(jbuild '{"meta": JSON.parse(m), "id": c, "checkout": {"payment": {"instruments": [JSON.parse(pi)]}}}' \
    m="$(meta_json)" c="$checkout" pi="$instrument")"
  inspect "$ERA" "$out" --method tools/call --tool-name complete_checkout --tool-args-json "$args" \
    || { fail "complete_checkout (exit non-zero, isError?): $(head -c 600 "$out")"; return; }
  [ "$(jget "$out" 'r.result.isError === true')" != "true" ] || { fail "complete_checkout isError: $(head -c 600 "$out")"; return; }
  status="$(jget "$out" 'r.result.structuredContent.status')"
  [ "$status" = "completed" ] || { fail "complete_checkout status=$status: $(head -c 600 "$out")"; return; }
  local verdict
  verdict="$(jget "$out" 'r.result._meta.cajaguard.verdict')"
  echo "  [$ERA] completed; _meta.cajaguard=$(jget "$out" 'r.result._meta.cajaguard' || echo null)"
  if [ "$DIRECT" = 1 ]; then pass "skipped: _meta.cajaguard.verdict (direct shop)"; return; fi
  [ "$verdict" = "allow" ] || { fail "_meta.cajaguard.verdict=${verdict:-absent}, expected allow"; return; }
  pass
}

IFS=',' read -r -a ERA_LIST <<<"$ERAS"
for ERA in "${ERA_LIST[@]}"; do
  case "$ERA" in modern|legacy|auto) ;; *) echo "inspector_smoke.sh: unknown era $ERA" >&2; exit 2 ;; esac
  check_tools
  check_status
  check_purchase
done
[ "$DIRECT" = 1 ] && echo "NOTE: --direct-shop: proxy-only checks were skipped; this is not a proxy test"
line="inspector-cli: $PASSED passed, $FAILED failed"
[ "$SKIPPED" -gt 0 ] && line="$line, $SKIPPED skipped"
echo "$line"
[ "$FAILED" -eq 0 ] && [ "$PASSED" -gt 0 ]
