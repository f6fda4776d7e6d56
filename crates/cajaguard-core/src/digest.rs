//! The names of a basket: its [`BasketDigest`] and the [`RequestId`] people see. A leaf, so that
//! rulings can carry a request id without importing how a basket is hashed
//! (`BasketDigest::of`, in `approval::basket`).

use crate::Error;

/// SHA-256 over the RFC 8785 encoding of what SPEC §6 binds a request to: merchant, checkout id,
/// currency, every `totals[]` entry, the line items (line id, item id, item title, quantity, unit
/// price), the fulfillment destinations when there are any, and the complete request's payment
/// instruments (id and handler id, never the credential). The title is in it so that an approval
/// for one product never pays for another at the same price on the same line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BasketDigest([u8; 32]);

impl BasketDigest {
    /// A digest from its 32 bytes (as stored).
    pub const fn from_bytes(bytes: [u8; 32]) -> BasketDigest {
        BasketDigest(bytes)
    }
    /// The 32 digest bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
    pub fn request_id(&self) -> RequestId {
        RequestId(format!("cg-{}", hex::encode(&self.0[..8])))
    }

    /// Parses the 64 lower-case hex digits of [`BasketDigest::to_hex`].
    pub fn from_hex(text: &str) -> Option<BasketDigest> {
        if text.len() != 64 || !text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return None;
        }
        let mut out = [0u8; 32];
        hex::decode_to_slice(text, &mut out).ok()?;
        Some(BasketDigest(out))
    }
}

/// `cg-` and the first 16 hex digits of the basket digest.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(String);

impl RequestId {
    /// Accepts exactly `cg-` + 16 lower-case hex digits (safe as a file name).
    pub fn parse(text: &str) -> Result<RequestId, Error> {
        let ok = text.len() == 19
            && text.starts_with("cg-")
            && text
                .bytes()
                .skip(3)
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if ok {
            Ok(RequestId(text.to_owned()))
        } else {
            Err(Error::ApprovalFormat(
                "not a request id: expected `cg-` and 16 lower-case hex digits, as printed by the gate".to_owned(),
            ))
        }
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_the_digest_prefix_and_parse_strictly() {
        let digest = BasketDigest::from_bytes([0xab; 32]);
        assert_eq!(digest.request_id().as_str(), "cg-abababababababab");
        assert_eq!(BasketDigest::from_hex(&digest.to_hex()), Some(digest));
        assert!(RequestId::parse("cg-abababababababab").is_ok());
        for bad in [
            "cg-ABABABABABABABAB",
            "cg-abab",
            "xx-abababababababab",
            "cg-../../etc/passw",
        ] {
            assert!(RequestId::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(BasketDigest::from_hex(&"A".repeat(64)), None);
    }
}
