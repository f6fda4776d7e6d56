//! The JSON readers every section of the config uses: each error names the file, the exact JSON
//! path (`$.caps.USD.window`) and what to do.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::ConfigOrigin;
use crate::Error;

/// `.key` for plain keys, `["..."]` (JSON-escaped) for anything else, so a path is unambiguous.
pub(super) fn push_key(path: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key.len() <= 64
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if plain {
        format!("{path}.{key}")
    } else {
        let shown: String = key.chars().take(64).collect();
        let quoted = serde_json::to_string(&shown).unwrap_or_else(|_| "\"?\"".to_owned());
        format!("{path}[{quoted}]")
    }
}

/// The file being read: every error names it and the JSON path.
pub(super) struct Cx<'o, 'a> {
    pub(super) origin: &'o ConfigOrigin<'a>,
}

impl Cx<'_, '_> {
    pub(super) fn err(&self, json_path: &str, message: impl Into<String>) -> Error {
        Error::Config {
            file: self.origin.path.to_path_buf(),
            json_path: json_path.to_owned(),
            message: message.into(),
        }
    }

    pub(super) fn dir(&self) -> PathBuf {
        self.origin
            .path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default()
    }

    pub(super) fn object<'v>(
        &self,
        v: &'v Value,
        path: &str,
    ) -> Result<&'v Map<String, Value>, Error> {
        v.as_object()
            .ok_or_else(|| self.err(path, format!("must be a JSON object, not {}", kind(v))))
    }

    pub(super) fn string<'v>(&self, v: &'v Value, path: &str) -> Result<&'v str, Error> {
        v.as_str()
            .ok_or_else(|| self.err(path, format!("must be a string, not {}", kind(v))))
    }

    pub(super) fn array<'v>(&self, v: &'v Value, path: &str) -> Result<&'v Vec<Value>, Error> {
        v.as_array()
            .ok_or_else(|| self.err(path, format!("must be an array, not {}", kind(v))))
    }

    pub(super) fn required<'v>(
        &self,
        obj: &'v Map<String, Value>,
        path: &str,
        key: &str,
    ) -> Result<&'v Value, Error> {
        obj.get(key).ok_or_else(|| {
            self.err(
                &push_key(path, key),
                "is required: add it (see SPEC §2 for an example)",
            )
        })
    }

    pub(super) fn only(
        &self,
        obj: &Map<String, Value>,
        path: &str,
        allowed: &[&str],
    ) -> Result<(), Error> {
        for key in obj.keys() {
            if !allowed.contains(&key.as_str()) {
                return Err(self.err(
                    &push_key(path, key),
                    format!(
                        "unknown field: remove it or fix its spelling (allowed here: {})",
                        allowed.join(", ")
                    ),
                ));
            }
        }
        Ok(())
    }

    pub(super) fn bounded_int(
        &self,
        v: &Value,
        path: &str,
        min: u64,
        max: u64,
    ) -> Result<u64, Error> {
        match v.as_u64() {
            Some(n) if (min..=max).contains(&n) => Ok(n),
            _ => Err(self.err(path, format!("must be a whole number from {min} to {max}"))),
        }
    }

    /// `~` and `~/x` expand to the user's home; other relative paths resolve against the config's directory.
    pub(super) fn path(&self, text: &str, json_path: &str) -> Result<PathBuf, Error> {
        if text.is_empty() {
            return Err(self.err(json_path, "must not be empty: give a path"));
        }
        if text.contains('\0') {
            return Err(self.err(json_path, "must not contain a NUL character"));
        }
        if let Some(rest) = text.strip_prefix('~') {
            let rest = if rest.is_empty() {
                ""
            } else if let Some(r) = rest.strip_prefix('/') {
                r
            } else {
                return Err(self.err(
                    json_path,
                    "`~user` is not supported: write `~/...` or a full path",
                ));
            };
            let Some(home) = self.origin.user_home else {
                return Err(self.err(json_path, "starts with `~` but the home directory is unknown: set HOME or write a full path"));
            };
            return Ok(if rest.is_empty() {
                home.to_path_buf()
            } else {
                home.join(rest)
            });
        }
        let p = Path::new(text);
        Ok(if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.dir().join(p)
        })
    }
}

pub(super) fn last_line(s: &str) -> String {
    s.lines()
        .last()
        .unwrap_or("")
        .trim()
        .chars()
        .take(120)
        .collect()
}

pub(super) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
