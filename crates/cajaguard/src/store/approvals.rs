//! Signed approvals and their single use: what the gate sees for a request id, marking a nonce
//! used, and the status a human or the agent may learn. Where the signed documents are kept is the
//! backend's business (files in `<home>/approvals/` with SQLite, the `approvals` table with
//! PostgreSQL); the rules are here, once.

use std::time::Duration;

use cajaguard_core::approval::{self, ApprovalDocument, Decision, RequestId, TrustedKeys};
use cajaguard_core::effect::ApprovalCandidate;
use cajaguard_core::passkey::{self, PasskeyRegistry, RelyingParty};
use time::OffsetDateTime;

use super::pending::digest_from_hex;
use super::tx::Tx;
use super::{ApprovalStatus, StoreError, micros};

pub(super) fn candidates(
    tx: &mut dyn Tx,
    documents: Vec<ApprovalDocument>,
) -> Result<Vec<ApprovalCandidate>, StoreError> {
    documents
        .into_iter()
        .map(|document| {
            let used = tx.is_used(&document.nonce)?;
            Ok(ApprovalCandidate { document, used })
        })
        .collect()
}

/// Marks `nonce` used. If it was used already the transaction fails and nothing is forwarded (the
/// gate saw it unused inside this same transaction, so that would be a bug).
pub(super) fn mark_used(
    tx: &mut dyn Tx,
    nonce: &str,
    request_id: &RequestId,
    checkout_id: &str,
    now: OffsetDateTime,
) -> Result<(), StoreError> {
    tx.insert_used(nonce, request_id, checkout_id, micros(now))?;
    tx.mark_pending_used(request_id)
}

pub(super) fn status(
    tx: &mut dyn Tx,
    id: &RequestId,
    trusted: &TrustedKeys,
    passkeys: Option<&RelyingParty>,
    now: OffsetDateTime,
    max_ttl: Duration,
) -> Result<ApprovalStatus, StoreError> {
    let pending = tx.pending_get(id)?;
    let docs = tx.approval_documents(id)?;
    let passkey_docs = match passkeys {
        Some(_) => super::passkeys::documents(tx, id)?,
        None => Vec::new(),
    };
    if pending.is_none() && docs.is_empty() && passkey_docs.is_empty() {
        return Ok(ApprovalStatus::Invalid);
    }
    let expected = pending.map(|row| row.request.digest);
    let mut status = ApprovalStatus::Pending;
    for doc in &docs {
        if tx.is_used(&doc.nonce)? {
            // The gate verified it when it used it; expired since or not, it is spent.
            if status == ApprovalStatus::Pending {
                status = ApprovalStatus::Used;
            }
            continue;
        }
        // Without a pending request (the file was moved here from another home) the document's own
        // digest is the only basket there is, and it must be the one `id` names.
        let digest = match expected {
            Some(digest) => digest,
            None => match digest_from_hex(&doc.digest) {
                Some(digest) if digest.request_id() == *id => digest,
                _ => continue,
            },
        };
        match approval::verify(doc, trusted, &digest, now, max_ttl) {
            Ok(verified) if verified.decision() == Decision::Deny => {
                return Ok(ApprovalStatus::Denied);
            }
            Ok(_) => status = ApprovalStatus::Approved,
            Err(_) => {}
        }
    }
    if let (Some(rp), false) = (passkeys, passkey_docs.is_empty()) {
        let records: Vec<_> = tx.passkey_list()?.into_iter().map(|r| r.passkey).collect();
        // A stored passkey that no longer parses makes no passkey approval valid (fail closed).
        let registry = PasskeyRegistry::new(&records).unwrap_or_default();
        for doc in &passkey_docs {
            if tx.is_used(&doc.terms.nonce)? {
                if status == ApprovalStatus::Pending {
                    status = ApprovalStatus::Used;
                }
                continue;
            }
            let digest = match expected {
                Some(digest) => digest,
                None => match digest_from_hex(&doc.terms.digest) {
                    Some(digest) if digest.request_id() == *id => digest,
                    _ => continue,
                },
            };
            match passkey::verify_passkey_approval(doc, &registry, rp, &digest, now, max_ttl) {
                Ok(verified) if verified.decision() == Decision::Deny => {
                    return Ok(ApprovalStatus::Denied);
                }
                Ok(_) => status = ApprovalStatus::Approved,
                Err(_) => {}
            }
        }
    }
    Ok(status)
}

/// The checks every backend makes before filing a document: its request id is one, and its nonce
/// is hex (the SQLite backend names the file after both).
// Only the PostgreSQL backend files documents through this so far.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(super) fn check_fileable(doc: &ApprovalDocument) -> Result<(RequestId, String), String> {
    let id = RequestId::parse(&doc.request_id)
        .map_err(|_| "the approval's request id is not a CajaGuard request id (cg-<hex>)")?;
    let nonce = doc.nonce.to_ascii_lowercase();
    if nonce.len() < 8 || nonce.len() > 128 || !nonce.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err("the approval's nonce is not hex".to_owned());
    }
    Ok((id, nonce))
}
