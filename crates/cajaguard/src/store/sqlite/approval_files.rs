//! Signed approvals as JSON files in `<home>/approvals/` (a human can move them between homes).
//! Their use is recorded in the database's `used_approvals` table.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use cajaguard_core::approval::{ApprovalDocument, RequestId};

use crate::store::StoreError;

pub(crate) const APPROVALS_DIR: &str = "approvals";

/// An approval file is a few hundred bytes; anything much larger is not one.
const MAX_APPROVAL_BYTES: u64 = 64 * 1024;

/// Whether a file name in `approvals/` belongs to `id`: `<id>.json` or `<id>-<anything>.json`.
fn belongs_to(name: &str, id: &RequestId) -> bool {
    name.strip_prefix(id.as_str())
        .and_then(|rest| rest.strip_suffix(".json"))
        .is_some_and(|middle| middle.is_empty() || middle.starts_with('-'))
}

/// The approval documents filed for `id`, in file-name order. Links, directories and files that do
/// not parse are skipped (with a warning for the latter): a planted or broken file can never make
/// the gate fail or read outside the home.
pub(super) fn load(
    dir: &Path,
    id: &RequestId,
) -> Result<Vec<(PathBuf, ApprovalDocument)>, StoreError> {
    load_where(dir, &|name| belongs_to(name, id))
}

/// Every approval document in `dir` (for the checkpoints they commit to), skipping as [`load`] does.
pub(super) fn load_all(dir: &Path) -> Result<Vec<(PathBuf, ApprovalDocument)>, StoreError> {
    load_where(dir, &|name| name.ends_with(".json"))
}

fn load_where(
    dir: &Path,
    wanted: &dyn Fn(&str) -> bool,
) -> Result<Vec<(PathBuf, ApprovalDocument)>, StoreError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        // A human removed the folder: there are no approvals, which blocks nothing that needs none.
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(StoreError::Open {
                path: dir.to_path_buf(),
                source,
            });
        }
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| StoreError::Open {
            path: dir.to_path_buf(),
            source,
        })?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if wanted(&name) {
            names.push(name);
        }
    }
    names.sort();
    let mut docs = Vec::new();
    for name in names {
        let path = dir.join(&name);
        match read_regular(&path) {
            Ok(Some(text)) => match ApprovalDocument::from_json(&text) {
                Ok(doc) => docs.push((path, doc)),
                Err(e) => {
                    tracing::warn!(file = %path.display(), error = %e, "skipping an approval file that does not parse")
                }
            },
            Ok(None) => {
                tracing::warn!(file = %path.display(), "skipping an approval entry that is not a regular file")
            }
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "skipping an unreadable approval file")
            }
        }
    }
    Ok(docs)
}

/// The file's text if it is a regular file (not a link) of sane size. The opened file is checked to
/// be the one that was inspected, so a link swapped in between is not followed.
fn read_regular(path: &Path) -> std::io::Result<Option<String>> {
    let before = fs::symlink_metadata(path)?;
    if !before.file_type().is_file() {
        return Ok(None);
    }
    let file = File::open(path)?;
    let opened = file.metadata()?;
    if !opened.is_file() || opened.ino() != before.ino() || opened.dev() != before.dev() {
        return Ok(None);
    }
    if opened.len() > MAX_APPROVAL_BYTES {
        return Err(std::io::Error::new(
            ErrorKind::InvalidData,
            "larger than an approval file can be",
        ));
    }
    let mut text = String::new();
    file.take(MAX_APPROVAL_BYTES).read_to_string(&mut text)?;
    Ok(Some(text))
}

/// A name safe to put in a path: no separators, no dots up front, nothing exotic.
fn safe_component(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 128
        && !text.starts_with('.')
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

pub(super) fn write(dir: &Path, doc: &ApprovalDocument) -> Result<PathBuf, StoreError> {
    let nonce_prefix = doc
        .nonce
        .get(..8)
        .filter(|p| p.chars().all(|c| c.is_ascii_hexdigit()));
    let (Some(nonce_prefix), true) = (nonce_prefix, safe_component(&doc.request_id)) else {
        return Err(StoreError::Write {
            path: dir.to_path_buf(),
            source: std::io::Error::new(
                ErrorKind::InvalidInput,
                "the approval's request id or nonce cannot name a file (expected cg-<hex> and a hex nonce)",
            ),
        });
    };
    let target = dir.join(format!(
        "{}-{}.json",
        doc.request_id,
        nonce_prefix.to_ascii_lowercase()
    ));
    let mut text = serde_json::to_string_pretty(doc).map_err(|e| StoreError::Write {
        path: target.clone(),
        source: std::io::Error::new(ErrorKind::InvalidData, e.to_string()),
    })?;
    text.push('\n');

    let mut random = [0_u8; 8];
    getrandom::fill(&mut random).map_err(|e| StoreError::Write {
        path: target.clone(),
        source: std::io::Error::other(format!("no randomness for a temporary file name: {e}")),
    })?;
    // A leading dot: the gate only reads `cg-…` names, so a half-written temp file is never read.
    let temp = dir.join(format!(".tmp-{}.json", hex::encode(random)));
    let result = write_new(&temp, text.as_bytes()).and_then(|()| {
        // A hard link is rename without clobbering: it fails if the target exists.
        fs::hard_link(&temp, &target).map_err(|source| StoreError::Write {
            path: target.clone(),
            source,
        })
    });
    if let Err(e) = fs::remove_file(&temp)
        && e.kind() != ErrorKind::NotFound
    {
        tracing::warn!(file = %temp.display(), error = %e, "cannot remove a temporary approval file");
    }
    match result {
        Err(StoreError::Write { source, .. }) if source.kind() == ErrorKind::AlreadyExists => {
            return Err(StoreError::ApprovalExists {
                request_id: doc.request_id.clone(),
            });
        }
        other => other?,
    }
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| StoreError::Write {
            path: dir.to_path_buf(),
            source,
        })?;
    Ok(target)
}

fn write_new(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let write = || -> std::io::Result<()> {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)?;
        file.write_all(bytes)?;
        file.sync_all()
    };
    write().map_err(|source| StoreError::Write {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_components() {
        assert!(safe_component("cg-0123456789abcdef"));
        assert!(!safe_component("../etc"));
        assert!(!safe_component("a/b"));
        assert!(!safe_component(".hidden"));
        assert!(!safe_component(""));
    }
}
