//! `cajaguard-demo`: a demo shopping agent that buys through CajaGuard.
//!
//! It is an MCP client that starts `cajaguard mcp --config FILE` (the `cajaguard` next to this
//! executable, else on `PATH`, else `--proxy-command PATH`) and drives the UCP tools through it:
//!
//! - `buy "<product>" [qty] [--token T] [--handler H]`: `search_catalog`, `create_checkout`,
//!   `update_checkout` with a payment instrument, then `complete_checkout` with a fresh
//!   idempotency key and `checkout: {payment}` only;
//! - `pay <checkout id> [--token T] [--handler H] [--idempotency-key K]`: `get_checkout`, then
//!   `complete_checkout`.
//!
//! One line per step goes to stdout, then the verdict, reason, request id, checkout id and the
//! next command for the human. Exit codes: 0 the order completed, 3 refused by CajaGuard
//! (blocked or denied), 4 the shop declined or failed, 2 usage, 1 anything unexpected.
//! The hidden `--direct-shop STATE_DIR` talks to `cajaguard-fixture-shop --state STATE_DIR`
//! directly, without the proxy (for tests). Like the fixture shop, the demo does not depend on
//! `cajaguard-core`. Logs go to stderr.

mod mcp;
mod run;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// What the fixture shop sells (SPEC §9), so `buy --help` shows what can be bought. Kept here by
/// hand: the demo does not depend on the fixture's code, as it must not share its reading of UCP.
const FIXTURE_PRODUCTS: &str = "\
Products of the fixture shop (cajaguard-fixture-shop):
  demo-outfitters.example  USD  Trail socks 12.00, Rain shell 45.00, Day pack 89.00, Down parka 219.00
  tokyo-tea.example        JPY  Sencha tin 1800, Tea set 9800
  elsewhere-goods.example  USD  Camp stove 79.00 (not on the demo allowlist)
  sloppy-units.example     USD  Water bottle (reports 49.99 in major units: a broken shop)";

pub const DEFAULT_TOKEN: &str = "cg_test_demo_token_01";
pub const DEFAULT_HANDLER: &str = "fixture_test_handler";

#[derive(Debug, Parser)]
#[command(
    name = "cajaguard-demo",
    version,
    about = "A demo shopping agent that buys through CajaGuard"
)]
pub struct Cli {
    /// CajaGuard config file, passed to `cajaguard mcp --config FILE`.
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The `cajaguard` executable to start (default: next to this program, then on PATH).
    #[arg(long, global = true, value_name = "PATH")]
    pub proxy_command: Option<PathBuf>,
    /// Development: talk to `cajaguard-fixture-shop --state STATE_DIR` directly, without CajaGuard.
    #[arg(long, global = true, hide = true, value_name = "STATE_DIR")]
    pub direct_shop: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Search for a product, put it in a checkout, add a payment instrument and pay.
    #[command(after_help = FIXTURE_PRODUCTS)]
    Buy {
        /// Product name to search for (case-insensitive), e.g. "Trail socks".
        product: String,
        /// How many to buy.
        #[arg(default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
        qty: u64,
        #[command(flatten)]
        payment: PaymentArgs,
    },
    /// Pay an existing checkout (for example after a human approved it).
    Pay {
        /// Checkout id, e.g. gid://fixture/Checkout/1.
        checkout_id: String,
        #[command(flatten)]
        payment: PaymentArgs,
        /// Idempotency key for complete_checkout (default: a fresh UUID v4); reuse it to retry.
        #[arg(long, value_name = "K")]
        idempotency_key: Option<String>,
    },
}

#[derive(Debug, clap::Args)]
pub struct PaymentArgs {
    /// Payment token (a test token in test mode).
    #[arg(long, value_name = "T", default_value = DEFAULT_TOKEN)]
    pub token: String,
    /// Payment handler id.
    #[arg(long, value_name = "H", default_value = DEFAULT_HANDLER)]
    pub handler: String,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cajaguard-demo: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    ExitCode::from(runtime.block_on(run::run(cli)) as u8)
}
