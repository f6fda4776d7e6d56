//! `cajaguard serve` as an agent sees it: a forwarded (not gated) `get_checkout` through the
//! service to the fixture shop over MCP Streamable HTTP, beside the same call straight to the
//! fixture's HTTP endpoint (the floor), with the same client, which does what the MCP SDKs'
//! clients do: it closes an event stream once it has the answer (so each call straight to the
//! fixture, which answers with event streams, opens a new connection), and keeps its connection to
//! the service, which answers with JSON. A breakdown row times the straight call reading each
//! stream to its end instead, as the relay does, which keeps the connection. The fixture's state
//! is on tmpfs when the machine has one, so that its fsync per call (both paths pay it alike) does
//! not drown the difference.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use cajaguard::store::{AuditRecord, Store};
use cajaguard_core::agent::AgentId;
use cajaguard_harness::service::{HttpMcp, Served, StreamEnd, add_serve};
use cajaguard_harness::{Options, SHOP_TOKEN, TOKEN_VAR, Transport, World, get_args};
use serde_json::json;

use super::{Sizes, Timing, floor_row};
use crate::stats::{Summary, time_n};

const AGENT_TOKEN: &str = "cg_agent_report_timing_0123456789abcdef";

/// Where the fixture's state goes: tmpfs when there is one, else the report's scratch.
fn fast_dir(scratch: &Path) -> (PathBuf, &'static str) {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(dir) = tempfile::Builder::new()
            .prefix("cajaguard-report-")
            .tempdir_in(shm)
    {
        return (dir.keep(), "tmpfs");
    }
    (scratch.to_path_buf(), "the report's disk")
}

fn round_trip(mcp: &mut HttpMcp, id: &str, n: usize) -> Result<Vec<std::time::Duration>> {
    let args = get_args(id);
    time_n(n, || {
        let result = mcp.call("get_checkout", args.clone());
        if result["isError"] == json!(true) {
            bail!("get_checkout failed: {result}");
        }
        Ok(result)
    })
}

pub(super) fn service_rows(t: &mut Timing, scratch: &Path, sizes: Sizes) -> Result<()> {
    let (dir, disk) = fast_dir(scratch);
    let outcome = measure(t, &dir, disk, sizes);
    if dir != scratch {
        let _ = std::fs::remove_dir_all(&dir);
    }
    outcome
}

fn measure(t: &mut Timing, dir: &Path, disk: &str, sizes: Sizes) -> Result<()> {
    let world = World::with(Options {
        transport: Transport::Http,
        scratch: Some(dir.to_path_buf()),
        quiet: true,
        ..Options::default()
    });
    let url = add_serve(&world.config, json!({}), json!({}));
    {
        let store = Store::open(&world.home)?;
        let now = time::OffsetDateTime::now_utc();
        let agent = AgentId::parse("report").map_err(|e| anyhow::anyhow!("{e}"))?;
        store.add_agent(
            &agent,
            AGENT_TOKEN,
            now,
            &AuditRecord::new(now, "agent add"),
        )?;
    }
    let served = Served::start_quiet(&world.config, &url, &[(TOKEN_VAR, SHOP_TOKEN)]);
    let Some(fixture) = &world.fixture else {
        bail!("the HTTP world has no fixture server");
    };
    let mut through = HttpMcp::connect(&served.url, AGENT_TOKEN);
    let checkout = through.create_checkout("trail-socks", 2);
    let mut direct = HttpMcp::connect(&fixture.url(), SHOP_TOKEN);
    let mut direct_kept = HttpMcp::connect_with(&fixture.url(), SHOP_TOKEN, StreamEnd::Read);

    // Interleaved in blocks so that drift on a shared machine hits all alike.
    let blocks = 10;
    let per_block = (sizes.service_round_trip / blocks).max(1);
    let mut direct_samples = Vec::new();
    let mut kept_samples = Vec::new();
    let mut service_samples = Vec::new();
    for _ in 0..blocks {
        direct_samples.extend(round_trip(&mut direct, &checkout, per_block)?);
        service_samples.extend(round_trip(&mut through, &checkout, per_block)?);
        kept_samples.extend(round_trip(&mut direct_kept, &checkout, per_block)?);
    }
    let direct_summary = Summary::of(&direct_samples);
    let service_summary = Summary::of(&service_samples);
    t.floors.push(floor_row(
        "http_fixture",
        &format!("MCP round trip, get_checkout straight to the fixture's HTTP endpoint (an SDK client's way: each event stream closed once it has the answer, so a new connection per call; fixture state on {disk})"),
        direct_summary,
    ));
    t.push(
        "rtt_service_fixture",
        "MCP round trip, get_checkout through `cajaguard serve` (agent token, Streamable HTTP) to the same fixture",
        service_summary,
        "http_fixture",
    );
    let row = t.push(
        "service_added",
        "service added latency, forwarded call (through minus straight, per percentile)",
        service_summary.minus(&direct_summary),
        "http_fixture",
    );
    row.p50_at_most("<= 150 µs p50", 150_000.0);
    row.note = Some("percentile differences, not a distribution".into());
    t.push(
        "service_direct_kept",
        "breakdown: get_checkout straight to the fixture, each event stream read to its end so that the connection is kept (the relay's own way to the fixture)",
        Summary::of(&kept_samples),
        "http_fixture",
    );

    // Where the service's share goes: a request refused before the store (no token: axum and
    // the HTTP exchange alone), and one answered by the service itself (tools/list: the token
    // confirmed from memory, since the calls above confirmed it less than a second ago; the
    // session, the proxy's dispatch on the thread that read it; no shop).
    // Its POST has an empty body: the service refuses before reading a body, and the HTTP
    // server closes a connection whose body was left unread, so a body would make the next probe
    // fail on (or reconnect) a closed connection instead of timing the exchange.
    let client = cajaguard_harness::service::client();
    let unauthorized = time_n(sizes.service_round_trip, || {
        let reply =
            cajaguard_harness::service::send_with(&client, "POST", &served.url, &[], Some(""));
        if reply.status != 401 {
            bail!("expected 401, got {}", reply.status);
        }
        Ok(reply)
    })?;
    t.push(
        "service_401",
        "breakdown: a request without a token through `cajaguard serve` (401 before the store: the HTTP exchange alone)",
        Summary::of(&unauthorized),
        "http_fixture",
    );
    let listed = time_n(sizes.service_round_trip, || {
        let reply = through.request("tools/list", json!({}));
        if reply.get("result").is_none() {
            bail!("tools/list failed: {reply}");
        }
        Ok(reply)
    })?;
    t.push(
        "service_tools_list",
        "breakdown: tools/list through `cajaguard serve` (token confirmed from memory, session, dispatch on the thread that read it; answered without the shop, 15 KB)",
        Summary::of(&listed),
        "http_fixture",
    );
    drop(through);
    drop(direct);
    drop(direct_kept);
    drop(served);
    Ok(())
}
