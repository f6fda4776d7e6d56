//! Checking a log: its records in order against the hashes stored with them, then every
//! checkpoint (stored ones, and the anchors the humans hold) against the roots the records give.

use std::fmt;

use tlog_tiles::HashReader;

use super::checkpoint::{read_checkpoint, verify_checkpoint};
use super::{Hash, Leaf, TreeHead};

/// What `audit verify` found wrong: the first bad record (or the narrowest range the evidence
/// allows, when only a root says something changed), or a checkpoint that does not verify.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tampering {
    /// Records `first..=last` hold the first change (`first == last` when it is one record).
    Record { first: u64, last: u64, what: String },
    /// A stored checkpoint was altered or is not the log key's.
    Checkpoint { source: String, what: String },
}

impl Tampering {
    /// The first record the evidence says may be bad.
    pub fn first_bad(&self) -> Option<u64> {
        match self {
            Tampering::Record { first, .. } => Some(*first),
            Tampering::Checkpoint { .. } => None,
        }
    }
}

impl fmt::Display for Tampering {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tampering::Record { first, last, what } if first == last => {
                write!(f, "record {first} {what}")
            }
            Tampering::Record { first, last, what } => {
                write!(f, "a record in {first}..={last} {what}")
            }
            Tampering::Checkpoint { source, what } => write!(f, "{source}: {what}"),
        }
    }
}

/// A checkpoint held outside the log's own authority: one an approval committed to (covered by
/// the approver's signature) or one a human kept. Its own note signature is not what vouches for
/// it, so it is read without checking that.
#[derive(Debug, Clone)]
pub struct Anchor {
    /// Names it in a finding: "approval cg-… (nonce …)", "--checkpoint FILE".
    pub source: String,
    pub checkpoint: String,
    /// A checkpoint a human kept and gave `audit verify`: one of another log is then a finding
    /// (an approval of another log may be one moved in from another home).
    pub kept_by_human: bool,
}

/// What an approval's checkpoint of another log (another origin) is to [`LogAuditor::finish`].
/// Changing the log's origin is how a rewrite would void the approvals' anchors, and an approval
/// moved in from another home looks the same, so only the human can tell the two apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtherLogs {
    /// A finding (the default): the log's origin was changed.
    Refused,
    /// The human moved approvals in from other homes (`audit verify
    /// --approvals-from-other-homes`): theirs are counted apart, unless every anchor is one.
    CountedApart,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LogSummary {
    pub records: u64,
    pub root: Hash,
    pub checkpoints: usize,
    pub anchors: usize,
    /// Anchors of another log (an approval file moved from another home), not checked here.
    pub foreign_anchors: usize,
    /// Approvals with a checkpoint that could not count as anchors, and why (the store fills it).
    pub skipped_anchors: Vec<String>,
}

/// Rebuilds the tree from the records, in index order, and checks what was stored against it.
#[derive(Default)]
pub struct LogAuditor {
    stored: Vec<Hash>,
    size: u64,
}

impl LogAuditor {
    pub fn new() -> LogAuditor {
        LogAuditor::default()
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// The record at `index` as read back, with the hashes stored beside it when it was written.
    pub fn push(&mut self, index: u64, leaf: &Leaf, stored: &[u8]) -> Result<(), Tampering> {
        if index != self.size || leaf.index != index {
            let n = self.size;
            return Err(if index > n {
                record(n, format!("is missing (the next record is {index})"))
            } else if index < n {
                record(index, "appears twice".to_owned())
            } else {
                record(index, format!("says it is record {}", leaf.index))
            });
        }
        let hash = leaf.hash();
        let hashes = super::stored_hashes_for(self.size, hash, &Stored(&self.stored))
            .map_err(|e| record(index, format!("cannot be placed in the tree: {e}")))?;
        if stored.get(..32) != Some(&hash.0[..]) {
            return Err(record(
                index,
                "was altered: its content is not what was written (the hash stored with it differs)"
                    .to_owned(),
            ));
        }
        let expected: Vec<u8> = hashes.iter().flat_map(|h| h.0).collect();
        if stored != expected.as_slice() {
            // Its own hash is right, so one of the records this tree node covers was changed
            // with the hash beside it rewritten, or this node's hash was.
            let covered = 1u64 << (stored.len() / 32).saturating_sub(1).min(63);
            return Err(Tampering::Record {
                first: (index + 1).saturating_sub(covered),
                last: index,
                what: "was altered: the tree hashes stored with these records do not match them"
                    .to_owned(),
            });
        }
        self.stored.extend(hashes);
        self.size += 1;
        Ok(())
    }

    /// The root of the first `size` records (`None` beyond the log).
    pub fn root(&self, size: u64) -> Option<Hash> {
        if size > self.size {
            return None;
        }
        super::root(size, &Stored(&self.stored)).ok()
    }

    /// The tree's stored hashes, for proofs.
    pub(super) fn reader(&self) -> impl HashReader + '_ {
        Stored(&self.stored)
    }

    /// Checks the anchors, then the log's own checkpoints (each signed by one of `log_keys`, of
    /// this `origin`), then the log head's recorded size, against the records pushed.
    ///
    /// Anchors come first because only they vouch for records: a stored checkpoint that matches
    /// may have been re-signed after a rewrite (the key is on the same disk), and one that
    /// contradicts records an anchor vouches for is itself the forgery, not those records.
    pub fn finish(
        &self,
        origin: &str,
        head_size: u64,
        checkpoints: &[(String, String)],
        log_keys: &[String],
        anchors: &[Anchor],
        other_logs: OtherLogs,
    ) -> Result<LogSummary, Tampering> {
        let n = self.size;
        let mut held: Vec<(TreeHead, &str)> = Vec::new();
        let mut foreign = Vec::new();
        for anchor in anchors {
            let checkpoint =
                read_checkpoint(&anchor.checkpoint).map_err(|e| Tampering::Checkpoint {
                    source: anchor.source.clone(),
                    what: e.to_string(),
                })?;
            if checkpoint.origin == origin {
                held.push((checkpoint.head, &anchor.source));
            } else if anchor.kept_by_human {
                return Err(Tampering::Checkpoint {
                    source: anchor.source.clone(),
                    what: format!(
                        "is of the log {}, and this log says it is {origin}: the log's origin \
                         was changed (or the checkpoint is another store's)",
                        checkpoint.origin
                    ),
                });
            } else if other_logs == OtherLogs::Refused {
                return Err(Tampering::Checkpoint {
                    source: anchor.source.clone(),
                    what: format!(
                        "commits to the log {}, and this log says it is {origin}: the log's \
                         origin was changed, which voids what the approvals vouch for. If \
                         approvals were moved in from another home, run `cajaguard audit verify \
                         --approvals-from-other-homes`",
                        checkpoint.origin
                    ),
                });
            } else {
                foreign.push(checkpoint.origin);
            }
        }
        if held.is_empty() && !foreign.is_empty() {
            // An approval moved in from another home is of another log; every approval being
            // so is what changing this log's origin (to void its anchors) looks like.
            return Err(Tampering::Checkpoint {
                source: "the log's origin".to_owned(),
                what: format!(
                    "every approval here commits to another log ({}), none to this one \
                     ({origin}): the log's origin was changed, or all of them were moved in from \
                     another home",
                    foreign[0]
                ),
            });
        }
        held.sort_by_key(|(head, _)| head.size);
        let mut vouched = 0;
        for (head, source) in &held {
            self.check_head(head, source, vouched)?;
            vouched = vouched.max(head.size);
        }

        let mut stored = Vec::new();
        for (source, text) in checkpoints {
            let checkpoint =
                verify_checkpoint(text, log_keys).map_err(|e| Tampering::Checkpoint {
                    source: source.clone(),
                    what: format!("{e}: it was altered, or signed by a key this log does not know"),
                })?;
            if checkpoint.origin != origin {
                return Err(Tampering::Checkpoint {
                    source: source.clone(),
                    what: format!("is of another log ({})", checkpoint.origin),
                });
            }
            stored.push((checkpoint.head, source.as_str()));
        }
        stored.sort_by_key(|(head, _)| head.size);
        for (head, source) in &stored {
            if head.size <= vouched && self.root(head.size) != Some(head.root) {
                return Err(Tampering::Checkpoint {
                    source: (*source).to_owned(),
                    what: "contradicts records an approval vouches for: the checkpoint was forged"
                        .to_owned(),
                });
            }
            self.check_head(head, source, vouched)?;
        }
        if head_size > n {
            return Err(record(
                n,
                format!(
                    "is missing: the log ends at {n} records, but its head says {head_size} \
                     (its tail was truncated)"
                ),
            ));
        }
        Ok(LogSummary {
            records: n,
            root: self.root(n).unwrap_or(tlog_tiles::EMPTY_HASH),
            checkpoints: checkpoints.len(),
            anchors: held.len(),
            foreign_anchors: foreign.len(),
            skipped_anchors: Vec::new(),
        })
    }

    /// One checkpoint's head against the records; `vouched`: records `0..vouched` are whole, as
    /// an anchor says, so a change can only be after it.
    fn check_head(&self, head: &TreeHead, source: &str, vouched: u64) -> Result<(), Tampering> {
        let n = self.size;
        match self.root(head.size) {
            Some(root) if root == head.root => Ok(()),
            Some(_) if head.size == 0 => Err(Tampering::Checkpoint {
                source: source.to_owned(),
                what: "says the empty log has a root other than the empty tree's".to_owned(),
            }),
            Some(_) => Err(Tampering::Record {
                first: if vouched < head.size { vouched } else { 0 },
                last: head.size - 1,
                what: format!(
                    "was altered: the first {} records do not give the root {source} committed \
                     to (its history was rewritten)",
                    head.size
                ),
            }),
            None => Err(record(
                n,
                format!(
                    "is missing: the log ends at {n} records, but {source} says {} (its tail \
                     was truncated)",
                    head.size
                ),
            )),
        }
    }
}

fn record(index: u64, what: String) -> Tampering {
    Tampering::Record {
        first: index,
        last: index,
        what,
    }
}

/// The stored hashes in memory as a `HashReader`; an index past the end is an error, never a panic.
struct Stored<'a>(&'a [Hash]);

impl HashReader for Stored<'_> {
    fn read_hashes(&self, indexes: &[u64]) -> Result<Vec<Hash>, tlog_tiles::tlog::Error> {
        indexes
            .iter()
            .map(|&i| {
                usize::try_from(i)
                    .ok()
                    .and_then(|i| self.0.get(i).copied())
                    .ok_or(tlog_tiles::tlog::Error::IndexesNotInTree)
            })
            .collect()
    }
}
