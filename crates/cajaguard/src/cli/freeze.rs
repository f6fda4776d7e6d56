//! `cajaguard freeze` and `cajaguard unfreeze` (SPEC §7): the kill switch. Freezing needs no one's
//! say; unfreezing needs the human: a signature with the approver key, asked on the terminal, for
//! the very freeze in force.

use super::Exit;
use cajaguard_core::display;
use std::path::PathBuf;

use cajaguard_core::freeze::{self, Frozen};

use super::{Failure, Outcome};
use crate::keys;
use crate::store::{AuditRecord, FrozenBy, StoreError};

#[derive(clap::Args)]
pub struct FreezeArgs {
    /// The CajaGuard config file (JSON).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Why payments stop (shown in `status` and to whoever unfreezes).
    #[arg(long, default_value = "frozen from the command line")]
    reason: String,
}

#[derive(clap::Args)]
pub struct UnfreezeArgs {
    /// The CajaGuard config file (JSON).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Do not ask; needed when there is no terminal.
    #[arg(long)]
    yes: bool,
    /// A note kept in the signed unfreeze.
    #[arg(long, default_value = "")]
    note: String,
    /// Where the approver key is (else $CAJAGUARD_KEY_DIR, else the user's config directory).
    #[arg(long, value_name = "DIR")]
    key_dir: Option<PathBuf>,
}

pub fn freeze(args: &FreezeArgs) -> Outcome {
    let policy = super::load_policy(&args.config)?;
    let store = super::open_store(&policy)?;
    let now = time::OffsetDateTime::now_utc();
    let record = record(now, Some(display::terminal(&args.reason)));
    let frozen = store
        .freeze(
            &display::terminal(&args.reason),
            FrozenBy::Human,
            now,
            &record,
        )
        .map_err(Failure::from)?;
    eprintln!(
        "payments are frozen since {} ({}), on every process and host on {}",
        frozen.stamp(),
        display::terminal(&frozen.reason),
        store.describe()
    );
    eprintln!(
        "  -> a human lifts it with `cajaguard unfreeze --config {}`",
        policy.source.display()
    );
    Ok(Exit::Done)
}

pub fn unfreeze(args: &UnfreezeArgs) -> Outcome {
    let policy = super::load_policy(&args.config)?;
    let store = super::open_store(&policy)?;
    let Some(frozen) = store.frozen().map_err(Failure::from)? else {
        eprintln!("payments are not frozen; nothing to do");
        return Ok(Exit::Done);
    };
    if !policy.approvals.require.accepts_key_file() {
        // The same reason `approve` refuses: a key file an agent can read must not lift a freeze
        // where it cannot approve a payment.
        return Err(Failure::usage(
            "approvals.require is \"passkey\": an approver key file cannot unfreeze here",
            "unfreeze with your passkey on the approval page's status view (`cajaguard web --config FILE`, then /status)",
        ));
    }
    let key_dir =
        keys::key_dir(args.key_dir.as_deref(), &|name| super::env(name)).map_err(|e| {
            Failure::usage(e.to_string(), "pass --key-dir DIR or set CAJAGUARD_KEY_DIR")
        })?;
    let key = keys::load_signing_key(&key_dir.join(keys::PRIVATE_KEY_FILE)).map_err(|e| {
        Failure::usage(
            e.to_string(),
            "run `cajaguard keygen`, or point --key-dir at your approver key",
        )
    })?;
    let trusted = super::load_trusted(&policy)?;
    show(&frozen);
    if !args.yes {
        super::terminal::confirm("Let payments through again?")?;
    }
    let now = time::OffsetDateTime::now_utc();
    let mut nonce = [0u8; 16];
    getrandom::fill(&mut nonce)
        .map_err(|e| Failure::unexpected(format!("no randomness for the unfreeze nonce: {e}")))?;
    let document = freeze::sign_unfreeze(&key, &frozen, now, nonce, &display::terminal(&args.note));
    let verified = freeze::verify_unfreeze(&document, &trusted, &frozen, now).map_err(|why| {
        Failure::usage(
            format!("the unfreeze was not accepted: {why}"),
            format!(
                "sign with a key listed in approvals.trusted_keys of {}",
                policy.source.display()
            ),
        )
    })?;
    let record = record(now, Some(format!("signed by key {}", document.key_id)));
    match store.unfreeze(&frozen, &verified, now, &record) {
        Ok(()) => {
            eprintln!("payments are no longer frozen");
            Ok(Exit::Done)
        }
        Err(StoreError::NotThatFreeze) => Err(Failure::refused(
            "payments were unfrozen or frozen again while you decided; nothing changed",
            "run `cajaguard status` and unfreeze again if it is still frozen",
        )),
        Err(e) => Err(Failure::unexpected(e.to_string())),
    }
}

fn show(frozen: &Frozen) {
    eprintln!("Payments are frozen");
    eprintln!("  since:   {}", frozen.stamp());
    eprintln!("  reason:  {}", display::terminal(&frozen.reason));
    eprintln!(
        "  Look at what froze them (cajaguard status, the audit log) before letting payments through."
    );
}

fn record(at: time::OffsetDateTime, note: Option<String>) -> AuditRecord {
    AuditRecord {
        note,
        ..AuditRecord::new(at, "cli")
    }
}
