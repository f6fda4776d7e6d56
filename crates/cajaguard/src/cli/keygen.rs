//! `cajaguard keygen [--out DIR] [--force]`

use std::path::PathBuf;

use super::{Failure, Outcome};
use crate::keys;

#[derive(clap::Args)]
pub struct Args {
    /// Where to write the keys (else $CAJAGUARD_KEY_DIR, else $XDG_CONFIG_HOME/cajaguard or ~/.config/cajaguard).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Replace an existing key pair.
    #[arg(long)]
    force: bool,
}

pub fn run(args: &Args) -> Outcome {
    let dir = keys::key_dir(args.out.as_deref(), &|name| super::env(name))
        .map_err(|e| Failure::usage(e.to_string(), "pass --out DIR or set CAJAGUARD_KEY_DIR"))?;
    let key = keys::generate_signing_key().map_err(|e| Failure::unexpected(e.to_string()))?;
    let written = keys::write_keypair(&dir, &key, args.force).map_err(|e| match e {
        keys::KeyError::Exists { .. } => Failure::usage(
            e.to_string(),
            "pass --force to replace it (approvals signed by the old key stop verifying)",
        ),
        other => Failure::unexpected(other.to_string()),
    })?;
    let public = key.public_key();
    println!(
        "private key: {} (keep it secret; mode 0600)",
        written.private_key.display()
    );
    println!("public key:  {}", written.public_key.display());
    println!("key id:      {}", public.key_id());
    println!("Add the public key to approvals.trusted_keys in your CajaGuard config.");
    Ok(0)
}
