//! Hand-written RFC 8785 (JCS) for the two fixed shapes hashed and signed here, the basket and the
//! approval's signed fields: keys written in JCS order, strings escaped as serde_json does (which
//! is what JCS prescribes), integers in decimal. `serde_json_canonicalizer` takes ~10 µs per call
//! on the gate's hot path; this takes well under one. Integers beyond ±(2^53-1) would need JCS's
//! float formatting, so those fall back to the crate ([`canonical`]); tests check both paths give
//! the same bytes.

use std::io::Write as _;

use crate::money::MAX_MINOR;

/// RFC 8785 bytes of a value built from strings and integers, which cannot fail to encode; the
/// fallback only exists so that no panic path is reachable.
pub(crate) fn canonical<S: serde::Serialize>(value: &S) -> Vec<u8> {
    serde_json_canonicalizer::to_vec(value).unwrap_or_default()
}

/// Whether `i` is written the same by this encoder and by JCS.
pub(crate) fn safe(i: i64) -> bool {
    (-MAX_MINOR..=MAX_MINOR).contains(&i)
}

pub(crate) fn str(out: &mut Vec<u8>, s: &str) {
    // Writing into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

pub(crate) fn int(out: &mut Vec<u8>, i: i64) {
    let _ = write!(out, "{i}");
}

pub(crate) fn key(out: &mut Vec<u8>, first: bool, k: &str) {
    if !first {
        out.push(b',');
    }
    out.push(b'"');
    out.extend_from_slice(k.as_bytes());
    out.extend_from_slice(b"\":");
}
