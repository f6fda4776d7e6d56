//! `cajaguard passkey add | list | remove` (SPEC §6, §7): the passkeys that approve on the page.
//! `add` prints a one-time link (5 minutes) to the registration page; registrations and removals
//! are audit records.

use std::path::PathBuf;

use cajaguard_core::display;
use cajaguard_core::policy::{Policy, WebPolicy};

use super::{Exit, Failure, Outcome};
use crate::store::{AuditRecord, LINK_TTL};

#[derive(clap::Subcommand)]
pub enum Command {
    /// Print a one-time link (valid 5 minutes) to register a passkey on the approval page.
    Add(AddArgs),
    /// The registered passkeys.
    List(ConfigArgs),
    /// Remove a passkey (it approves nothing from now on).
    Remove(RemoveArgs),
}

#[derive(clap::Args)]
pub struct ConfigArgs {
    /// The CajaGuard config file (JSON), with approvals.web.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
}

#[derive(clap::Args)]
pub struct AddArgs {
    #[command(flatten)]
    common: ConfigArgs,
    /// A label for the passkey ("laptop", "yubikey").
    #[arg(long)]
    name: String,
}

#[derive(clap::Args)]
pub struct RemoveArgs {
    /// The passkey's id as `passkey list` shows it (a unique prefix is enough).
    id: String,
    #[command(flatten)]
    common: ConfigArgs,
}

pub fn run(command: &Command) -> Outcome {
    match command {
        Command::Add(args) => add(args),
        Command::List(args) => list(args),
        Command::Remove(args) => remove(args),
    }
}

fn web(policy: &Policy) -> Result<WebPolicy, Failure> {
    policy.approvals.web.ok_or_else(|| {
        Failure::usage(
            format!("{} has no approvals.web", policy.source.display()),
            "add \"web\": {\"listen\": \"127.0.0.1:8377\"} under approvals, then run `cajaguard web`",
        )
    })
}

fn record(now: time::OffsetDateTime, note: String) -> AuditRecord {
    AuditRecord {
        note: Some(note),
        ..AuditRecord::new(now, "cli")
    }
}

fn add(args: &AddArgs) -> Outcome {
    let policy = super::load_policy(&args.common.config)?;
    let web = web(&policy)?;
    let name = display::terminal(args.name.trim());
    if name.is_empty() || name.chars().count() > 64 {
        return Err(Failure::usage(
            "--name must be 1 to 64 visible characters",
            "name the authenticator, like --name laptop",
        ));
    }
    let store = super::open_store(&policy)?;
    let mut token = [0u8; 32];
    getrandom::fill(&mut token)
        .map_err(|e| Failure::unexpected(format!("no randomness for the link: {e}")))?;
    let token = hex::encode(token);
    let now = time::OffsetDateTime::now_utc();
    let first = store.passkey_first_use().map_err(Failure::from)?;
    store
        .create_registration_link(
            &token,
            &name,
            now,
            &record(
                now,
                format!("registration link for {}", display::audit(&name)),
            ),
        )
        .map_err(Failure::from)?;
    println!("{}/passkeys/register?token={token}", web.origin());
    eprintln!(
        "open the link above in your browser within {} minutes, with `cajaguard web --config {}` running",
        LINK_TTL.as_secs() / 60,
        policy.source.display()
    );
    if first {
        eprintln!("  this will be the first passkey: it is trusted on first use");
    } else {
        eprintln!(
            "  a passkey is registered already: the new one must be approved with it on the page \
             (if you never registered one, something running as you did: run `cajaguard freeze` \
             and `cajaguard passkey list`)"
        );
    }
    Ok(Exit::Done)
}

fn list(args: &ConfigArgs) -> Outcome {
    let policy = super::load_policy(&args.config)?;
    let store = super::open_store(&policy)?;
    let rows = store.passkeys().map_err(Failure::from)?;
    if rows.is_empty() {
        eprintln!(
            "no passkey is registered; add one with `cajaguard passkey add --config FILE --name NAME`"
        );
    }
    for row in rows {
        println!(
            "{}  {:?}  {}  {}",
            row.id(),
            row.passkey.algorithm,
            row.created_at
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap_or_default(),
            display::terminal(&row.passkey.name)
        );
    }
    Ok(Exit::Done)
}

fn remove(args: &RemoveArgs) -> Outcome {
    let policy = super::load_policy(&args.common.config)?;
    let store = super::open_store(&policy)?;
    let now = time::OffsetDateTime::now_utc();
    let removed = store
        .remove_passkey(&args.id, now, &record(now, String::new()))
        .map_err(Failure::from)?;
    match removed {
        Some(row) => {
            println!(
                "removed passkey {} ({})",
                row.id(),
                display::terminal(&row.passkey.name)
            );
            Ok(Exit::Done)
        }
        None => Err(Failure::refused(
            format!(
                "no single passkey has an id starting with {}",
                display::terminal(&args.id)
            ),
            "see the ids with `cajaguard passkey list --config FILE`",
        )),
    }
}
