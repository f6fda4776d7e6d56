//! MCP as an agent sees it: get_checkout round trips straight to a shop and through
//! `cajaguard mcp` (the test shop answering from memory, and the fsyncing fixture), and the cold
//! start of `cajaguard mcp`.

use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Result, bail};
use cajaguard_harness::{Bins, Mcp, Options, completed, get_args, shop_checkout, test_shop_script};
use serde_json::json;

use super::{Sizes, Timing};
use crate::scenarios::test_shop_world;
use crate::stats::{Summary, time_n};
use cajaguard_harness::spec::Setup;

pub(super) fn round_trip(mcp: &mut Mcp, id: &str, n: usize) -> Result<Vec<Duration>> {
    let args = get_args(id);
    time_n(n, || {
        let result = mcp.call("get_checkout", args.clone());
        if result["isError"] == json!(true) {
            bail!("get_checkout failed");
        }
        Ok(result)
    })
}

pub(super) fn round_trip_rows(t: &mut Timing, setup: &Setup, sizes: Sizes) -> Result<()> {
    let bins = Bins::here();
    // The test shop answers from memory: the difference is the proxy's own cost.
    let ready = shop_checkout("Trail socks", 1200, 2, "ready_for_complete");
    let script = test_shop_script(&ready, vec![completed(&ready)]);
    let proxied = test_shop_world(setup, Options::default(), &ready, vec![completed(&ready)]);
    let mut direct = {
        let script_path = proxied.dir.path().join("direct-script.json");
        std::fs::write(&script_path, script.to_string())?;
        let mut command = Command::new(&bins.test_shop);
        command
            .stderr(Stdio::null())
            .arg("--script")
            .arg(&script_path)
            .arg("--record")
            .arg(proxied.dir.path().join("direct-record.jsonl"));
        Mcp::initialized(command)
    };
    let mut through = proxied.proxy();
    let id = "gid://fixture/Checkout/1";
    // Interleaved in blocks so that drift on a shared machine hits both alike.
    let mut direct_samples = Vec::new();
    let mut proxy_samples = Vec::new();
    let blocks = 10;
    for _ in 0..blocks {
        direct_samples.extend(round_trip(&mut direct, id, sizes.round_trip / blocks)?);
        proxy_samples.extend(round_trip(&mut through, id, sizes.round_trip / blocks)?);
    }
    let direct_summary = Summary::of(&direct_samples);
    let proxy_summary = Summary::of(&proxy_samples);
    t.push(
        "rtt_direct_test_shop",
        "MCP round trip, get_checkout straight to the shop (test shop, answers from memory)",
        direct_summary,
        "pipe",
    );
    t.push(
        "rtt_proxy_test_shop",
        "MCP round trip, get_checkout through `cajaguard mcp` (same shop)",
        proxy_summary,
        "pipe",
    );
    let row = t.push(
        "proxy_added",
        "proxy added latency (through minus straight, per percentile)",
        proxy_summary.minus(&direct_summary),
        "pipe",
    );
    row.p50_at_most("<= 50 µs p50", 50_000.0);
    row.note = Some("percentile differences, not a distribution".into());
    drop(through);
    drop(direct);

    // The fixture shop: what an agent sees with the real (fsyncing) shop.
    let fixture = setup.world(Options::default());
    let mut through = fixture.proxy();
    let checkout = through.create_checkout("trail-socks", 2);
    let mut direct = {
        let mut command = Command::new(&bins.fixture);
        command
            .stderr(Stdio::null())
            .arg("--state")
            .arg(fixture.dir.path().join("shop"));
        Mcp::initialized(command)
    };
    let mut direct_samples = Vec::new();
    let mut proxy_samples = Vec::new();
    let blocks = 5;
    for _ in 0..blocks {
        direct_samples.extend(round_trip(
            &mut direct,
            &checkout,
            sizes.fixture_round_trip / blocks,
        )?);
        proxy_samples.extend(round_trip(
            &mut through,
            &checkout,
            sizes.fixture_round_trip / blocks,
        )?);
    }
    let row = t.push(
        "rtt_direct_fixture",
        "MCP round trip, get_checkout straight to the fixture shop",
        Summary::of(&direct_samples),
        "fsync",
    );
    row.note = Some("the fixture appends and fsyncs calls.jsonl on every call".into());
    t.push(
        "rtt_proxy_fixture",
        "MCP round trip, get_checkout through `cajaguard mcp` to the fixture shop",
        Summary::of(&proxy_samples),
        "fsync",
    );
    Ok(())
}

// ---- cold start ----

pub(super) fn cold_start(setup: &Setup, n: usize) -> Result<Vec<Duration>> {
    let bins = Bins::here();
    let world = setup.world(Options::default());
    // The home exists (as it would after the first run): the cold start is the process's.
    drop(world.proxy());
    time_n(n, || {
        let mut command = Command::new(&bins.cajaguard);
        command
            .stderr(Stdio::null())
            .args(["mcp", "--config"])
            .arg(&world.config)
            .env("HOME", world.dir.path());
        let mut mcp = Mcp::initialized(command);
        let tools = mcp.request("tools/list", json!({}));
        let listed = tools["result"]["tools"].as_array().map_or(0, Vec::len);
        if listed < 13 {
            bail!("tools/list listed {listed} tools");
        }
        // Returned, so that stopping it happens after the clock stops.
        Ok(mcp)
    })
}
