//! Retrying reads the shop throttled (429, 503): only calls that cannot act twice, at most
//! [`MAX_READ_RETRIES`] times, waiting as the shop's `Retry-After` says (within a cap) or backing
//! off, and never past the call's timeout.

use std::time::{Duration, Instant};

use super::super::{Reply, ShopError};
use super::{HttpLink, Posted};

/// Reads are retried on 429/503 at most this many times, and never past the call's timeout.
const MAX_READ_RETRIES: u32 = 3;
/// First backoff; doubled on each retry.
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
/// A `Retry-After` longer than this is not waited for: the caller gets the error instead.
const RETRY_AFTER_CAP: Duration = Duration::from_secs(5);

/// UCP tools that only read. Only these (and the handshake) are retried after 429/503: a retry of
/// anything that writes could act twice.
const READ_TOOLS: &[&str] = &[
    "get_checkout",
    "get_cart",
    "get_order",
    "get_product",
    "search_catalog",
    "lookup_catalog",
];

impl HttpLink {
    /// POSTs a request until it is answered, retrying a throttled read (see the module comment).
    /// `timeout` bounds the whole call, waits included.
    pub(super) fn post_request(
        &self,
        body: &str,
        id: u64,
        read: bool,
        timeout: Duration,
    ) -> Result<Reply, ShopError> {
        let deadline = Instant::now() + timeout;
        let mut retries = 0;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ShopError::Timeout(timeout));
            }
            match self.post(body, Some(id), left) {
                Ok(Posted::Answer(reply)) => return Ok(reply),
                Ok(Posted::Accepted) => {
                    return Err(ShopError::Http {
                        status: 202,
                        unknown: true,
                    });
                }
                Ok(Posted::Throttled {
                    status,
                    retry_after,
                }) => {
                    let wait = wait_before_retry(retries, retry_after);
                    let give_up = !read
                        || retries >= MAX_READ_RETRIES
                        || wait.is_none_or(|w| Instant::now() + w >= deadline);
                    if give_up {
                        // A read had no effect either way. A write may have: a gateway in front
                        // of the shop answers 503 when the shop took too long, after passing
                        // the request on (SPEC §4.13: an unexpected status is an unknown
                        // outcome, never the shop's word that it did not act).
                        return Err(ShopError::Http {
                            status,
                            unknown: !read,
                        });
                    }
                    if let Some(wait) = wait {
                        std::thread::sleep(wait);
                    }
                    retries += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// Whether a call only reads, so that sending it twice cannot act twice.
pub(super) fn is_read(method: &str, params: Option<&str>) -> bool {
    match method {
        "initialize" | "server/discover" | "tools/list" | "ping" => true,
        "tools/call" => {
            #[derive(serde::Deserialize)]
            struct Call<'a> {
                #[serde(borrow)]
                name: std::borrow::Cow<'a, str>,
            }
            params
                .and_then(|p| serde_json::from_str::<Call<'_>>(p).ok())
                .is_some_and(|call| READ_TOOLS.contains(&call.name.as_ref()))
        }
        _ => false,
    }
}

/// How long to wait before retry number `retries + 1`: the shop's `Retry-After` when it gave one
/// (`None` if over the cap: not worth waiting for), else an exponential backoff.
fn wait_before_retry(retries: u32, retry_after: Option<Duration>) -> Option<Duration> {
    match retry_after {
        Some(after) if after > RETRY_AFTER_CAP => None,
        Some(after) => Some(after),
        None => Some(FIRST_BACKOFF * 2u32.saturating_pow(retries)),
    }
}

/// `Retry-After` in seconds. The HTTP-date form is not read (the backoff applies instead).
pub(super) fn parse_retry_after(value: &str) -> Option<Duration> {
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_reads_are_retried() {
        assert!(is_read("tools/list", None));
        assert!(is_read(
            "tools/call",
            Some(r#"{"name":"get_checkout","arguments":{}}"#)
        ));
        for write in [
            "complete_checkout",
            "create_checkout",
            "update_checkout",
            "cancel_checkout",
        ] {
            let params = format!(r#"{{"name":"{write}","arguments":{{}}}}"#);
            assert!(!is_read("tools/call", Some(&params)), "{write}");
        }
    }

    #[test]
    fn retry_after_is_honoured_up_to_a_cap() {
        assert_eq!(parse_retry_after(" 2 "), Some(Duration::from_secs(2)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        let one = Some(Duration::from_secs(1));
        assert_eq!(wait_before_retry(0, one), one);
        assert_eq!(wait_before_retry(0, Some(Duration::from_secs(60))), None);
        assert_eq!(wait_before_retry(2, None), Some(FIRST_BACKOFF * 4));
    }
}
