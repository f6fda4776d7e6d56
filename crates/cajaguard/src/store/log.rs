//! The audit log's Merkle tree in the store (SPEC §8), written once against [`Tx`]: appending a
//! record (in the transaction of the event it records), checkpoints, adopting rows written before
//! the log existed, and reading everything `audit verify` checks.
//!
//! **Dense by construction.** A record's index comes from `audit_log.size`, bumped by the same
//! transaction that inserts it (`UPDATE … RETURNING`), so indexes are handed out in commit order
//! without gaps: SQLite's write lock serializes the transactions, and on PostgreSQL the head row's
//! lock does, held from the append to the commit. Every transaction takes that lock last, after
//! its other writes (docs/ARCHITECTURE.md, "Lock order"); on PostgreSQL the append is one
//! statement that computes the stored hashes in the database (migration 0007), queued just
//! before `COMMIT`, so the lock is never held across a round trip.
//!
//! **Stored hashes** (`audit_log` module of the core) live beside each record in
//! `audit.log_hashes`: record `n` keeps the `1 + trailing_ones(n)` hashes its append wrote. An
//! append reads at most `trailing_ones(n)` earlier records' hashes (half the appends read none);
//! a root reads at most `1 + log2 n`.

use std::cell::RefCell;

use cajaguard_core::approval::ApprovalDocument;
use cajaguard_core::audit_log::{self, Hash, Leaf, LogSigner, TreeHead};

use super::StoreError;
use super::audit::{self, AuditEvent, AuditRecord};
use super::tx::Tx;

/// The statements of the log, as [`Tx`] has the rest (`sqlite/log.rs`, `postgres/log.rs`).
pub(super) trait LogTx {
    /// Appends `leaf` at the log's next index (its own `index` is not read), its stored hashes
    /// computed by the database, if this store does that: `Ok(false)` when the caller must
    /// (SQLite, where a transaction holds the whole database anyway; a leaf whose integers the
    /// database could not write as RFC 8785 does). PostgreSQL queues one statement that takes the
    /// head, hashes and inserts (migration 0007), sent with whatever the transaction sends next.
    fn append_in_store(&mut self, _leaf: &Leaf) -> Result<bool, StoreError> {
        Ok(false)
    }
    /// Inserts the audit record `leaf` with the stored hashes of its append (`log.rs`).
    fn insert_audit(&mut self, leaf: &Leaf, log_hashes: &[u8]) -> Result<(), StoreError>;
    /// The log's next index, claimed: `audit_log.size` moves on by one in this transaction (and
    /// PostgreSQL holds the head row's lock until it ends).
    fn log_next_index(&mut self) -> Result<u64, StoreError>;
    fn log_head(&mut self) -> Result<Option<LogHead>, StoreError>;
    fn log_init(&mut self, origin: &str) -> Result<(), StoreError>;
    /// `(log_index, log_hashes)` of the given records (those that exist).
    fn log_hashes_of(&mut self, records: &[u64]) -> Result<Vec<(u64, Vec<u8>)>, StoreError>;
    /// Audit rows written before the log (no `log_index`), oldest first, as leaves with index 0.
    fn audit_unindexed(&mut self) -> Result<Vec<(i64, Leaf)>, StoreError>;
    /// Gives a row without a place its place; `false` if it had one already.
    fn audit_adopt(
        &mut self,
        row_id: i64,
        index: u64,
        log_hashes: &[u8],
    ) -> Result<bool, StoreError>;
    /// Whether any row has a place in the log (1) or none does (0).
    fn audit_in_log(&mut self) -> Result<u64, StoreError>;
    /// The head, locked until the transaction ends (PostgreSQL `FOR UPDATE`; SQLite holds the
    /// write lock already).
    fn log_lock_head(&mut self) -> Result<Option<LogHead>, StoreError>;
    /// Up to `limit` records from `from` on, in log order, with their stored hashes.
    fn audit_leaves(&mut self, from: u64, limit: u64) -> Result<Vec<(Leaf, Vec<u8>)>, StoreError>;
    /// How many audit rows have no place in the log, or a negative one (none, unless rows were
    /// inserted or renumbered around it).
    fn audit_outside_log(&mut self) -> Result<u64, StoreError>;
    /// The latest checkpoint: (tree size, note text).
    fn checkpoint_latest(&mut self) -> Result<Option<(u64, String)>, StoreError>;
    /// Every stored checkpoint, by tree size.
    fn checkpoints_all(&mut self) -> Result<Vec<(u64, String)>, StoreError>;
    /// Stores a checkpoint; one of that size already stored stays.
    fn checkpoint_insert(&mut self, size: u64, note: &str, at_us: i64) -> Result<(), StoreError>;
    fn log_key_add(&mut self, verifier_key: &str, at_us: i64) -> Result<(), StoreError>;
    fn log_keys(&mut self) -> Result<Vec<String>, StoreError>;
    /// Every approval document filed (for the checkpoints they commit to), broken ones skipped.
    fn all_approval_documents(&mut self) -> Result<Vec<ApprovalDocument>, StoreError>;
    /// Every passkey approval as written.
    fn all_passkey_approval_texts(&mut self) -> Result<Vec<String>, StoreError>;
}

/// The log's identity and length, as its head row says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogHead {
    /// The checkpoint origin, `cajaguard/<random id>`, made with the store.
    pub origin: String,
    pub size: u64,
}

/// Appends the record of `event` as the log's next leaf.
pub(super) fn append(
    tx: &mut dyn Tx,
    event: AuditEvent,
    record: &AuditRecord,
) -> Result<(), StoreError> {
    let leaf = audit::leaf(event, record, 0)?;
    if tx.append_in_store(&leaf)? {
        return Ok(());
    }
    let leaf = Leaf {
        index: tx.log_next_index()?,
        ..leaf
    };
    let blob = stored_hashes(tx, &leaf)?;
    tx.insert_audit(&leaf, &blob)
}

/// The hashes to keep beside `leaf`, as bytes.
fn stored_hashes(tx: &mut dyn Tx, leaf: &Leaf) -> Result<Vec<u8>, StoreError> {
    let reader = TxHashes::new(tx);
    let hashes = audit_log::stored_hashes_for(leaf.index, leaf.hash(), &reader);
    let hashes = reader.result(hashes)?;
    Ok(hashes.iter().flat_map(|h| h.0).collect())
}

/// The root of the first `size` records, from the stored hashes.
pub(super) fn root(tx: &mut dyn Tx, size: u64) -> Result<Hash, StoreError> {
    let reader = TxHashes::new(tx);
    let root = audit_log::root(size, &reader);
    reader.result(root)
}

/// Writes a checkpoint of the log as it is now, signed by `signer`, unless the latest one is of
/// this size already. Returns the latest checkpoint: the log size it covers, and its text.
pub(super) fn checkpoint(
    tx: &mut dyn Tx,
    signer: &LogSigner,
    now_us: i64,
) -> Result<(u64, String), StoreError> {
    let head = tx.log_head()?.ok_or_else(no_head)?;
    let root = root(tx, head.size)?;
    // The latest stored one is reused only if it is this host's, of this log and of these
    // records: a row planted there must never become what a human signs into an approval.
    if let Some((size, text)) = tx.checkpoint_latest()?
        && size == head.size
        && audit_log::verify_checkpoint(&text, &[signer.verifier_key()]).is_ok_and(|c| {
            c.origin == head.origin && c.head.root == root && c.head.size == head.size
        })
    {
        return Ok((size, text));
    }
    let text = signer
        .sign(TreeHead {
            size: head.size,
            root,
        })
        .map_err(|e| StoreError::Inconsistent(format!("cannot sign a checkpoint: {e}")))?;
    tx.log_key_add(&signer.verifier_key(), now_us)?;
    tx.checkpoint_insert(head.size, &text, now_us)?;
    Ok((head.size, text))
}

/// Makes the head row of a store that has none: a new store, or one from before the log, whose
/// rows then get their places in it, oldest first. That happens once: a store whose head row
/// went missing while records sit in the log is refused (a new head would give the log a new
/// origin, and every approval's checkpoint would read as another log's), and a row that appears
/// later without a place is tampering for `audit verify`, never adopted.
pub(super) fn open(tx: &mut dyn Tx, new_origin: &str) -> Result<LogHead, StoreError> {
    if let Some(head) = tx.log_head()? {
        return Ok(head);
    }
    if tx.audit_in_log()? > 0 {
        // On PostgreSQL each statement reads what was committed when it started: another host
        // may have made the head and appended since the read above. Records in the log mean a
        // head was committed before them, so it is read again, after them.
        return tx.log_head()?.ok_or_else(no_head);
    }
    tx.log_init(new_origin)?;
    // PostgreSQL: every other opener waits here for this one's adoption to commit, then finds
    // the head and returns above on its next attempt (its own insert did nothing).
    let head = tx.log_lock_head()?.ok_or_else(no_head)?;
    if head.size > 0 || head.origin != new_origin {
        return Ok(head);
    }
    for (row_id, unindexed) in tx.audit_unindexed()? {
        let index = tx.log_next_index()?;
        let leaf = Leaf { index, ..unindexed };
        let blob = stored_hashes(tx, &leaf)?;
        if !tx.audit_adopt(row_id, index, &blob)? {
            return Err(StoreError::Inconsistent(
                "another process gave an old audit row its place first; open the store again"
                    .to_owned(),
            ));
        }
    }
    tx.log_head()?.ok_or_else(no_head)
}

fn no_head() -> StoreError {
    StoreError::Inconsistent(
        "the audit log has no head row (table audit_log): the store was altered; \
         run `cajaguard audit verify`"
            .to_owned(),
    )
}

/// Whether `doc` was signed by a passkey since removed, and issued before that removal: a passkey
/// removed (a lost device, or by anyone on the machine, which removal allows) still vouches for
/// what it approved while registered, so removing it cannot void its approvals' anchors.
fn signed_before_removal(
    doc: &cajaguard_core::passkey::PasskeyApproval,
    removed: &[(super::PasskeyRow, time::OffsetDateTime)],
    rp: &cajaguard_core::passkey::RelyingParty,
) -> bool {
    let Ok(issued) = time::OffsetDateTime::parse(
        &doc.terms.issued_at,
        &time::format_description::well_known::Rfc3339,
    ) else {
        return false;
    };
    removed.iter().any(|(row, removed_at)| {
        issued < *removed_at
            && cajaguard_core::passkey::signed_by_registered(
                doc,
                std::slice::from_ref(&row.passkey),
                rp,
            )
    })
}

/// The stored hashes as a `tlog_tiles::HashReader` over the open transaction. The reader's error
/// type cannot carry a `StoreError`, so the first one is kept here and returned by `result`.
struct TxHashes<'a> {
    tx: RefCell<&'a mut dyn Tx>,
    failed: RefCell<Option<StoreError>>,
}

impl<'a> TxHashes<'a> {
    fn new(tx: &'a mut dyn Tx) -> TxHashes<'a> {
        TxHashes {
            tx: RefCell::new(tx),
            failed: RefCell::new(None),
        }
    }

    fn result<T>(self, value: Result<T, audit_log::TreeError>) -> Result<T, StoreError> {
        if let Some(e) = self.failed.into_inner() {
            return Err(e);
        }
        value.map_err(|e| {
            StoreError::Inconsistent(format!(
                "the audit log's stored hashes are incomplete ({e}): the store was altered; \
                 run `cajaguard audit verify`"
            ))
        })
    }
}

impl audit_log::HashReader for TxHashes<'_> {
    fn read_hashes(&self, indexes: &[u64]) -> Result<Vec<Hash>, audit_log::TreeError> {
        let owners: Vec<(u64, usize)> = indexes
            .iter()
            .map(|&i| audit_log::stored_hash_owner(i))
            .collect();
        let mut records: Vec<u64> = owners.iter().map(|(record, _)| *record).collect();
        records.sort_unstable();
        records.dedup();
        let found = match self.tx.borrow_mut().log_hashes_of(&records) {
            Ok(found) => found,
            Err(e) => {
                *self.failed.borrow_mut() = Some(e);
                return Err(audit_log::TreeError::IndexesNotInTree);
            }
        };
        owners
            .iter()
            .map(|(record, position)| {
                found
                    .iter()
                    .find(|(index, _)| index == record)
                    .and_then(|(_, blob)| blob.get(position * 32..position * 32 + 32))
                    .and_then(|bytes| <[u8; 32]>::try_from(bytes).ok())
                    .map(Hash)
                    .ok_or(audit_log::TreeError::IndexesNotInTree)
            })
            .collect()
    }
}

/// Where the home keeps the log key (Ed25519, PKCS#8 PEM, 0600), made on first use.
pub const LOG_KEY_FILE: &str = "log.key.pem";

/// Records `audit verify` reads per query.
const PAGE: u64 = 10_000;

/// What `audit verify` was given beside the store: checkpoints a human kept.
pub type Anchor = audit_log::Anchor;

impl super::Store {
    /// Gives the log its head and adopts older rows; run by every open (cheap once done).
    pub(super) fn open_log(&self) -> Result<LogHead, StoreError> {
        if let Some(head) = self.read(&mut |tx| tx.log_head())? {
            return Ok(head);
        }
        let mut random = [0u8; 8];
        getrandom::fill(&mut random).map_err(|e| {
            StoreError::Inconsistent(format!("no randomness for the log's origin: {e}"))
        })?;
        let origin = format!("cajaguard/{}", hex::encode(random));
        self.write(&mut |tx| open(tx, &origin))
    }

    /// Several audit records of one `event` in one transaction (a bulk import; the report's
    /// measure of what one append adds to a transaction).
    pub fn audit_many(&self, event: AuditEvent, records: &[AuditRecord]) -> Result<(), StoreError> {
        self.write(&mut |tx| {
            for record in records {
                append(tx, event, record)?;
            }
            Ok(())
        })
    }

    /// Up to `limit` records of the log from index `from` on, as their leaves.
    pub fn log_records(&self, from: u64, limit: u64) -> Result<Vec<Leaf>, StoreError> {
        Ok(self
            .read(&mut |tx| tx.audit_leaves(from, limit))?
            .into_iter()
            .map(|(leaf, _)| leaf)
            .collect())
    }

    /// The log's head (its origin and size).
    pub fn log_head(&self) -> Result<LogHead, StoreError> {
        self.read(&mut |tx| tx.log_head())?.ok_or_else(no_head)
    }

    /// The log key of this home, as a signer for this log (made, 0600, if the home has none).
    fn log_signer(&self, origin: &str) -> Result<&LogSigner, StoreError> {
        if let Some(signer) = self.log_signer.get() {
            return Ok(signer);
        }
        let key = crate::keys::load_or_create_log_key(&self.home.join(LOG_KEY_FILE))?;
        let signer = LogSigner::new(key, origin)
            .map_err(|e| StoreError::Inconsistent(format!("the log's origin is unusable: {e}")))?;
        Ok(self.log_signer.get_or_init(|| signer))
    }

    /// The home's log key as a signed-note verifier key (what `audit check-proof --log-key`
    /// and a human keeping checkpoints pin).
    pub fn log_verifier_key(&self) -> Result<String, StoreError> {
        let head = self.log_head()?;
        Ok(self.log_signer(&head.origin)?.verifier_key())
    }

    /// A signed checkpoint of the log as it is now (the latest one if nothing was appended since):
    /// what an approval commits to, and what a human may keep for `audit verify --checkpoint`.
    /// Made durable before it is returned (and with it every commit before): approvers keep what
    /// it signs, and the log would look cut short if it were lost to a power cut.
    pub fn checkpoint(&self, now: time::OffsetDateTime) -> Result<String, StoreError> {
        let head = self.log_head()?;
        // The log only grows: at the size of the last checkpoint made durable here, nothing was
        // appended since, and that checkpoint, with every record it covers, is on disk already.
        // Taken again it cost a write transaction and a sync each time, and every new form of
        // the approval page takes one. A checkpoint written in passing is never cached here: the
        // write below hands out the latest checkpoint if the log did not grow since (one written
        // in passing, say), and makes it durable first.
        let durable = || {
            self.durable_checkpoint
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        if let Some((size, text)) = &*durable()
            && *size == head.size
        {
            return Ok(text.clone());
        }
        let signer = self.log_signer(&head.origin)?;
        let (size, text) = self.write(&mut |tx| {
            tx.durable_on_commit();
            checkpoint(tx, signer, super::micros(now))
        })?;
        *durable() = Some((size, text.clone()));
        Ok(text)
    }

    /// [`Store::checkpoint`] as the proxy writes one after payments: only the log keeps it until
    /// a human takes a checkpoint (which makes it durable with the rest), so its commit waits
    /// for no disk, and lost to a power cut it is lost with the records it covers.
    pub fn checkpoint_in_passing(&self, now: time::OffsetDateTime) -> Result<(), StoreError> {
        let head = self.log_head()?;
        let signer = self.log_signer(&head.origin)?;
        self.write_unflushed(&mut |tx| checkpoint(tx, signer, super::micros(now)).map(drop))
    }

    /// Checks the whole log (SPEC §8): every record against the hashes stored with it, every
    /// stored checkpoint's signature and root, and every checkpoint an approval committed to
    /// (a key-file approval signed under `trusted`, a passkey approval whose assertion verifies
    /// under a registered passkey on `passkeys`), plus `anchors`. `Ok(Err(_))` names the first
    /// bad record; `Err(_)` is a store that cannot be read.
    ///
    /// The head, checkpoints and approvals are read first and the records after, up to the
    /// head's size: the records only grow, so a payment appending meanwhile can never make an
    /// earlier checkpoint look longer than the log.
    pub fn verify_log(
        &self,
        trusted: &cajaguard_core::approval::TrustedKeys,
        passkeys: Option<&cajaguard_core::passkey::RelyingParty>,
        mut anchors: Vec<Anchor>,
        other_logs: audit_log::OtherLogs,
    ) -> Result<Result<audit_log::LogSummary, audit_log::Tampering>, StoreError> {
        let head = self.log_head()?;
        let checkpoints: Vec<(String, String)> = self
            .read(&mut |tx| tx.checkpoints_all())?
            .into_iter()
            .map(|(size, text)| (format!("the stored checkpoint of size {size}"), text))
            .collect();
        let log_keys = self.read(&mut |tx| tx.log_keys())?;
        let mut skipped = Vec::new();
        for doc in self.read(&mut |tx| tx.all_approval_documents())? {
            let Some(checkpoint) = &doc.checkpoint else {
                continue;
            };
            let source = format!("the approval of {} (nonce {})", doc.request_id, doc.nonce);
            if cajaguard_core::approval::signed_by_trusted(&doc, trusted) {
                anchors.push(Anchor {
                    source,
                    checkpoint: checkpoint.clone(),
                    kept_by_human: false,
                });
            } else if trusted.0.iter().any(|k| k.key_id() == doc.key_id) {
                // Signed under a key still trusted, yet the signature fails: the document was
                // changed after it was signed (to drop the anchor it holds, say). A key no
                // longer trusted (rotated out) is only a note below.
                return Ok(Err(audit_log::Tampering::Checkpoint {
                    source,
                    what: "its signature does not verify under the trusted key it names: it was \
                           changed after it was signed"
                        .to_owned(),
                }));
            } else {
                skipped.push(format!(
                    "{source}: not signed by a key in approvals.trusted_keys"
                ));
            }
        }
        let registered: Vec<_> = self
            .passkeys()?
            .into_iter()
            .map(|row| row.passkey)
            .collect();
        let removed = self.removed_passkeys()?;
        for text in self.read(&mut |tx| tx.all_passkey_approval_texts())? {
            let Ok(doc) = cajaguard_core::passkey::PasskeyApproval::from_json(&text) else {
                skipped.push("a passkey approval that does not parse".to_owned());
                continue;
            };
            let Some(checkpoint) = &doc.terms.checkpoint else {
                continue;
            };
            let source = format!(
                "the passkey approval of {} (nonce {})",
                doc.terms.request_id, doc.terms.nonce
            );
            match passkeys {
                Some(rp)
                    if cajaguard_core::passkey::signed_by_registered(&doc, &registered, rp)
                        || signed_before_removal(&doc, &removed, rp) =>
                {
                    anchors.push(Anchor {
                        source,
                        checkpoint: checkpoint.clone(),
                        kept_by_human: false,
                    });
                }
                // Only a note, even for a passkey still registered: its assertion also binds the
                // page's origin, which a config that moved the page changes, so a failure here
                // is not evidence of a change on its own.
                Some(_) => skipped.push(format!(
                    "{source}: its assertion does not verify under a registered passkey"
                )),
                None => skipped.push(format!(
                    "{source}: the config has no approvals.web to check it against"
                )),
            }
        }

        if let Some(found) = self.own_log_under_another_origin(&head.origin, &anchors)? {
            return Ok(Err(found));
        }
        let outside = self.read(&mut |tx| tx.audit_outside_log())?;
        if outside > 0 {
            return Ok(Err(audit_log::Tampering::Checkpoint {
                source: "the audit table".to_owned(),
                what: format!(
                    "{outside} row(s) have no place in the log: they were inserted or \
                     renumbered around CajaGuard"
                ),
            }));
        }
        let mut log = audit_log::LogAuditor::new();
        while log.size() < head.size {
            let from = log.size();
            let take = PAGE.min(head.size - from);
            let page = match self.read(&mut |tx| tx.audit_leaves(from, take)) {
                Ok(page) => page,
                Err(e) if e.is_unreadable_row() => {
                    return Ok(Err(audit_log::Tampering::Record {
                        first: from,
                        last: from + take - 1,
                        what: format!("cannot be read back ({e}): a column was altered"),
                    }));
                }
                Err(e) => return Err(e),
            };
            if page.is_empty() {
                break;
            }
            for (leaf, stored) in &page {
                if let Err(found) = log.push(leaf.index, leaf, stored) {
                    return Ok(Err(found));
                }
            }
        }
        let mut found = log.finish(
            &head.origin,
            head.size,
            &checkpoints,
            &log_keys,
            &anchors,
            other_logs,
        );
        if let Ok(summary) = &mut found {
            summary.skipped_anchors = skipped;
        }
        Ok(found)
    }

    /// An anchor of another origin that this home's own log key signed: this home's log, whose
    /// origin was changed since (records taken out of the log and the head deleted, so that the
    /// store adopted them under a new one). No approval moved in from another home is signed so.
    /// Nothing is made when the home has no key file.
    fn own_log_under_another_origin(
        &self,
        origin: &str,
        anchors: &[Anchor],
    ) -> Result<Option<audit_log::Tampering>, StoreError> {
        let path = self.home.join(LOG_KEY_FILE);
        if !path.exists() {
            return Ok(None);
        }
        for anchor in anchors {
            let Ok(checkpoint) = audit_log::read_checkpoint(&anchor.checkpoint) else {
                continue;
            };
            if checkpoint.origin == origin {
                continue;
            }
            // The key, as the signer of that origin (a signed note's key names its log). Read
            // again for each: it is not cloned, and only an anchor of another log needs it.
            let key = crate::keys::load_or_create_log_key(&path)?;
            let Ok(signer) = LogSigner::new(key, &checkpoint.origin) else {
                continue;
            };
            if audit_log::verify_checkpoint(&anchor.checkpoint, &[signer.verifier_key()]).is_ok() {
                return Ok(Some(audit_log::Tampering::Checkpoint {
                    source: anchor.source.clone(),
                    what: format!(
                        "commits to this home's own log under the origin {}, and the log now says \
                         it is {origin}: its origin was changed since, which voids what the \
                         approvals vouch for",
                        checkpoint.origin
                    ),
                }));
            }
        }
        Ok(None)
    }

    /// An offline proof that record `index` is in the log, against a fresh checkpoint.
    pub fn log_proof(
        &self,
        index: u64,
        now: time::OffsetDateTime,
    ) -> Result<Result<audit_log::ProofBundle, String>, StoreError> {
        let text = self.checkpoint(now)?;
        let checkpoint = audit_log::read_checkpoint(&text)
            .map_err(|e| StoreError::Inconsistent(format!("the checkpoint just written: {e}")))?;
        let head = checkpoint.head;
        if index >= head.size {
            return Ok(Err(format!(
                "the log has {} records (0..{}); there is no record {index}",
                head.size, head.size
            )));
        }
        let mut log = audit_log::LogAuditor::new();
        let mut record = None;
        while log.size() < head.size {
            let from = log.size();
            let page = self.read(&mut |tx| tx.audit_leaves(from, PAGE.min(head.size - from)))?;
            if page.is_empty() {
                break;
            }
            for (leaf, stored) in page {
                if let Err(found) = log.push(leaf.index, &leaf, &stored) {
                    return Ok(Err(format!(
                        "the log is not whole ({found}): run `cajaguard audit verify`"
                    )));
                }
                if leaf.index == index {
                    record = Some(leaf);
                }
            }
        }
        let Some(record) = record else {
            return Ok(Err(format!(
                "record {index} is missing: run `cajaguard audit verify`"
            )));
        };
        let signer = self.log_signer(&checkpoint.origin)?;
        Ok(
            audit_log::ProofBundle::make(&log, record, head, text, signer.verifier_key())
                .map_err(|e| e.to_string()),
        )
    }
}
