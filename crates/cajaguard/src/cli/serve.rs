//! `cajaguard serve --config FILE`: the service (SPEC §13).

use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::{Exit, Failure, Outcome};
use crate::proxy::{Proxy, ShopError};
use crate::service::{self, Service};

#[derive(clap::Args)]
pub struct Args {
    /// The CajaGuard config file (JSON), with a serve object.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
}

pub fn run(args: &Args) -> Outcome {
    let policy = Arc::new(super::load_policy(&args.config)?);
    let Some(serve) = policy.serve.clone() else {
        return Err(Failure::usage(
            format!(
                "{}: the config has no serve object",
                policy.source.display()
            ),
            "add \"serve\": {\"listen\": \"127.0.0.1:8376\"} (SPEC §13)",
        ));
    };
    let jwt = match &serve.oauth {
        None => None,
        Some(oauth) => Some(oauth_verifier(oauth)?),
    };
    let trusted = super::load_trusted(&policy)?;
    let store = Arc::new(super::open_store(&policy)?);
    super::log_config_loaded(&store, &policy, "cajaguard serve")?;
    let clock = super::decision_clock(&store)?;
    let listener = TcpListener::bind(serve.listen).map_err(|e| {
        Failure::usage(
            format!("cannot listen on {}: {e}", serve.listen),
            "stop whatever holds the port, or change serve.listen",
        )
    })?;
    // The shop's own notifications have no one session to go to: they are dropped (each
    // request's answer still comes back to the agent that asked).
    let base = Proxy::start(
        policy.clone(),
        trusted,
        store,
        clock.clone(),
        Box::new(std::io::sink()),
    )
    .map_err(|e: ShopError| {
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
    })?;
    // The approval page beside the endpoint (SPEC §6), when configured: the humans approve on
    // it while the agents, which cannot reach this user's home, pay through /mcp.
    if policy.approvals.web.is_some() {
        let (app, listeners) =
            super::web::prepare((*policy).clone(), base.store().clone(), clock.clone())?;
        eprintln!(
            "cajaguard serve: the approval page is at {}/",
            app.web().origin()
        );
        let page = std::thread::Builder::new()
            .name("approval-page".into())
            .spawn(move || {
                if let Err(e) = crate::web::serve(app, listeners) {
                    tracing::error!(error = %e, "the approval page stopped");
                }
            });
        if page.is_err() {
            return Err(Failure::unexpected(
                "cannot start the approval page's thread",
            ));
        }
    }
    let service = Service::new(base.clone(), policy.clone(), jwt, clock)
        .map_err(|e| Failure::usage(e, "add a serve object (SPEC §13)"))?;
    // A request waits for its answer as long as the proxy may take: a read-back and the
    // forwarded call, each bounded by the shop's timeout, plus the store.
    let answer_within = policy
        .downstream
        .timeout
        .saturating_mul(3)
        .saturating_add(Duration::from_secs(10));
    tracing::info!(listen = %serve.listen, config = %policy.source.display(), "cajaguard serving MCP over HTTP at /mcp");
    eprintln!(
        "cajaguard serve: MCP at http://{}/mcp (Ctrl-C stops it)",
        serve.listen
    );
    service::serve(Arc::new(service), listener, answer_within)
        .map_err(|e| Failure::unexpected(format!("the service stopped: {e}")))?;
    base.checkpoint_now();
    Ok(Exit::Done)
}

/// `serve.oauth` as a token check: the JWKS is read (or fetched) now, so a bad one stops the
/// service at start rather than refusing every agent later.
fn oauth_verifier(
    oauth: &cajaguard_core::policy::OauthPolicy,
) -> Result<Box<service::VerifyJwt>, Failure> {
    use cajaguard_core::policy::JwksSource as Source;
    use service::oauth::{JwksSource, OauthSettings, TokenVerifier};
    let jwks = match &oauth.jwks {
        Source::File(path) => JwksSource::File(path.clone()),
        Source::Url(url) => JwksSource::Url(url.clone()),
    };
    let mut settings = OauthSettings::new(oauth.issuer.clone(), oauth.audience.clone(), jwks);
    settings.agent_claim = oauth.agent_claim.clone();
    let verifier = TokenVerifier::new(settings).map_err(|e| {
        Failure::usage(
            format!("serve.oauth: {e}"),
            "fix serve.oauth (issuer, audience, jwks_file or jwks_url)",
        )
    })?;
    Ok(Box::new(move |token, now| {
        verifier.verify(token, now).map_err(|e| e.to_string())
    }))
}
