//! The physical floors each cost is shown beside: one fsync on the home's disk, one Ed25519
//! verify, one pipe round trip, one process spawn.

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
