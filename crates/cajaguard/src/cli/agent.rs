//! `cajaguard agent add | list | remove` (SPEC §7, §13): the agents `cajaguard serve` knows by
//! bearer token. `add` prints the new token once, on stdout; the store keeps only its SHA-256, so
//! it can never be shown again. Additions and removals are audit records (written by the store).

use std::io::Write as _;
use std::path::PathBuf;

use base64::Engine as _;
use cajaguard_core::agent::AgentId;
use serde_json::json;
use time::format_description::well_known::Rfc3339;
use zeroize::Zeroizing;

use super::{Exit, Failure, Outcome};
use crate::status::caps_source;
use crate::store::AuditRecord;

/// What a token starts with, so a leaked one is recognisable (secret scanners, logs).
pub const TOKEN_PREFIX: &str = "cg_agent_";

#[derive(clap::Subcommand)]
pub enum Command {
    /// Give an agent a bearer token for `cajaguard serve` (printed once, never stored).
    Add(NameArgs),
    /// The agents with a token, and those in serve.agents still without one.
    List(ListArgs),
    /// Take an agent's token away (the service refuses it within 1 s: `service::TOKEN_RECHECK`).
    Remove(NameArgs),
}

#[derive(clap::Args)]
pub struct NameArgs {
    /// The agent's name (letters, digits and . _ - @ : | +), as in serve.agents[].name.
    name: String,
    /// The CajaGuard config file (JSON).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
}

#[derive(clap::Args)]
pub struct ListArgs {
    /// The CajaGuard config file (JSON).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// One JSON document on stdout instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(command: &Command) -> Outcome {
    match command {
        Command::Add(args) => add(args),
        Command::List(args) => super::output::json_outcome(args.json, list(args)),
        Command::Remove(args) => remove(args),
    }
}

/// A bad name is a usage error (2), with the rule.
fn parse_name(name: &str) -> Result<AgentId, Failure> {
    let id = AgentId::parse(name).map_err(|e| {
        Failure::usage(
            format!(
                "{:?} is {e}",
                cajaguard_core::display::terminal(name).as_str()
            ),
            "name the agent like `ci-bot` or `shopper@example.com`",
        )
    })?;
    if id.is_oauth() {
        return Err(Failure::usage(
            format!("{name:?} starts with `oauth:`, the namespace of OAuth subjects"),
            "name token agents without the `oauth:` prefix (an OAuth agent needs no token)",
        ));
    }
    Ok(id)
}

/// A new token: `cg_agent_` and 32 random bytes, base64url without padding (43 characters).
fn new_token() -> Result<Zeroizing<String>, Failure> {
    let mut bytes = Zeroizing::new([0u8; 32]);
    getrandom::fill(bytes.as_mut())
        .map_err(|e| Failure::unexpected(format!("no randomness for the agent's token: {e}")))?;
    let mut token = Zeroizing::new(String::with_capacity(TOKEN_PREFIX.len() + 43));
    token.push_str(TOKEN_PREFIX);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode_string(bytes.as_ref(), &mut token);
    Ok(token)
}

fn add(args: &NameArgs) -> Outcome {
    let name = parse_name(&args.name)?;
    let policy = super::load_policy(&args.config)?;
    let store = super::open_store(&policy)?;
    let token = new_token()?;
    let now = time::OffsetDateTime::now_utc();
    let added = store
        .add_agent(&name, &token, now, &AuditRecord::new(now, "agent add"))
        .map_err(Failure::from)?;
    if !added {
        // Like `keygen` refusing to overwrite (2): a token is shown once and never replaced
        // silently, so an agent still holding the old one would not be cut off unannounced.
        return Err(Failure::usage(
            format!("agent {name} has a token already"),
            format!(
                "to give it a new one, run `cajaguard agent remove {name} --config {}` first (the old token stops working), then add it again",
                super::output::shown(&policy.source)
            ),
        ));
    }
    // The token goes to stdout alone (so `> file` or a pipe takes exactly it); the words to stderr.
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", token.as_str())
        .and_then(|()| out.flush())
        .map_err(|e| {
            Failure::unexpected(format!(
                "the token for agent {name} could not be printed ({e}); run `cajaguard agent remove {name}` and add it again"
            ))
        })?;
    eprintln!(
        "agent {name} added: give the token above to the agent (sent as `Authorization: Bearer <token>` to `cajaguard serve`)"
    );
    eprintln!(
        "  it is shown only this once: CajaGuard keeps only its SHA-256 and cannot show it again"
    );
    match caps_source(&policy, &name) {
        Some(source) => eprintln!("  caps: {source}, on top of the global caps"),
        None => eprintln!("  caps: the global caps only (no serve.agents[].caps or agent_caps)"),
    }
    if policy.serve.is_none() {
        eprintln!(
            "  note: {} has no `serve` section yet; `cajaguard serve` needs one",
            super::output::shown(&policy.source)
        );
    }
    Ok(Exit::Done)
}

fn list(args: &ListArgs) -> Outcome {
    let policy = super::load_policy(&args.config)?;
    let store = super::open_store(&policy)?;
    let rows = store.agents().map_err(Failure::from)?;
    let configured = policy
        .serve
        .as_ref()
        .map(|serve| serve.agents.keys().cloned().collect::<Vec<_>>())
        .unwrap_or_default();
    let without_token: Vec<&AgentId> = configured
        .iter()
        .filter(|name| !rows.iter().any(|row| &row.name == *name))
        .collect();

    if args.json {
        let mut agents: Vec<serde_json::Value> = rows
            .iter()
            .map(|row| {
                json!({
                    "name": row.name.as_str(),
                    "token": true,
                    "created_at": row.created_at.format(&Rfc3339).unwrap_or_default(),
                    "caps_from": caps_source(&policy, &row.name),
                })
            })
            .collect();
        agents.extend(without_token.iter().map(|name| {
            json!({
                "name": name.as_str(),
                "token": false,
                "created_at": null,
                "caps_from": caps_source(&policy, name),
            })
        }));
        super::output::print_json(&json!({ "agents": agents }))?;
        return Ok(Exit::Done);
    }

    if rows.is_empty() && without_token.is_empty() {
        eprintln!("no agent has a token; add one with `cajaguard agent add NAME --config FILE`");
    }
    let caps = |name: &AgentId| caps_source(&policy, name).unwrap_or("global caps only");
    for row in &rows {
        println!(
            "{}  {}  {}",
            row.name,
            row.created_at.format(&Rfc3339).unwrap_or_default(),
            caps(&row.name)
        );
    }
    for name in &without_token {
        println!(
            "{name}  no token yet (`cajaguard agent add {name}`)  {}",
            caps(name)
        );
    }
    Ok(Exit::Done)
}

fn remove(args: &NameArgs) -> Outcome {
    let name = parse_name(&args.name)?;
    let policy = super::load_policy(&args.config)?;
    let store = super::open_store(&policy)?;
    let now = time::OffsetDateTime::now_utc();
    let removed = store
        .remove_agent(&name, &AuditRecord::new(now, "agent remove"))
        .map_err(Failure::from)?;
    if !removed {
        return Err(Failure::refused(
            format!("no agent named {name} has a token"),
            "see the agents with `cajaguard agent list --config FILE`",
        ));
    }
    println!("removed agent {name}: its token no longer opens `cajaguard serve`");
    Ok(Exit::Done)
}
