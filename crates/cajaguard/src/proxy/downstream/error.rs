//! How a call to the shop can fail, and what each failure means for the caller: whether the shop
//! may have acted, whether the request was ever sent, whether the config is to blame.

use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ShopError {
    #[error("cannot start the shop `{}`: {source}; check downstream.command in the config", program.display())]
    Spawn {
        program: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the shop `{0}` was not found next to cajaguard or on PATH; check downstream.command in the config"
    )]
    NotFound(String),
    #[error("the shop did not answer within {0:?}")]
    Timeout(Duration),
    #[error("the shop stopped ({0}); it is reconnected on the next call")]
    Died(String),
    #[error(
        "the shop's answer to this call was over the {0}-byte limit (downstream.max_message_bytes); \
         only this call failed"
    )]
    TooLarge(usize),
    #[error("the shop broke the MCP handshake: {0}")]
    Handshake(String),
    /// The shop answered a request, but not in a form that says what happened (neither `result`
    /// nor `error`, an unexpected content type): it may have acted on it.
    #[error("the shop's answer is unusable ({0}); it may have acted on the request")]
    Garbled(String),
    /// `downstream.bearer_token_env` names a variable that is not set (or is empty) in the
    /// environment `cajaguard` was started with.
    #[error(
        "the shop's bearer token is missing: ${0} is not set (downstream.bearer_token_env); export it \
         in the environment that starts cajaguard (for MCP clients: in the server's \"env\" block)"
    )]
    MissingToken(String),
    #[error(
        "${0} holds characters that cannot go in an HTTP header; put the bare token in it (no \
         \"Bearer \" prefix, no newline)"
    )]
    BadToken(String),
    /// 401/403. Names the variable, never its value.
    #[error("{}", unauthorized_message(*status, var.as_deref()))]
    Unauthorized { status: u16, var: Option<String> },
    /// The request never reached the shop (refused connection, DNS, TLS): nothing happened there.
    #[error("cannot reach the shop at {url}: {why}; check that it is up and downstream.url")]
    Unreachable { url: String, why: String },
    /// An HTTP status that is not an MCP answer. `unknown` when the shop may have acted on the
    /// request: every such status, except 429 and 503 on a read (retried, and a read has no
    /// effect either way).
    #[error("the shop answered HTTP {status}{}", if *unknown { " (it may have acted on the request)" } else { "" })]
    Http { status: u16, unknown: bool },
    /// HTTP 404 on a request carrying a session id: the shop forgot the session and did not
    /// process the request. `Shop::request` re-initializes and resends once.
    #[error("the shop forgot the MCP session (HTTP 404) twice in a row; it was not processed")]
    SessionExpired,
    /// A payment not sent because the gate's turn and reaching the shop (a new connection and
    /// its handshake) took longer than the shop's timeout: past that, reconciliation may take the
    /// reservation for a payment that never came and release it.
    #[error(
        "the payment was not sent: the gate and reaching the shop took longer than the shop's \
         timeout ({0:?}); nothing was paid, ask again"
    )]
    TooLateToSend(Duration),
}

fn unauthorized_message(status: u16, var: Option<&str>) -> String {
    match var {
        Some(var) => format!(
            "the shop refused the token in ${var} ({status}): check it (and that it may use the UCP MCP endpoint)"
        ),
        None => format!(
            "the shop requires authorization ({status}): put its token in an environment variable and \
             name it in downstream.bearer_token_env"
        ),
    }
}

impl ShopError {
    /// The shop could not be started or its token not read: nothing was sent, and the message
    /// names the setting to fix.
    fn before_start(&self) -> bool {
        matches!(
            self,
            ShopError::Spawn { .. }
                | ShopError::NotFound(_)
                | ShopError::MissingToken(_)
                | ShopError::BadToken(_)
        )
    }

    /// The message already says what to do, so the CLI adds no hint that repeats it.
    pub fn says_what_to_do(&self) -> bool {
        self.before_start()
            || matches!(
                self,
                ShopError::Unauthorized { .. } | ShopError::Unreachable { .. }
            )
    }

    /// True when a request may have reached the shop and its effect is unknown.
    pub fn outcome_unknown(&self) -> bool {
        match self {
            ShopError::Timeout(_)
            | ShopError::Died(_)
            | ShopError::TooLarge(_)
            | ShopError::Garbled(_) => true,
            ShopError::Http { unknown, .. } => *unknown,
            _ => false,
        }
    }

    /// Failures that happened before the request could be written: the shop cannot have acted.
    /// (An HTTP status came from the shop's side after it was written: see `outcome_unknown`.)
    pub fn never_sent(&self) -> bool {
        self.before_start()
            || matches!(
                self,
                ShopError::Unreachable { .. }
                    | ShopError::SessionExpired
                    | ShopError::TooLateToSend(_)
            )
    }

    /// Failures after which the connection is not trusted again: the next call reconnects.
    pub(super) fn drops_connection(&self) -> bool {
        matches!(
            self,
            ShopError::Died(_) | ShopError::SessionExpired | ShopError::Unreachable { .. }
        )
    }

    /// Failures that are fixed in the config or the environment, not by waiting (exit 2 at start).
    pub fn is_configuration(&self) -> bool {
        self.before_start() || matches!(self, ShopError::Unauthorized { .. })
    }
}
