//! A bearer token read from the environment (the shop's, and the bridge's agent token), held as
//! its `Authorization` header value and wiped when dropped. Deliberately without `Debug` or
//! `Display`: it cannot end up in a log line or an error by accident.

use std::ffi::OsString;

use ureq::http::HeaderValue;
use zeroize::Zeroize;

pub(crate) struct BearerToken {
    header: String,
}

impl BearerToken {
    /// From a variable's value, wiped as it is read: `None` unless it is printable ASCII that
    /// makes a valid header value (the caller names the variable, never the value).
    pub(crate) fn from_env_value(mut raw: OsString) -> Option<BearerToken> {
        let text = raw.to_str().map(str::to_owned);
        raw.clear();
        let mut text = text?;
        let printable = text.bytes().all(|b| (0x21..0x7f).contains(&b));
        let token = BearerToken {
            header: format!("Bearer {text}"),
        };
        text.zeroize();
        (printable && token.header_value().is_some()).then_some(token)
    }

    pub(crate) fn header_value(&self) -> Option<HeaderValue> {
        let mut value = HeaderValue::from_str(&self.header).ok()?;
        // Hidden from the http crate's Debug output. The copy in the header itself cannot be
        // wiped (it lives in the HTTP client's buffers until they are reused).
        value.set_sensitive(true);
        Some(value)
    }
}

impl Drop for BearerToken {
    fn drop(&mut self) {
        self.header.zeroize();
    }
}
