//! The physical floors each cost is shown beside: one fsync on the home's disk, one Ed25519
//! verify, one P-256 ECDSA verify, one pipe round trip, one process spawn.

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};

use crate::stats::time_n;

pub(super) fn fsync_floor(dir: &Path, n: usize) -> Result<Vec<Duration>> {
    let path = dir.join("fsync-floor.probe");
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    let samples = time_n(n, || {
        file.write_all(b"x")?;
        file.sync_all()?;
        Ok(())
    })?;
    drop(file);
    std::fs::remove_file(&path)?;
    Ok(samples)
}

pub(super) fn ed25519_floor(n: usize) -> Result<Vec<Duration>> {
    use ed25519_dalek::Signer;
    let key = ed25519_dalek::SigningKey::from_bytes(&[7u8; 32]);
    let public = key.verifying_key();
    let message = [0x5a_u8; 300];
    let signature = key.sign(&message);
    time_n(n, || {
        public
            .verify_strict(std::hint::black_box(&message), &signature)
            .map_err(|e| anyhow!("{e}"))
    })
}

/// One P-256 ECDSA verify of what a WebAuthn assertion signs, `authenticator_data ||
/// SHA-256(client_data_json)`, built from a real assertion's bytes so the message has the same
/// shape (and length) as the passkey approval's; the key is this floor's own.
pub(super) fn p256_floor(
    authenticator_data: &[u8],
    client_data_json: &[u8],
    n: usize,
) -> Result<Vec<Duration>> {
    use p256::ecdsa::signature::{Signer, Verifier};
    use sha2::{Digest as _, Sha256};
    let key = p256::ecdsa::SigningKey::from_slice(&[9u8; 32]).map_err(|e| anyhow!("{e}"))?;
    let public = *key.verifying_key();
    let mut message = authenticator_data.to_vec();
    message.extend_from_slice(&Sha256::digest(client_data_json));
    let signature: p256::ecdsa::Signature = key.sign(&message);
    time_n(n, || {
        public
            .verify(std::hint::black_box(&message), &signature)
            .map_err(|e| anyhow!("{e}"))
    })
}

pub(super) fn pipe_floor(n: usize) -> Result<Vec<Duration>> {
    // Two OS pipes: this thread -> echo thread -> this thread, one JSON-RPC-sized line each way.
    let (there_r, mut there_w) = std::io::pipe()?;
    let (back_r, mut back_w) = std::io::pipe()?;
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        let mut reader = BufReader::new(there_r);
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line)? == 0 {
                return Ok(());
            }
            back_w.write_all(line.as_bytes())?;
        }
    });
    let mut reader = BufReader::new(back_r);
    let mut line = String::new();
    let samples = time_n(n, || {
        there_w.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n")?;
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            bail!("the echo thread stopped");
        }
        Ok(())
    })?;
    drop(there_w);
    echo.join()
        .map_err(|_| anyhow!("the echo thread panicked"))??;
    Ok(samples)
}

pub(super) fn spawn_floor(cajaguard: &Path, n: usize) -> Result<Vec<Duration>> {
    time_n(n, || {
        let status = Command::new(cajaguard)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        if !status.success() {
            bail!("cajaguard --version failed");
        }
        Ok(())
    })
}
