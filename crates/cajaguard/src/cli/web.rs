//! `cajaguard web --config FILE`: serves the local approval page on `approvals.web.listen`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::Arc;

use super::{Exit, Failure, Outcome};
use crate::web::{self, WebApp};

#[derive(clap::Args)]
pub struct Args {
    /// The CajaGuard config file (JSON), with approvals.web.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
}

pub fn run(args: &Args) -> Outcome {
    let policy = super::load_policy(&args.config)?;
    let store = Arc::new(super::open_store(&policy)?);
    super::log_config_loaded(&store, &policy, "cajaguard web")?;
    let clock = super::decision_clock(&store)?;
    let (app, listeners) = prepare(policy, store, clock)?;
    eprintln!(
        "the approval page is at {}/ (Ctrl-C stops it)",
        app.web().origin()
    );
    web::serve(app, listeners)
        .map_err(|e| Failure::unexpected(format!("the approval page stopped: {e}")))?;
    Ok(Exit::Done)
}

/// The page over `store`, holding its port on both loopbacks (for `web`, and for `serve`, which
/// serves it beside `/mcp` when `approvals.web` is configured).
pub(super) fn prepare(
    policy: cajaguard_core::policy::Policy,
    store: Arc<crate::store::Store>,
    clock: crate::proxy::Clock,
) -> Result<(Arc<WebApp>, Vec<TcpListener>), Failure> {
    let app = WebApp::new(
        policy,
        store,
        WebApp::shop_reread(),
        Box::new(move || clock()),
    )
    .map_err(|e| Failure::usage(e, "configure approvals.web (SPEC §6)"))?;
    let listeners = bind_both_loopbacks(app.web().listen)?;
    Ok((Arc::new(app), listeners))
}

/// The page on `listen` and on the same port of the other loopback family. The origin is
/// `http://localhost:<port>`, and a browser may reach `localhost` over `::1` or `127.0.0.1`: a
/// process that held the other one would be the page as far as the browser and the passkey can
/// tell (same origin, same RP ID), and could relay the human's touch to approve what it likes. So
/// both are ours, or the page does not start. A machine without the other family (no IPv6) leaves
/// no one able to take it, and starts with one.
fn bind_both_loopbacks(listen: SocketAddr) -> Result<Vec<TcpListener>, Failure> {
    let taken = |addr: SocketAddr, e: std::io::Error| {
        Failure::usage(
            format!("cannot listen on {addr}: {e}"),
            "stop whatever holds the port on 127.0.0.1 or [::1] (the page needs it on both), or change approvals.web.listen (passkeys are bound to the port: register them again after a change)",
        )
    };
    let first = TcpListener::bind(listen).map_err(|e| taken(listen, e))?;
    let other_ip: IpAddr = if listen.is_ipv4() {
        Ipv6Addr::LOCALHOST.into()
    } else {
        Ipv4Addr::LOCALHOST.into()
    };
    let other = SocketAddr::new(other_ip, listen.port());
    match TcpListener::bind(other) {
        Ok(second) => Ok(vec![first, second]),
        Err(e)
            if e.kind() == std::io::ErrorKind::AddrNotAvailable || e.raw_os_error() == Some(97) =>
        {
            // EAFNOSUPPORT (97) or no such address: this machine has no such loopback.
            Ok(vec![first])
        }
        Err(e) => Err(taken(other, e)),
    }
}
