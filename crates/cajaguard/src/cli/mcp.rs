//! `cajaguard mcp --config FILE`: the stdio MCP server; `cajaguard mcp --connect URL [--token-env
//! VAR]`: the stdio bridge to a CajaGuard service (`bridge/`).

use super::Exit;
use std::fs::File;
use std::io::BufReader;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{Failure, Outcome};
use crate::bridge::{Bridge, Service};
use crate::proxy::{Proxy, ShopError};

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["config", "connect"])))]
pub struct Args {
    /// The CajaGuard config file (JSON): serve the gate itself, in front of its shop.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Bridge stdio to a CajaGuard service's MCP endpoint (`cajaguard serve`), like
    /// https://gate.example/mcp (http:// only to 127.0.0.1 or [::1]).
    #[arg(long, value_name = "URL")]
    connect: Option<String>,
    /// The environment variable holding the agent's bearer token for --connect (read once, never
    /// shown).
    #[arg(long, value_name = "VAR", requires = "connect")]
    token_env: Option<String>,
}

pub fn run(args: &Args) -> Outcome {
    match (&args.config, &args.connect) {
        (Some(config), _) => serve(config),
        (None, Some(url)) => bridge(url, args.token_env.as_deref()),
        // clap requires one of them.
        (None, None) => Err(Failure::usage(
            "cajaguard mcp needs --config FILE or --connect URL",
            "run `cajaguard mcp --help`",
        )),
    }
}

/// The bridge: the URL and the token checked (exit 2 naming what to fix), then stdio relayed until
/// the client hangs up (exit 0).
fn bridge(url: &str, token_env: Option<&str>) -> Outcome {
    let service = Service::new(url, token_env, super::env)
        .map_err(|e| Failure::usage(e.to_string(), e.hint()))?;
    let (input, output) =
        stdio_files().map_err(|e| Failure::unexpected(format!("cannot use stdio: {e}")))?;
    Bridge::new(service, Box::new(output))
        .serve(Box::new(BufReader::with_capacity(64 * 1024, input)))
        .map_err(|e| Failure::unexpected(format!("reading the client failed: {e}")))?;
    Ok(Exit::Done)
}

fn serve(config: &Path) -> Outcome {
    let policy = Arc::new(super::load_policy(config)?);
    let trusted = super::load_trusted(&policy)?;
    let store = Arc::new(super::open_store(&policy)?);
    super::log_config_loaded(&store, &policy, "cajaguard mcp")?;
    let clock = super::decision_clock(&store)?;
    // Plain files over fds 0 and 1: no std buffering layer and no lock per line (see ARCHITECTURE.md).
    let (input, output) =
        stdio_files().map_err(|e| Failure::unexpected(format!("cannot use stdio: {e}")))?;
    let proxy = Proxy::start(policy.clone(), trusted, store, clock, Box::new(output)).map_err(
        |e: ShopError| {
            // Exit 2 for what is fixed in the config or the environment, 1 for a shop that failed.
            super::said(
                if e.is_configuration() {
                    Exit::Usage
                } else {
                    Exit::Unexpected
                },
                &e,
                e.says_what_to_do(),
                "check that the downstream is a working MCP server (try running it by hand)",
            )
        },
    )?;
    tracing::info!(mode = ?policy.mode, config = %policy.source.display(), "cajaguard serving MCP on stdio");
    proxy
        .serve(Box::new(BufReader::with_capacity(64 * 1024, input)))
        .map_err(|e| Failure::unexpected(format!("reading the agent failed: {e}")))?;
    Ok(Exit::Done)
}

fn stdio_files() -> std::io::Result<(File, File)> {
    let input = File::from(std::io::stdin().as_fd().try_clone_to_owned()?);
    let output = File::from(std::io::stdout().as_fd().try_clone_to_owned()?);
    Ok((input, output))
}
