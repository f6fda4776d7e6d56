//! `cajaguard-fixture-shop --state DIR [--listen 127.0.0.1:PORT [--bearer-token-env NAME]
//! [--port-file FILE]]`: a fixture UCP shop, an MCP server on stdio, or over MCP Streamable HTTP
//! at `http://ADDR/mcp` with `--listen` (loopback addresses only; port 0 picks a free port, printed
//! on stderr and written to `--port-file`).
//!
//! It implements the 13 tools of the pinned UCP `mcp.openrpc.json` over a fixed catalog (SPEC §9)
//! so the demo and the tests need no keys and no network. It deliberately does not depend on
//! `cajaguard-core`: a shop sharing the gate's reading of UCP would hide the gate's mistakes; its
//! answers are checked against the pinned UCP schemas instead (`tests/conformance.rs`).
//!
//! Behaviour worth knowing:
//! - Every call needs `meta.ucp-agent.profile`; `complete_checkout`, `cancel_checkout` and
//!   `cancel_cart` also need `meta.idempotency-key`. Bad calls get a UCP error response
//!   (`{"ucp": {"status": "error"}, "messages": [...]}`) as a tool result with `isError: true`.
//! - **Status**: a checkout is `ready_for_complete` as soon as it holds valid line items from one
//!   merchant (mixed merchants are refused) and every payment instrument it was given names a
//!   handler this shop offers; otherwise `incomplete`. A payment instrument is not required
//!   beforehand, because UCP sends the payment with `complete_checkout` (`ucp_request`
//!   `complete: required`) and `ready_for_complete` means "the platform may call complete".
//!   So both `create_checkout` alone and `create_checkout` + `update_checkout` with a payment
//!   instrument reach `ready_for_complete`.
//! - Payment handlers `fixture_test_handler` and `com.shopify.shop_pay`; the credential must be a
//!   token credential matching `^cg_test_[A-Za-z0-9_]{8,}$`. `cg_test_decline_0001` is declined:
//!   the checkout comes back (still `ready_for_complete`) with an error message
//!   `payment_declined` and `isError: true`.
//! - Idempotency: a call carrying `meta.idempotency-key` seen before with the same tool and
//!   arguments replays the first answer; with another body it is JSON-RPC error -32000.
//! - A completed checkout cannot be completed (or changed) again: error `checkout_completed`.
//! - `sloppy-units.example` reports amounts in major units (`49.99`), a deliberately broken shop.
//! - State lives in `DIR/state.json`; every call is appended to `DIR/calls.jsonl` as
//!   `{"tool", "arguments", "at"}` (unix ms) under the lock before it is answered, and every
//!   `initialize` to `DIR/sessions.jsonl` with the negotiated protocol version.
//!
//! Logs go to stderr; stdout is the MCP channel.

mod catalog;
mod mcp;
mod shop;
mod store;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "cajaguard-fixture-shop",
    version,
    about = "A fixture UCP shop (MCP server on stdio, or Streamable HTTP with --listen)"
)]
struct Args {
    /// Directory holding the shop's state (created if missing); several processes may share it.
    #[arg(long, value_name = "DIR")]
    state: PathBuf,
    /// Serve MCP Streamable HTTP at http://ADDR/mcp instead of stdio. Loopback addresses only:
    /// the fixture has no TLS and is not a shop anyone should reach from elsewhere.
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// Require `Authorization: Bearer <token>` with the token in this environment variable.
    #[arg(long, value_name = "NAME", requires = "listen")]
    bearer_token_env: Option<String>,
    /// Write the bound address (`127.0.0.1:PORT`) to this file once listening.
    #[arg(long, value_name = "FILE", requires = "listen")]
    port_file: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let store = match store::Store::open(&args.state) {
        Ok(store) => store,
        Err(e) => {
            eprintln!("cajaguard-fixture-shop: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cajaguard-fixture-shop: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let served = match args.listen {
        None => runtime.block_on(mcp::serve_stdio(store)),
        Some(listen) => {
            if !listen.ip().is_loopback() {
                eprintln!(
                    "cajaguard-fixture-shop: --listen {listen} is not a loopback address; use 127.0.0.1 or [::1]"
                );
                return ExitCode::from(2);
            }
            // A named variable that is unset would serve without a token: refuse instead, so a
            // typo cannot silently open the fixture.
            let token = match &args.bearer_token_env {
                None => None,
                Some(name) => match std::env::var(name) {
                    Ok(token) if !token.is_empty() => Some(token),
                    _ => {
                        eprintln!(
                            "cajaguard-fixture-shop: --bearer-token-env names ${name}, which is not set"
                        );
                        return ExitCode::from(2);
                    }
                },
            };
            let options = mcp::HttpOptions {
                listen,
                token,
                port_file: args.port_file,
            };
            runtime.block_on(mcp::serve_http(store, options))
        }
    };
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cajaguard-fixture-shop: {e:#}");
            ExitCode::from(1)
        }
    }
}
