//! Passkeys (SPEC §6 "Approvals an agent cannot make"): the registered passkeys and their
//! signature counters, one-time registration links, and passkey approvals. The rules are here,
//! once, against [`PasskeyTx`]; `sqlite/passkeys.rs` and `postgres/passkeys.rs` only hold SQL.
//!
//! **Where passkey approvals live.** In the database on both backends (table
//! `passkey_approvals`), unlike key-file approvals, which SQLite keeps as files in
//! `<home>/approvals/`. A key-file approval verifies anywhere its public key is trusted, so a file a
//! human can move between homes is useful; a passkey approval verifies only against the passkey
//! registered in this store (its key and its counter), so it means nothing apart from the
//! database that holds the passkey. Keeping both in one place makes filing a plain insert whose
//! primary key refuses a second document with the same nonce, and moves or backs them up together.
//! The document is kept as written (terms and assertion), so `cajaguard show --json` can hand it to
//! anyone to verify offline.
//!
//! **Removal keeps the row.** A removed passkey is marked, not deleted: the first passkey is
//! trusted on first use only while the store has never had one, and a removal (which anyone on
//! the machine may do, and which only takes approvals away) must not reopen that door.

use cajaguard_core::approval::RequestId;
use cajaguard_core::effect::{PasskeyCandidate, PasskeyCounter};
use cajaguard_core::freeze::Frozen;
use cajaguard_core::passkey::{
    Algorithm, PasskeyApproval, RegisteredPasskey, VerifiedPasskeyUnfreeze,
};
use sha2::{Digest as _, Sha256};
use time::OffsetDateTime;

use super::audit::PasskeyEvent;
use super::tx::Tx;
use super::{AuditEvent, AuditRecord, Store, StoreError, from_micros, micros};

/// A one-time registration link lives this long (SPEC §6).
pub const LINK_TTL: std::time::Duration = std::time::Duration::from_secs(5 * 60);

/// A registered passkey as listed: the record and when it was registered.
#[derive(Debug, Clone)]
pub struct PasskeyRow {
    pub passkey: RegisteredPasskey,
    pub created_at: OffsetDateTime,
}

impl PasskeyRow {
    /// How the CLI and the page name a passkey: its credential id in hex.
    pub fn id(&self) -> String {
        hex::encode(&self.passkey.credential_id)
    }
}

/// A registration link as stored (the token itself is never stored, only its SHA-256).
pub(super) struct LinkRow {
    pub name: String,
    pub expires_us: i64,
    pub used: bool,
}

/// The statements the passkey rules run, inside the same transactions as [`Tx`]'s.
pub(super) trait PasskeyTx {
    /// Registered passkeys, not removed, oldest first.
    fn passkey_list(&mut self) -> Result<Vec<PasskeyRow>, StoreError>;
    /// The passkeys removed, each with when: what they signed before still vouches for the log.
    fn passkey_list_removed(&mut self) -> Result<Vec<(PasskeyRow, OffsetDateTime)>, StoreError>;
    /// Makes every other registration wait until this transaction ends, so two first
    /// registrations cannot both see an empty table and both be trusted on first use. SQLite:
    /// nothing to do (`BEGIN IMMEDIATE`). PostgreSQL: a transaction advisory lock.
    fn lock_passkeys(&mut self) -> Result<(), StoreError>;
    /// Whether any passkey was ever registered (removed ones included).
    fn passkey_ever(&mut self) -> Result<bool, StoreError>;
    /// The passkey with this credential id, unless removed.
    fn passkey_get(
        &mut self,
        credential_id: &[u8],
    ) -> Result<Option<RegisteredPasskey>, StoreError>;
    /// Inserts; `false` if the credential id is registered already (removed ones included).
    fn passkey_insert(&mut self, p: &RegisteredPasskey, at_us: i64) -> Result<bool, StoreError>;
    /// Marks removed; `false` if there was no such live passkey.
    fn passkey_remove(&mut self, credential_id: &[u8], at_us: i64) -> Result<bool, StoreError>;
    /// `sign_count = to` where it is still `from`; `false` if it no longer was.
    fn passkey_set_count(
        &mut self,
        credential_id: &[u8],
        from: u32,
        to: u32,
    ) -> Result<bool, StoreError>;
    fn link_insert(
        &mut self,
        token_hash: &str,
        name: &str,
        expires_us: i64,
    ) -> Result<(), StoreError>;
    fn link_get(&mut self, token_hash: &str) -> Result<Option<LinkRow>, StoreError>;
    /// Marks used; `false` if it was used already.
    fn link_use(&mut self, token_hash: &str) -> Result<bool, StoreError>;
    /// Files a passkey approval; `false` if one with this nonce is filed already.
    fn passkey_approval_insert(
        &mut self,
        id: &RequestId,
        nonce: &str,
        document: &str,
        at_us: i64,
    ) -> Result<bool, StoreError>;
    /// The passkey approval documents as written (JSON), oldest first.
    fn passkey_approval_texts(&mut self, id: &RequestId) -> Result<Vec<String>, StoreError>;
}

/// The documents filed for `id`; one that no longer parses is skipped with a warning, as a broken
/// approval file is: it can never make the gate fail or pass.
pub(super) fn documents(
    tx: &mut dyn Tx,
    id: &RequestId,
) -> Result<Vec<PasskeyApproval>, StoreError> {
    Ok(parse(id, tx.passkey_approval_texts(id)?))
}

/// The passkey approvals filed for `id`, from their stored texts; one that does not parse is
/// skipped (never a reason for the gate to fail or to pass).
pub(super) fn parse(id: &RequestId, texts: Vec<String>) -> Vec<PasskeyApproval> {
    let mut docs = Vec::new();
    for text in texts {
        match PasskeyApproval::from_json(&text) {
            Ok(doc) => docs.push(doc),
            Err(e) => {
                tracing::warn!(request_id = id.as_str(), error = %e, "skipping a stored passkey approval that does not parse")
            }
        }
    }
    docs
}

/// The gate's passkey candidates: each document with the passkey it names, as read now.
pub(super) fn candidates(
    tx: &mut dyn Tx,
    documents: Vec<PasskeyApproval>,
) -> Result<Vec<PasskeyCandidate>, StoreError> {
    documents
        .into_iter()
        .map(|document| {
            let passkey = tx.passkey_get(&document.assertion.credential_id)?;
            let used = tx.is_used(&document.terms.nonce)?;
            Ok(PasskeyCandidate {
                document,
                passkey,
                used,
            })
        })
        .collect()
}

/// Keeps the counter the verified assertion carried. The gate read `from` in this transaction;
/// on PostgreSQL a gate in another currency may have moved it since, and then this one fails and
/// nothing is forwarded.
pub(super) fn advance(tx: &mut dyn Tx, counter: &PasskeyCounter) -> Result<(), StoreError> {
    if tx.passkey_set_count(&counter.credential_id, counter.from, counter.to)? {
        Ok(())
    } else {
        Err(StoreError::Inconsistent(
            "the passkey's signature counter moved while this payment was decided (another approval by the same passkey was used at once); nothing was forwarded: retry the payment".into(),
        ))
    }
}

/// The stored form of a registration token: its SHA-256, hex.
pub fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// What registering through a link found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkState {
    /// Usable; the name `passkey add` gave.
    Open { name: String },
    /// Unknown, expired or used.
    Closed,
}

impl Store {
    /// The registered passkeys, oldest first.
    pub fn passkeys(&self) -> Result<Vec<PasskeyRow>, StoreError> {
        self.read(&mut |tx| tx.passkey_list())
    }

    /// The passkeys removed, each with when it was removed, oldest first.
    pub fn removed_passkeys(&self) -> Result<Vec<(PasskeyRow, OffsetDateTime)>, StoreError> {
        self.read(&mut |tx| tx.passkey_list_removed())
    }

    /// Whether the next registration is trusted on first use: no passkey was ever registered.
    pub fn passkey_first_use(&self) -> Result<bool, StoreError> {
        self.read(&mut |tx| Ok(!tx.passkey_ever()?))
    }

    /// Records a one-time registration link for `token` (only its hash is kept).
    pub fn create_registration_link(
        &self,
        token: &str,
        name: &str,
        now: OffsetDateTime,
        audit: &AuditRecord,
    ) -> Result<(), StoreError> {
        let expires = micros(now) + i64::try_from(LINK_TTL.as_micros()).unwrap_or(i64::MAX);
        let hash = token_hash(token);
        self.write(&mut |tx| {
            tx.link_insert(&hash, name, expires)?;
            super::log::append(tx, AuditEvent::Passkey(PasskeyEvent::LinkIssued), audit)
        })
    }

    /// Whether `token` names a link still usable at `now`.
    pub fn registration_link(
        &self,
        token: &str,
        now: OffsetDateTime,
    ) -> Result<LinkState, StoreError> {
        let hash = token_hash(token);
        self.read(&mut |tx| {
            Ok(match tx.link_get(&hash)? {
                Some(link) if !link.used && micros(now) < link.expires_us => {
                    LinkState::Open { name: link.name }
                }
                _ => LinkState::Closed,
            })
        })
    }

    /// Registers `passkey` through the link `token`, in one transaction: the link must still be
    /// open (it is used up), the credential id new, and — unless `approver` (a passkey already
    /// registered that approved this one, with its counter move) is given — the store must never
    /// have had a passkey (trust on first use). Audited.
    pub fn register_passkey(
        &self,
        token: &str,
        passkey: &RegisteredPasskey,
        approver: Option<&PasskeyCounter>,
        now: OffsetDateTime,
        audit: &AuditRecord,
    ) -> Result<(), StoreError> {
        let hash = token_hash(token);
        self.write(&mut |tx| {
            tx.lock_passkeys()?;
            match tx.link_get(&hash)? {
                Some(link) if !link.used && micros(now) < link.expires_us => {}
                _ => return Err(StoreError::PasskeyRefused(
                    "the registration link is unknown, used or expired: run `cajaguard passkey add` again",
                )),
            }
            match approver {
                None if tx.passkey_ever()? => {
                    return Err(StoreError::PasskeyRefused(
                        "a passkey is registered already: approve the new one with an existing passkey",
                    ));
                }
                None => {}
                Some(counter) => advance(tx, counter)?,
            }
            if !tx.link_use(&hash)? {
                return Err(StoreError::PasskeyRefused(
                    "the registration link was used already: run `cajaguard passkey add` again",
                ));
            }
            if !tx.passkey_insert(passkey, micros(now))? {
                return Err(StoreError::PasskeyRefused(
                    "this passkey is registered already (or was, and was removed): use another authenticator",
                ));
            }
            super::log::append(tx, AuditEvent::Passkey(PasskeyEvent::Registered), audit)
        })
    }

    /// Marks the passkey whose hex id starts with `id_prefix` removed. Audited. `Ok(None)`: no
    /// passkey, or more than one, matches.
    pub fn remove_passkey(
        &self,
        id_prefix: &str,
        now: OffsetDateTime,
        audit: &AuditRecord,
    ) -> Result<Option<PasskeyRow>, StoreError> {
        let prefix = id_prefix.to_ascii_lowercase();
        self.write(&mut |tx| {
            let matching: Vec<PasskeyRow> = tx
                .passkey_list()?
                .into_iter()
                .filter(|row| !prefix.is_empty() && row.id().starts_with(&prefix))
                .collect();
            let [row] = matching.as_slice() else {
                return Ok(None);
            };
            if !tx.passkey_remove(&row.passkey.credential_id, micros(now))? {
                return Ok(None);
            }
            // A passkey removed (perhaps compromised) must stay removed after a power cut.
            tx.durable_on_commit();
            let mut record = audit.clone();
            record.note = Some(format!(
                "passkey {} ({})",
                row.id(),
                cajaguard_core::display::terminal(&row.passkey.name)
            ));
            super::log::append(tx, AuditEvent::Passkey(PasskeyEvent::Removed), &record)?;
            Ok(Some(row.clone()))
        })
    }

    /// Files a passkey approval; [`StoreError::ApprovalExists`] if its nonce is filed already.
    pub fn file_passkey_approval(
        &self,
        doc: &PasskeyApproval,
        now: OffsetDateTime,
    ) -> Result<(), StoreError> {
        let id = RequestId::parse(&doc.terms.request_id).map_err(|_| {
            StoreError::Inconsistent("the passkey approval's request id is not cg-<hex>".into())
        })?;
        let text = doc.to_json_pretty();
        let inserted = self.write(&mut |tx| {
            tx.passkey_approval_insert(&id, &doc.terms.nonce, &text, micros(now))
        })?;
        if inserted {
            Ok(())
        } else {
            Err(StoreError::ApprovalExists {
                request_id: doc.terms.request_id.clone(),
            })
        }
    }

    /// Lifts `frozen` with a verified passkey unfreeze, in one transaction: the freeze in force
    /// must still be `frozen`, the nonce unused (it is used now, where approval nonces go), and
    /// the passkey's counter still `from` (it moves to the assertion's). Audited.
    pub fn unfreeze_by_passkey(
        &self,
        frozen: &Frozen,
        unfreeze: &VerifiedPasskeyUnfreeze,
        from: u32,
        now: OffsetDateTime,
        audit: &AuditRecord,
    ) -> Result<(), StoreError> {
        // As `Store::unfreeze`: an unfreeze has no request of its own, so its nonce is filed under
        // a marker id.
        let marker = RequestId::parse("cg-0000000000000000")
            .map_err(|e| StoreError::Inconsistent(e.to_string()))?;
        let counter = PasskeyCounter {
            credential_id: unfreeze.credential_id().to_vec(),
            from,
            to: unfreeze.sign_count(),
        };
        self.write(&mut |tx| {
            if super::freeze::current(tx)?.as_ref() != Some(frozen)
                || tx.is_used(unfreeze.nonce())?
            {
                return Err(StoreError::NotThatFreeze);
            }
            tx.insert_used(unfreeze.nonce(), &marker, "unfreeze", micros(now))?;
            advance(tx, &counter)?;
            tx.freeze_delete()?;
            super::log::append(tx, AuditEvent::Unfrozen, audit)
        })
    }

    /// The passkey approvals filed for `id`, oldest first.
    pub fn passkey_approvals(&self, id: &RequestId) -> Result<Vec<PasskeyApproval>, StoreError> {
        self.read(&mut |tx| documents(tx, id))
    }

    /// Whether the approval nonce `nonce` was used by the gate.
    pub fn nonce_used(&self, nonce: &str) -> Result<bool, StoreError> {
        self.read(&mut |tx| tx.is_used(nonce))
    }
}

/// A row's `created_at`.
pub(super) fn created(us: i64) -> Result<OffsetDateTime, StoreError> {
    from_micros(us, "a passkey's created_at")
}

pub(super) fn algorithm_name(a: Algorithm) -> &'static str {
    match a {
        Algorithm::Es256 => "ES256",
        Algorithm::EdDsa => "EdDSA",
    }
}

pub(super) fn algorithm(name: &str) -> Result<Algorithm, StoreError> {
    match name {
        "ES256" => Ok(Algorithm::Es256),
        "EdDSA" => Ok(Algorithm::EdDsa),
        other => Err(StoreError::Inconsistent(format!(
            "a passkey has the unknown algorithm {other:?}"
        ))),
    }
}

pub(super) fn unhex(text: &str, what: &str) -> Result<Vec<u8>, StoreError> {
    hex::decode(text)
        .map_err(|_| StoreError::Inconsistent(format!("a passkey's {what} is not hex")))
}
