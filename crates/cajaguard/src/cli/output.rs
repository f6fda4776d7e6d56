//! What several subcommands print the same way: paths a person can paste, and `--json` documents.

use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use super::{Failure, Outcome};

/// A path as a person should see it: the real path when it exists, else the absolute path with
/// `.` and `..` folded (a config's `"home": "../x"` otherwise shows as `examples/../x`).
pub fn shown(path: &Path) -> String {
    if let Ok(real) = std::fs::canonicalize(path) {
        return real.display().to_string();
    }
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut folded = PathBuf::new();
    for part in absolute.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                if !folded.pop() {
                    folded.push(part);
                }
            }
            other => folded.push(other),
        }
    }
    folded.display().to_string()
}

/// One JSON document on stdout (the `--json` contract: scripts read exactly one).
pub fn print_json(document: &Value) -> Result<(), Failure> {
    let text =
        serde_json::to_string_pretty(document).map_err(|e| Failure::unexpected(e.to_string()))?;
    println!("{text}");
    Ok(())
}

/// With `--json`, a failure is a JSON document on stdout as well (same exit code, and the usual
/// lines on stderr), so a script reading stdout always gets one document.
pub fn json_outcome(json: bool, outcome: Outcome) -> Outcome {
    if let (true, Err(failure)) = (json, &outcome) {
        let document = serde_json::json!({
            "error": {
                "exit_code": failure.exit.code(),
                "message": failure.message,
                "hint": failure.hint,
            }
        });
        print_json(&document)?;
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::shown;
    use std::path::Path;

    #[test]
    fn a_path_that_does_not_exist_is_folded() {
        assert_eq!(
            shown(Path::new("/nonexistent-cg/examples/../.cajaguard/./home")),
            "/nonexistent-cg/.cajaguard/home"
        );
    }
}
