//! `cajaguard audit verify | proof | check-proof | checkpoint` (SPEC §7, §8): checking the
//! tamper-evident audit log, and the pieces of it a human can keep and check elsewhere.

use std::path::PathBuf;

use cajaguard_core::audit_log::{OtherLogs, ProofBundle};

use super::{Exit, Failure, Outcome};
use crate::store::Anchor;

/// A checkpoint or proof file is a few hundred bytes; anything much larger is not one.
const MAX_FILE_BYTES: u64 = 1024 * 1024;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Recompute the log from the stored records and check every checkpoint: exit 0 whole, 5
    /// altered (naming the first bad record).
    Verify(VerifyArgs),
    /// Write an offline proof that one record is in the log (inclusion proof and checkpoint).
    Proof(ProofArgs),
    /// Check a proof bundle written by `audit proof`, without the store: exit 0 or 5.
    CheckProof(CheckProofArgs),
    /// Print a fresh signed checkpoint of the log, for a human to keep (`verify --checkpoint`).
    Checkpoint(ConfigArgs),
}

#[derive(clap::Args)]
pub struct ConfigArgs {
    /// The CajaGuard config file (JSON).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
}

#[derive(clap::Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    common: ConfigArgs,
    /// A checkpoint kept outside the store (from `audit checkpoint`); may be given more than once.
    #[arg(long, value_name = "FILE")]
    checkpoint: Vec<PathBuf>,
    /// Approvals were moved in from other homes: their checkpoints, of other logs, are counted
    /// apart instead of being read as this log's origin changed.
    #[arg(long)]
    approvals_from_other_homes: bool,
}

#[derive(clap::Args)]
pub struct ProofArgs {
    /// The record's index in the log (0 is the first).
    record: u64,
    #[command(flatten)]
    common: ConfigArgs,
    /// Write the bundle here instead of stdout.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct CheckProofArgs {
    /// The proof bundle (JSON) from `audit proof`.
    file: PathBuf,
    /// The log's verifier key (`audit checkpoint` prints it); without it the bundle's own
    /// claim is taken, which proves only that the bundle is self-consistent.
    #[arg(long, value_name = "VKEY")]
    log_key: Option<String>,
}

pub fn run(command: &Command) -> Outcome {
    match command {
        Command::Verify(args) => verify(args),
        Command::Proof(args) => proof(args),
        Command::CheckProof(args) => check_proof(args),
        Command::Checkpoint(args) => checkpoint(args),
    }
}

fn read_small(path: &PathBuf, what: &str) -> Result<String, Failure> {
    use std::io::Read as _;
    let file = std::fs::File::open(path).map_err(|e| {
        Failure::usage(
            format!("cannot read the {what} {}: {e}", path.display()),
            "check the path",
        )
    })?;
    let mut text = String::new();
    file.take(MAX_FILE_BYTES)
        .read_to_string(&mut text)
        .map_err(|e| {
            Failure::usage(
                format!("the {what} {} is not UTF-8 text: {e}", path.display()),
                "give the file `cajaguard audit` wrote",
            )
        })?;
    Ok(text)
}

fn altered(message: String) -> Failure {
    Failure {
        exit: Exit::Altered,
        message,
        hint: Some(
            "the store was changed outside CajaGuard: keep a copy of it as evidence, and do not \
             trust its records after the one named"
                .to_owned(),
        ),
    }
}

fn verify(args: &VerifyArgs) -> Outcome {
    let policy = super::load_policy(&args.common.config)?;
    let store = super::open_store(&policy)?;
    // A key that cannot be loaded would drop every approval it signed from the evidence.
    let trusted = super::load_trusted(&policy)?;
    let passkeys = policy.approvals.web.map(|web| web.relying_party());
    let mut anchors = Vec::new();
    for path in &args.checkpoint {
        anchors.push(Anchor {
            source: format!("the checkpoint {}", path.display()),
            checkpoint: read_small(path, "checkpoint")?,
            kept_by_human: true,
        });
    }
    match store
        .verify_log(
            &trusted,
            passkeys.as_ref(),
            anchors,
            if args.approvals_from_other_homes {
                OtherLogs::CountedApart
            } else {
                OtherLogs::Refused
            },
        )
        .map_err(Failure::from)?
    {
        Ok(summary) => {
            println!(
                "the audit log is whole: {} records, root {}",
                summary.records,
                hex::encode(summary.root.0)
            );
            eprintln!(
                "  checked {} stored checkpoint(s) and {} checkpoint(s) held by approvals or given",
                summary.checkpoints, summary.anchors
            );
            if summary.foreign_anchors > 0 {
                eprintln!(
                    "  {} approval checkpoint(s) are of another log (approvals moved from another home): not checked",
                    summary.foreign_anchors
                );
            }
            for why in &summary.skipped_anchors {
                eprintln!("  not counted as evidence: {why}");
            }
            if summary.anchors == 0 {
                eprintln!(
                    "  note: no checkpoint held outside the store was checked, so a history rewritten and \
                     re-signed with this home's log key would pass; keep checkpoints (`cajaguard audit checkpoint`)"
                );
            }
            Ok(Exit::Done)
        }
        Err(found) => Err(altered(format!("the audit log was altered: {found}"))),
    }
}

fn proof(args: &ProofArgs) -> Outcome {
    let policy = super::load_policy(&args.common.config)?;
    let store = super::open_store(&policy)?;
    let bundle = store
        .log_proof(args.record, time::OffsetDateTime::now_utc())
        .map_err(Failure::from)?
        .map_err(|why| Failure::refused(why, "see `cajaguard audit verify`"))?;
    let mut text = serde_json::to_string_pretty(&bundle)
        .map_err(|e| Failure::unexpected(format!("cannot encode the proof: {e}")))?;
    text.push('\n');
    match &args.out {
        Some(path) => {
            std::fs::write(path, text).map_err(|e| {
                Failure::usage(
                    format!("cannot write {}: {e}", path.display()),
                    "choose a path you can write",
                )
            })?;
            eprintln!(
                "wrote the proof of record {} to {}; check it anywhere with `cajaguard audit check-proof {} --log-key {}`",
                args.record,
                path.display(),
                path.display(),
                bundle.log_key
            );
        }
        None => print!("{text}"),
    }
    Ok(Exit::Done)
}

fn check_proof(args: &CheckProofArgs) -> Outcome {
    let text = read_small(&args.file, "proof")?;
    let bundle = ProofBundle::from_json(&text).map_err(|e| {
        Failure::usage(e.to_string(), "give the file `cajaguard audit proof` wrote")
    })?;
    let pinned = args.log_key.clone().map(|k| vec![k]);
    match bundle.verify(pinned.as_deref()) {
        Ok(head) => {
            println!(
                "record {} is in the log of size {} (root {})",
                bundle.record.index,
                head.size,
                hex::encode(head.root.0)
            );
            if pinned.is_none() {
                eprintln!(
                    "  note: checked against the key the bundle names; pass --log-key to pin the log's key"
                );
            }
            Ok(Exit::Done)
        }
        Err(e) => Err(altered(format!("the proof does not hold: {e}"))),
    }
}

fn checkpoint(args: &ConfigArgs) -> Outcome {
    let policy = super::load_policy(&args.config)?;
    let store = super::open_store(&policy)?;
    let text = store
        .checkpoint(time::OffsetDateTime::now_utc())
        .map_err(Failure::from)?;
    print!("{text}");
    let key = store.log_verifier_key().map_err(Failure::from)?;
    eprintln!("keep this checkpoint outside the store; the log key that signed it: {key}");
    Ok(Exit::Done)
}
