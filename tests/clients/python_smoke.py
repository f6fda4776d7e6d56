#!/usr/bin/env python3
"""Smoke test: the official Python MCP SDK (2.x) drives `cajaguard mcp` over stdio, or
`cajaguard serve` over Streamable HTTP (`--url`).

For each requested protocol mode it runs three checks (four with `--blocked-product`):
  1. tools/list   - the UCP tools and `cajaguard_status` are listed, nothing else leaks;
  2. cajaguard_status - structuredContent carries `mode` and `caps`;
  3. purchase     - search_catalog -> create_checkout -> update_checkout (payment) ->
                    complete_checkout for 2 x "Trail socks"; the result is not an error,
                    its status is `completed` and `_meta.cajaguard.verdict == "allow"`;
  +  blocked      - (`--blocked-product P`, run before the purchase) the same for 1 x P, whose
                    `complete_checkout` must be refused: isError, `blocked` / `pending_approval`.

Over HTTP (`--url http://HOST:PORT/mcp`) the client is the SDK's own
`mcp.client.streamable_http.streamable_http_client` on an httpx2 client whose every request
carries `Authorization: Bearer <token>`, the token read from `$CG_AGENT_TOKEN` (`--bearer-env`).
Each mode then also opens a client with a token the gate never made: it must fail, and the error
the SDK raises must carry the gate's reason ("a valid bearer token is needed ..."). The final
line then starts `python-http:`.

Modes (`--modes`, comma separated):
  auto        the SDK default: probes `server/discover` and uses 2026-07-28 if the server
              answers it (against the proxy we assert that it did), else `initialize`;
  legacy      forces the `initialize` handshake (the SDK offers 2025-11-25);
  2026-07-28  adopts the 2026-07-28 per-request envelope directly, without a probe.

The child gets only the environment the SDK passes by default (HOME, LOGNAME, PATH, SHELL,
TERM, USER on POSIX), exactly like a real MCP host.

`--direct-shop` (for developing this script only) talks to a bare UCP server given after
`--`: the checks that need the proxy (`cajaguard_status`, `_meta.cajaguard`, the tool
allowlist, the modern-era assertion) are skipped and reported as skipped.

Final line: `python-sdk: N passed, M failed` (plus `, K skipped` when any were skipped);
the exit status is non-zero when any check failed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import traceback
import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

UCP_TOOLS = {
    "create_checkout", "get_checkout", "update_checkout", "complete_checkout", "cancel_checkout",
    "create_cart", "get_cart", "update_cart", "cancel_cart",
    "search_catalog", "lookup_catalog", "get_product", "get_order",
}
PROXY_TOOLS = {"cajaguard_status", "cajaguard_approval_status", "cajaguard_freeze"}
MODERN = "2026-07-28"
AGENT_PROFILE = "https://agent.example/profile"


class Skip(Exception):
    """A whole check that does not apply (only with --direct-shop)."""


class PartSkipped(Exception):
    """The check passed, but its proxy-only part was skipped (only with --direct-shop)."""


def describe(e: BaseException) -> str:
    while isinstance(e, BaseExceptionGroup) and len(e.exceptions) == 1:
        e = e.exceptions[0]
    return f"{type(e).__name__}: {e}"


class Tally:
    def __init__(self, label: str) -> None:
        self.label = label
        self.passed = self.failed = self.skipped = 0

    def line(self) -> str:
        s = f"{self.label}: {self.passed} passed, {self.failed} failed"
        return s + (f", {self.skipped} skipped" if self.skipped else "")


def meta(with_key: bool = True) -> dict[str, Any]:
    m: dict[str, Any] = {"ucp-agent": {"profile": AGENT_PROFILE}}
    if with_key:
        m["idempotency-key"] = str(uuid.uuid4())
    return m


def text_of(result: Any) -> str:
    parts = []
    for block in result.content or []:
        t = getattr(block, "text", None)
        if t is not None:
            parts.append(t)
    return "\n".join(parts)


def structured(result: Any, what: str) -> dict[str, Any]:
    """structuredContent of a tool result, falling back to its JSON text content."""
    if result.is_error:
        raise AssertionError(f"{what}: tool result isError=true: {text_of(result)[:800]}")
    sc = result.structured_content
    if sc is None:
        try:
            sc = json.loads(text_of(result))
        except ValueError as e:
            raise AssertionError(f"{what}: no structuredContent and text is not JSON: {text_of(result)[:300]}") from e
    if not isinstance(sc, dict):
        raise AssertionError(f"{what}: structuredContent is not an object: {sc!r}"[:500])
    return sc


def pick_item_id(search: dict[str, Any], title: str) -> str:
    products = search.get("products") or []
    for p in products:
        if str(p.get("title", "")).lower() == title.lower():
            break
    else:
        if not products:
            raise AssertionError(f"search_catalog found no products for {title!r}: {json.dumps(search)[:500]}")
        p = products[0]
    variants = p.get("variants") or []
    if variants and isinstance(variants[0], dict) and variants[0].get("id"):
        return str(variants[0]["id"])
    return str(p["id"])


async def list_all_tools(client: Client) -> list[Any]:
    tools: list[Any] = []
    cursor = None
    for _ in range(50):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools
    raise AssertionError("tools/list: more than 50 pages")


async def check_tools(client: Client, args: argparse.Namespace, mode: str) -> None:
    proto = client.protocol_version
    print(f"  [{mode}] negotiated protocol version {proto}")
    if mode == "auto" and proto != MODERN and not args.direct_shop:
        raise AssertionError(f"mode auto negotiated {proto}, expected {MODERN} (the proxy must answer server/discover)")
    if mode == "legacy" and proto == MODERN:
        raise AssertionError("mode legacy negotiated 2026-07-28")
    names = {t.name for t in await list_all_tools(client)}
    print(f"  [{mode}] tools: {', '.join(sorted(names))}")
    for required in ("complete_checkout", "search_catalog", "create_checkout", "update_checkout"):
        if required not in names:
            raise AssertionError(f"tools/list lacks {required}")
    for hidden in args.hidden_tool:
        if hidden in names:
            raise AssertionError(f"tools/list shows hidden tool {hidden}")
    if args.direct_shop:
        raise PartSkipped("cajaguard_status presence and the tool allowlist (direct shop)")
    if "cajaguard_status" not in names:
        raise AssertionError("tools/list lacks cajaguard_status")
    leaked = names - UCP_TOOLS - PROXY_TOOLS
    if leaked:
        raise AssertionError(f"tools/list shows non-UCP tools: {sorted(leaked)}")


async def check_status(client: Client, args: argparse.Namespace, mode: str) -> None:
    if args.direct_shop:
        raise Skip("cajaguard_status (direct shop)")
    r = await client.call_tool("cajaguard_status", {})
    sc = structured(r, "cajaguard_status")
    for key in ("mode", "caps"):
        if key not in sc:
            raise AssertionError(f"cajaguard_status structuredContent lacks {key!r}: {json.dumps(sc)[:500]}")
    print(f"  [{mode}] cajaguard_status mode={sc['mode']} caps={sorted(sc['caps'])}")


async def ready_checkout(client: Client, args: argparse.Namespace, mode: str, product: str, quantity: int) -> tuple[str, dict[str, Any]]:
    """search_catalog -> create_checkout -> update_checkout (payment): the checkout id and the instrument."""
    r = await client.call_tool("search_catalog", {"meta": meta(False), "catalog": {"query": product}})
    item_id = pick_item_id(structured(r, "search_catalog"), product)

    r = await client.call_tool(
        "create_checkout",
        {"meta": meta(), "checkout": {"line_items": [{"item": {"id": item_id}, "quantity": quantity}]}},
    )
    co = structured(r, "create_checkout")
    checkout_id = co["id"]
    print(f"  [{mode}] checkout {checkout_id} status={co.get('status')} item={item_id} x{quantity}")

    instrument = {
        "id": "pi_1",
        "handler_id": args.handler,
        "type": "card",
        "credential": {"type": "token", "token": args.token},
    }
    # UCP update_checkout replaces the checkout: line_items are required again.
    line_items = [
        {"id": li["id"], "item": {"id": li["item"]["id"]}, "quantity": li["quantity"]}
        for li in co.get("line_items") or []
        if isinstance(li, dict) and li.get("id") and isinstance(li.get("item"), dict)
    ] or [{"item": {"id": item_id}, "quantity": quantity}]
    r = await client.call_tool(
        "update_checkout",
        {
            "meta": meta(),
            "id": checkout_id,
            "checkout": {"line_items": line_items, "payment": {"instruments": [instrument]}},
        },
    )
    co = structured(r, "update_checkout")
    print(f"  [{mode}] after update status={co.get('status')}")
    return checkout_id, instrument


async def complete(client: Client, checkout_id: str, instrument: dict[str, Any]) -> Any:
    return await client.call_tool(
        "complete_checkout",
        {
            "meta": {"ucp-agent": {"profile": AGENT_PROFILE}, "idempotency-key": str(uuid.uuid4())},
            "id": checkout_id,
            "checkout": {"payment": {"instruments": [instrument]}},
        },
    )


async def check_purchase(client: Client, args: argparse.Namespace, mode: str) -> None:
    checkout_id, instrument = await ready_checkout(client, args, mode, args.product, args.quantity)
    r = await complete(client, checkout_id, instrument)
    result_meta = r.meta or {}
    co = structured(r, "complete_checkout")
    if co.get("status") != "completed":
        raise AssertionError(f"complete_checkout status={co.get('status')!r}: {json.dumps(co)[:600]}")
    verdict = (result_meta.get("cajaguard") or {}).get("verdict")
    print(f"  [{mode}] completed; _meta.cajaguard={json.dumps(result_meta.get('cajaguard'))}")
    if args.direct_shop:
        raise PartSkipped("_meta.cajaguard.verdict (direct shop)")
    if verdict != "allow":
        raise AssertionError(f"_meta.cajaguard.verdict={verdict!r}, expected 'allow'; _meta={json.dumps(result_meta)[:500]}")


async def check_blocked(client: Client, args: argparse.Namespace, mode: str) -> None:
    """A payment over the approval threshold: refused as blocked / pending_approval (isError)."""
    checkout_id, instrument = await ready_checkout(client, args, mode, args.blocked_product, 1)
    r = await complete(client, checkout_id, instrument)
    if not r.is_error:
        raise AssertionError(f"complete_checkout of {args.blocked_product!r} was not refused: {text_of(r)[:600]}")
    gate = (r.structured_content or {}).get("cajaguard") or {}
    print(f"  [{mode}] refused; cajaguard={json.dumps({k: gate.get(k) for k in ('verdict', 'reason', 'request_id')})}")
    if (gate.get("verdict"), gate.get("reason")) != ("blocked", "pending_approval"):
        raise AssertionError(f"expected blocked / pending_approval, got {json.dumps(gate)[:600]}")


CHECKS = [("tools/list", check_tools), ("cajaguard_status", check_status), ("purchase", check_purchase)]


def checks(args: argparse.Namespace) -> list[tuple[str, Any]]:
    # The refused payment goes first: it needs its whole amount free in the window.
    blocked = [("blocked", check_blocked)] if args.blocked_product else []
    return CHECKS[:2] + blocked + CHECKS[2:]


@contextlib.asynccontextmanager
async def http_transport(url: str, token: str, timeout: float) -> AsyncIterator[Any]:
    """The SDK's streamable HTTP client, its requests carrying `Authorization: Bearer <token>`."""
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(timeout)) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            yield streams


WRONG_TOKEN = "cg_agent_not_a_token_of_this_gate_0000"


async def check_wrong_token(mode: str, args: argparse.Namespace, tally: Tally) -> None:
    """Over HTTP: a token the gate does not know is refused, and the SDK shows the gate's reason."""
    label = f"{args.label}[{mode}] wrong token"
    try:
        with anyio.fail_after(args.timeout * 2):
            async with Client(http_transport(args.url, WRONG_TOKEN, args.timeout), mode=mode,
                              read_timeout_seconds=args.timeout) as client:
                await client.list_tools()
    except Exception as e:  # noqa: BLE001 - the refusal is what this check wants
        why = describe(e)
        if "bearer token" in why:
            tally.passed += 1
            print(f"PASS {label} ({why[:160]})")
        else:
            tally.failed += 1
            print(f"FAIL {label}: refused, but the error does not say why: {why[:400]}")
        return
    tally.failed += 1
    print(f"FAIL {label}: tools/list succeeded with a token the gate never made")


async def run_mode(mode: str, target: Any, args: argparse.Namespace, tally: Tally) -> None:
    label = f"{args.label}[{mode}]"
    done = 0
    todo = checks(args)
    server = http_transport(args.url, args.bearer, args.timeout) if args.url else target
    try:
        async with Client(server, mode=mode, read_timeout_seconds=args.timeout) as client:
            for name, fn in todo:
                try:
                    with anyio.fail_after(args.timeout * 4):
                        await fn(client, args, mode)
                    tally.passed += 1
                    print(f"PASS {label} {name}")
                except PartSkipped as s:
                    tally.passed += 1
                    print(f"PASS {label} {name} (skipped: {s})")
                except Skip as s:
                    tally.skipped += 1
                    print(f"SKIP {label} {name}: {s}")
                except Exception as e:  # noqa: BLE001 - report and go on with the next check
                    tally.failed += 1
                    print(f"FAIL {label} {name}: {describe(e)}")
                    if args.verbose:
                        traceback.print_exc()
                done += 1
    except Exception as e:  # noqa: BLE001 - connect or teardown failed
        print(f"FAIL {label} session: {describe(e)}")
        if args.verbose:
            traceback.print_exc()
        tally.failed += max(len(todo) - done, 1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", help="cajaguard config file")
    ap.add_argument("--cajaguard", help="path to the cajaguard binary")
    ap.add_argument("--modes", default="auto,legacy", help="comma list of auto, legacy, 2026-07-28")
    ap.add_argument("--direct-shop", action="store_true", help="testing only: server after -- is a bare UCP shop")
    ap.add_argument("--product", default="Trail socks")
    ap.add_argument("--quantity", type=int, default=2)
    ap.add_argument("--handler", default="fixture_test_handler")
    ap.add_argument("--token", default="cg_test_demo_token_01")
    ap.add_argument("--hidden-tool", action="append", default=[], help="a tool that must not be listed")
    ap.add_argument("--blocked-product", help="also pay 1 x this product and expect blocked / pending_approval")
    ap.add_argument("--url", help="the service's MCP endpoint (`cajaguard serve`): use streamable HTTP, not stdio")
    ap.add_argument("--bearer-env", default="CG_AGENT_TOKEN", help="with --url: the variable holding the agent token")
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("server", nargs="*", help="after --: server command (overrides --cajaguard/--config)")
    args = ap.parse_args()

    if args.url:
        args.label = "python-http"
        args.bearer = os.environ.get(args.bearer_env, "")
        if not args.bearer:
            ap.error(f"--url needs the agent token in ${args.bearer_env} (`cajaguard agent add NAME` prints one)")
        print(f"{args.label}: streamable HTTP {args.url} (token from ${args.bearer_env})")
        return run_all(None, args)
    args.label = "python-sdk"
    if args.server:
        command, cmd_args = args.server[0], args.server[1:]
    else:
        if not (args.config and args.cajaguard):
            ap.error("give --config and --cajaguard, or a server command after --")
        command, cmd_args = args.cajaguard, ["mcp", "--config", args.config]
    params = StdioServerParameters(command=command, args=cmd_args)
    print(f"python-sdk: server {command} {' '.join(cmd_args)}")
    return run_all(params, args)


def run_all(params: StdioServerParameters | None, args: argparse.Namespace) -> int:
    tally = Tally(args.label)
    for mode in [m.strip() for m in args.modes.split(",") if m.strip()]:
        if args.url:
            anyio.run(check_wrong_token, mode, args, tally)
        anyio.run(run_mode, mode, params, args, tally)
    if args.direct_shop:
        print("NOTE: --direct-shop: proxy-only checks were skipped; this is not a proxy test")
    print(tally.line())
    return 1 if tally.failed or not tally.passed else 0


if __name__ == "__main__":
    sys.exit(main())
