//! Who is paying: the [`AgentId`] of an agent served by `cajaguard serve` (SPEC §13). A leaf.
//!
//! An id is a name the team gave (`cajaguard agent add <name>`) or the subject claim of an OAuth
//! access token, so it is checked like any text from outside before it is stored, hashed into a
//! request digest or shown: printable ASCII without spaces, quotes or separators a terminal, a
//! log line or a Prometheus label could misread.

use crate::Error;

/// The longest agent id accepted (an OAuth `sub` is usually a UUID or `provider|id`).
pub const MAX_AGENT_ID_BYTES: usize = 128;

/// Agents authenticated by OAuth (SPEC §13) are `oauth:<agent claim>`, a namespace no agent
/// token can name, so a token's claim can never turn into an agent made by `cajaguard agent add`.
pub const OAUTH_PREFIX: &str = "oauth:";

/// A validated agent id. Only [`AgentId::parse`] makes one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AgentId(String);

impl AgentId {
    /// 1 to 128 characters out of `A-Z a-z 0-9 . _ - @ : | +`, starting with a letter or digit.
    pub fn parse(text: &str) -> Result<AgentId, Error> {
        let allowed = |b: u8| {
            b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'@' | b':' | b'|' | b'+')
        };
        let ok = !text.is_empty()
            && text.len() <= MAX_AGENT_ID_BYTES
            && text.as_bytes()[0].is_ascii_alphanumeric()
            && text.bytes().all(allowed);
        if ok {
            Ok(AgentId(text.to_owned()))
        } else {
            Err(Error::Agent(format!(
                "not an agent id: use 1 to {MAX_AGENT_ID_BYTES} characters of letters, digits and \
                 . _ - @ : | +, starting with a letter or digit"
            )))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this id is an OAuth subject's (`oauth:...`).
    pub fn is_oauth(&self) -> bool {
        self.0.starts_with(OAUTH_PREFIX)
    }
}

impl std::fmt::Display for AgentId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_plain_printable_names() {
        for good in [
            "ci-bot",
            "auth0|5f2a",
            "alice@example.com",
            "a",
            "svc:shopper+1",
        ] {
            assert_eq!(AgentId::parse(good).unwrap().as_str(), good);
        }
        let long = "a".repeat(MAX_AGENT_ID_BYTES + 1);
        for bad in [
            "", " ci", "ci bot", "-x", "a\"b", "a\nb", "ä", "a/b", "a,b", "a=b", &long,
        ] {
            assert!(AgentId::parse(bad).is_err(), "{bad:?}");
        }
    }
}
