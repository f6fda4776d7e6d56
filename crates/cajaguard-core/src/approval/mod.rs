//! Human approvals (SPEC §6), one idea a file: `basket` (how a basket is hashed into its
//! [`BasketDigest`]), `keys` (Ed25519 keys as PEM), `document` (the signed approval file and
//! [`sign`]), `verify` (the checks, and [`VerifiedApproval`], which only [`verify`] builds), and
//! `jcs` (the hand-written RFC 8785 both hash and signature use).

use std::time::Duration;

mod basket;
mod document;
pub(crate) mod jcs;
mod keys;
mod verify;

pub use crate::digest::{BasketDigest, RequestId};
pub use document::{ApprovalDocument, ApprovalTerms, Decision, sign};
pub use keys::{PublicKey, SigningKey, TrustedKeys};
pub use verify::{Rejection, VerifiedApproval, signed_by_trusted, verify};

/// Domain separation for approval signatures (see `document`).
pub const SIGNING_CONTEXT: &[u8] = b"cajaguard-approval-v1\0";
/// The only approval document version this code reads and writes.
pub const APPROVAL_VERSION: u32 = 1;
/// How far in the future `issued_at` may be, for a signer whose clock runs ahead.
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(5 * 60);
