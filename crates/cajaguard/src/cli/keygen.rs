//! `cajaguard keygen [--out DIR] [--force]`

use super::Exit;
use std::path::PathBuf;

use super::output::shown;
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
    let dir = keys::key_dir(args.out.as_deref(), &|name| super::env(name)).map_err(|e| {
        super::said(
            Exit::Usage,
            &e,
            e.says_what_to_do(),
            "pass --out DIR or set CAJAGUARD_KEY_DIR",
        )
    })?;
    let key = keys::generate_signing_key().map_err(|e| Failure::unexpected(e.to_string()))?;
    let written = keys::write_keypair(&dir, &key, args.force).map_err(|e| match e {
        // The message says to pass --force; the hint says what that costs, once.
        keys::KeyError::Exists { .. } => Failure::usage(
            e.to_string(),
            "approvals signed by the old key stop verifying once it is replaced",
        ),
        other if other.says_what_to_do() => super::said(Exit::Unexpected, &other, true, ""),
        other => Failure::unexpected(other.to_string()),
    })?;
    let public = key.public_key();
    println!(
        "private key: {} (keep it secret; mode 0600)",
        shown(&written.private_key)
    );
    println!("public key:  {}", shown(&written.public_key));
    println!("key id:      {}", public.key_id());
    println!("Add the public key to approvals.trusted_keys in your CajaGuard config.");
    Ok(Exit::Done)
}
