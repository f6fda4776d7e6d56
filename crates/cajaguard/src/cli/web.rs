//! `cajaguard web --config FILE`: serves the local approval page on `approvals.web.listen`.

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
    let app = WebApp::new(
        policy,
        store,
        WebApp::shop_reread(),
        Box::new(time::OffsetDateTime::now_utc),
    )
    .map_err(|e| Failure::usage(e, "configure approvals.web (SPEC §6)"))?;
    let listen = app.web().listen;
    let listener = std::net::TcpListener::bind(listen).map_err(|e| {
        Failure::usage(
            format!("cannot listen on {listen}: {e}"),
            "stop whatever holds the port, or change approvals.web.listen (passkeys are bound to the port: register them again after a change)",
        )
    })?;
    eprintln!(
        "the approval page is at {}/ (Ctrl-C stops it)",
        app.web().origin()
    );
    web::serve(Arc::new(app), listener)
        .map_err(|e| Failure::unexpected(format!("the approval page stopped: {e}")))?;
    Ok(Exit::Done)
}
