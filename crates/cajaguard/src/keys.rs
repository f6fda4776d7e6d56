//! Approver key files (SPEC §6): where they live, writing them with care (0600 in a 0700 directory,
//! create-new, never overwritten without `--force`), and reading them with permission checks.

use std::ffi::OsString;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use cajaguard_core::approval::{PublicKey, SigningKey, TrustedKeys};
use zeroize::Zeroizing;

/// The private key's file name inside the key directory.
pub const PRIVATE_KEY_FILE: &str = "approver.key.pem";
/// The public key's file name inside the key directory.
pub const PUBLIC_KEY_FILE: &str = "approver.pub.pem";

/// A PEM key file is well under a kilobyte; a bound keeps a wrong path from filling memory.
const MAX_KEY_FILE_BYTES: u64 = 16 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error(
        "no directory for approver keys: none of --out, $CAJAGUARD_KEY_DIR, $XDG_CONFIG_HOME or $HOME is set; pass --out DIR"
    )]
    NoKeyDir,
    /// `keygen` without `--force` found a key already there.
    #[error("{} already exists; CajaGuard never overwrites a key: pass --force to replace it", path.display())]
    Exists { path: PathBuf },
    #[error("the key directory {} is writable by others (mode {mode:o}); run `chmod 700 {}`", path.display(), path.display())]
    UnsafeDir { path: PathBuf, mode: u32 },
    #[error("cannot create the key directory {}: {source}", path.display())]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no approver key at {}: run `cajaguard keygen` first (or pass --key-dir)", path.display())]
    MissingPrivateKey { path: PathBuf },
    /// The private key file can be read by group or others: refused.
    #[error(
        "the private key {} is readable by other users (mode {mode:o}); run `chmod 600 {}` and keep it secret",
        path.display(), path.display()
    )]
    PrivateKeyTooOpen { path: PathBuf, mode: u32 },
    #[error("cannot read the key file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A trusted key listed in the config cannot be read (missing, unreadable, or not a file).
    #[error(
        "cannot read the trusted key {}: {source}; run `cajaguard keygen` or fix approvals.trusted_keys in the config",
        path.display()
    )]
    TrustedKeyUnreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A trusted key anyone may rewrite: whoever replaces it can approve payments.
    #[error(
        "the trusted key {} is writable by other users (mode {mode:o}): anyone could swap in their own key and approve payments; run `chmod 644 {}`",
        path.display(), path.display()
    )]
    TrustedKeyWritable { path: PathBuf, mode: u32 },
    /// The file is not a key of the expected kind (the message never holds key material).
    #[error("{} is not a valid {what}: {source}", path.display())]
    Parse {
        path: PathBuf,
        what: &'static str,
        source: cajaguard_core::Error,
    },
    #[error("the operating system gave no randomness for a new key: {0}")]
    Random(String),
    /// The key could not be written as PEM (the encoder refused; nothing was written).
    #[error(
        "the new key could not be encoded ({0}); nothing was written: run `cajaguard keygen` again"
    )]
    Encode(cajaguard_core::Error),
}

impl KeyError {
    /// The message already says what to do, so the CLI adds no hint that repeats it.
    pub fn says_what_to_do(&self) -> bool {
        matches!(
            self,
            KeyError::NoKeyDir
                | KeyError::Exists { .. }
                | KeyError::UnsafeDir { .. }
                | KeyError::MissingPrivateKey { .. }
                | KeyError::PrivateKeyTooOpen { .. }
                | KeyError::TrustedKeyUnreadable { .. }
                | KeyError::TrustedKeyWritable { .. }
                | KeyError::Encode(_)
        )
    }
}

/// The key directory: `out`, else `$CAJAGUARD_KEY_DIR`, else `$XDG_CONFIG_HOME/cajaguard`, else
/// `$HOME/.config/cajaguard`. `env` looks variables up (injected so tests never touch the real
/// `~/.config`); empty values count as unset, and a relative `$XDG_CONFIG_HOME` is ignored, as the
/// XDG base directory specification says.
pub fn key_dir(
    out: Option<&Path>,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Result<PathBuf, KeyError> {
    if let Some(out) = out {
        return Ok(out.to_path_buf());
    }
    let var = |name: &str| env(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = var("CAJAGUARD_KEY_DIR") {
        return Ok(dir);
    }
    if let Some(config) = var("XDG_CONFIG_HOME").filter(|p| p.is_absolute()) {
        return Ok(config.join("cajaguard"));
    }
    if let Some(home) = var("HOME") {
        return Ok(home.join(".config").join("cajaguard"));
    }
    Err(KeyError::NoKeyDir)
}

/// A new Ed25519 key from the operating system's randomness.
pub fn generate_signing_key() -> Result<SigningKey, KeyError> {
    let mut seed = Zeroizing::new([0_u8; 32]);
    getrandom::fill(seed.as_mut()).map_err(|e| KeyError::Random(e.to_string()))?;
    Ok(SigningKey::from_seed(&seed))
}

/// Where [`write_keypair`] put the keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenKeys {
    pub private_key: PathBuf,
    pub public_key: PathBuf,
}

/// Writes `approver.key.pem` (0600) and `approver.pub.pem` (0644) into `dir`, creating it 0700.
/// Without `force`, an existing key file of either name is [`KeyError::Exists`] and nothing is
/// written. Each file is written whole to a temporary name first, so a crash never leaves half a key.
pub fn write_keypair(dir: &Path, key: &SigningKey, force: bool) -> Result<WrittenKeys, KeyError> {
    match DirBuilder::new().recursive(true).mode(0o700).create(dir) {
        Ok(()) => {}
        Err(source) => {
            return Err(KeyError::CreateDir {
                path: dir.to_path_buf(),
                source,
            });
        }
    }
    let meta = fs::metadata(dir).map_err(|source| KeyError::CreateDir {
        path: dir.to_path_buf(),
        source,
    })?;
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o022 != 0 {
        // Someone else could swap the public key, or delete ours and plant theirs.
        return Err(KeyError::UnsafeDir {
            path: dir.to_path_buf(),
            mode,
        });
    }

    let private_key = dir.join(PRIVATE_KEY_FILE);
    let public_key = dir.join(PUBLIC_KEY_FILE);
    if !force {
        for path in [&private_key, &public_key] {
            match fs::symlink_metadata(path) {
                Ok(_) => return Err(KeyError::Exists { path: path.clone() }),
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(KeyError::Read {
                        path: path.clone(),
                        source,
                    });
                }
            }
        }
    }

    let pem = key.to_pkcs8_pem().map_err(KeyError::Encode)?;
    let public_pem = key.public_key().to_pem().map_err(KeyError::Encode)?;
    install(dir, &private_key, pem.as_bytes(), 0o600, force)?;
    install(dir, &public_key, public_pem.as_bytes(), 0o644, force)?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| KeyError::Write {
            path: dir.to_path_buf(),
            source,
        })?;
    Ok(WrittenKeys {
        private_key,
        public_key,
    })
}

/// Writes `bytes` to a fresh temporary file in `dir` with `mode`, then moves it to `target`:
/// replacing it when `force`, else only if nothing is there (a hard link fails on an existing name).
fn install(
    dir: &Path,
    target: &Path,
    bytes: &[u8],
    mode: u32,
    force: bool,
) -> Result<(), KeyError> {
    let mut random = [0_u8; 8];
    getrandom::fill(&mut random).map_err(|e| KeyError::Random(e.to_string()))?;
    let temp = dir.join(format!(".cajaguard-key-{}.tmp", hex::encode(random)));
    let write_err = |source| KeyError::Write {
        path: target.to_path_buf(),
        source,
    };

    let written = (|| -> std::io::Result<()> {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&temp)?;
        // The umask may have narrowed the mode; the public key is meant to be world-readable.
        file.set_permissions(fs::Permissions::from_mode(mode))?;
        file.write_all(bytes)?;
        file.sync_all()
    })();
    let moved = written.and_then(|()| {
        if force {
            fs::rename(&temp, target)
        } else {
            fs::hard_link(&temp, target)
        }
    });
    let cleanup = fs::remove_file(&temp);
    match moved {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {
            return Err(KeyError::Exists {
                path: target.to_path_buf(),
            });
        }
        Err(source) => return Err(write_err(source)),
    }
    match cleanup {
        Err(e) if e.kind() != ErrorKind::NotFound => {
            tracing::warn!(file = %temp.display(), error = %e, "cannot remove a temporary key file");
        }
        _ => {}
    }
    Ok(())
}

/// The home's audit log key (SPEC §8): read, refusing one that group or others could read, or
/// made (0600) when the home has none. Two processes making it at once agree on one: the file is
/// linked into place, which never replaces, and the loser reads the winner's.
pub fn load_or_create_log_key(path: &Path) -> Result<SigningKey, crate::store::StoreError> {
    let log_key_err = |e: KeyError| crate::store::StoreError::LogKey(e.to_string());
    match load_signing_key(path) {
        Err(KeyError::MissingPrivateKey { .. }) => {}
        other => return other.map_err(log_key_err),
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    // With the shared store the home may not exist yet: it holds only this key then.
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| {
            log_key_err(KeyError::Write {
                path: dir.to_path_buf(),
                source,
            })
        })?;
    let key = generate_signing_key().map_err(log_key_err)?;
    let pem = key
        .to_pkcs8_pem()
        .map_err(KeyError::Encode)
        .map_err(log_key_err)?;
    match install(dir, path, pem.as_bytes(), 0o600, false) {
        Ok(()) => Ok(key),
        Err(KeyError::Exists { .. }) => load_signing_key(path).map_err(log_key_err),
        Err(e) => Err(log_key_err(e)),
    }
}

/// Reads the private key, refusing a file that group or others could read.
pub fn load_signing_key(path: &Path) -> Result<SigningKey, KeyError> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Err(KeyError::MissingPrivateKey {
                path: path.to_path_buf(),
            });
        }
        Err(source) => {
            return Err(KeyError::Read {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    // The mode of the opened file, not of the path: what we check is what we read.
    let meta = file.metadata().map_err(|source| KeyError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(KeyError::PrivateKeyTooOpen {
            path: path.to_path_buf(),
            mode,
        });
    }
    let pem = read_bounded(file, &meta).map_err(|source| KeyError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    SigningKey::from_pkcs8_pem(&pem).map_err(|source| KeyError::Parse {
        path: path.to_path_buf(),
        what: "Ed25519 private key (PKCS#8 PEM)",
        source,
    })
}

/// Reads a public key (SubjectPublicKeyInfo PEM).
pub fn load_public_key(path: &Path) -> Result<PublicKey, KeyError> {
    let read_err = |source| KeyError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(read_err)?;
    let meta = file.metadata().map_err(read_err)?;
    let pem = read_bounded(file, &meta).map_err(read_err)?;
    PublicKey::from_pem(&pem).map_err(|source| KeyError::Parse {
        path: path.to_path_buf(),
        what: "Ed25519 public key (PEM)",
        source,
    })
}

/// The approver keys whose approvals count under the policy: every key in
/// `approvals.trusted_keys`, or none under `approvals.require: "passkey"`. Every reader of an
/// approval's status (`verify`, `pending`, `status`, `cajaguard_approval_status`, the page) goes
/// through here, so a key-file approval an agent signed never reads as approved where the gate
/// would not honour it.
pub fn counted_trusted_keys(
    policy: &cajaguard_core::policy::Policy,
) -> Result<TrustedKeys, KeyError> {
    if policy.approvals.require.accepts_key_file() {
        load_trusted_keys(&policy.approvals.trusted_keys)
    } else {
        Ok(TrustedKeys::default())
    }
}

/// Every key in `approvals.trusted_keys`. Any one missing or unreadable is an error naming it: a
/// trust list that silently shrinks would be a config typo nobody notices.
pub fn load_trusted_keys(paths: &[PathBuf]) -> Result<TrustedKeys, KeyError> {
    let mut keys = Vec::with_capacity(paths.len());
    for path in paths {
        // The approver's public key is a trust root: refuse one that any user may rewrite.
        if let Ok(meta) = fs::metadata(path) {
            let mode = meta.permissions().mode() & 0o7777;
            if mode & 0o002 != 0 {
                return Err(KeyError::TrustedKeyWritable {
                    path: path.clone(),
                    mode,
                });
            }
        }
        match load_public_key(path) {
            Ok(key) => keys.push(key),
            Err(KeyError::Read { path, source }) => {
                return Err(KeyError::TrustedKeyUnreadable { path, source });
            }
            Err(other) => return Err(other),
        }
    }
    Ok(TrustedKeys(keys))
}

/// The whole file as text, in a buffer wiped on drop (it may hold a private key).
fn read_bounded(file: File, meta: &fs::Metadata) -> std::io::Result<Zeroizing<String>> {
    if !meta.is_file() {
        return Err(std::io::Error::new(
            ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    if meta.len() > MAX_KEY_FILE_BYTES {
        return Err(std::io::Error::new(
            ErrorKind::InvalidData,
            "too large to be a key file",
        ));
    }
    // Sized up front so the buffer never reallocates and leaves a copy of the key behind.
    let mut bytes = Zeroizing::new(Vec::with_capacity(MAX_KEY_FILE_BYTES as usize + 1));
    file.take(MAX_KEY_FILE_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_KEY_FILE_BYTES {
        return Err(std::io::Error::new(
            ErrorKind::InvalidData,
            "too large to be a key file",
        ));
    }
    let text = std::str::from_utf8(&bytes).map_err(|_| {
        std::io::Error::new(ErrorKind::InvalidData, "not text (a PEM file is ASCII)")
    })?;
    Ok(Zeroizing::new(text.to_owned()))
}
