//! `cajaguard mcp --config FILE`: the stdio MCP server.

use super::Exit;
use std::fs::File;
use std::io::BufReader;
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::Arc;

use super::{Failure, Outcome};
use crate::proxy::{Proxy, ShopError};

pub fn run(config: &Path) -> Outcome {
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
