//! The tamper-evident audit log (SPEC §8), pure: what a leaf is, how a checkpoint is signed and
//! read, and how a log is checked against its checkpoints. The store appends and reads; nothing
//! here touches a file or a database.
//!
//! **Shape.** Every audit record is a leaf of an RFC 6962 Merkle tree; record `i` is leaf `i`,
//! without gaps. The tree is kept in the "stored hashes" layout of Go's `sumdb/tlog`
//! (`tlog_tiles`): writing record `n` stores `1 + trailing_ones(n)` hashes, which is what a later
//! root or proof needs, so appending costs O(log n) reads and a root needs at most `1 + log2 n`.
//! The store keeps each record's stored hashes beside it.
//!
//! **Checkpoints** are C2SP `tlog-checkpoint` notes signed as C2SP `signed-note`s with the log
//! key (Ed25519). A signature by a key on the same disk proves little: whoever can rewrite the
//! records can re-sign. The anchors are the checkpoints a human holds: every approval commits to
//! the latest checkpoint, and `audit verify --checkpoint FILE` takes one a human kept.

mod checkpoint;
mod leaf;
mod proof;
mod verify;

pub use self::checkpoint::{
    CheckpointError, LogSigner, TreeHead, VerifiedCheckpoint, read_checkpoint, verify_checkpoint,
};
pub use self::leaf::Leaf;
pub use self::proof::{ProofBundle, ProofError};
pub use self::verify::{Anchor, LogAuditor, LogSummary, OtherLogs, Tampering};

/// An RFC 6962 node hash (SHA-256).
pub use tlog_tiles::Hash;
/// How the tree's stored hashes are read, and what a read or a tree computation can fail with.
pub use tlog_tiles::{HashReader, tlog::Error as TreeError};

/// The RFC 6962 leaf hash of `data`: SHA-256(0x00 || data).
pub fn leaf_hash(data: &[u8]) -> Hash {
    tlog_tiles::record_hash(data)
}

/// The hashes to store when record `index` with leaf hash `leaf` is appended, given a reader of
/// the hashes stored before it (`tlog_tiles::stored_hashes_for_record_hash`, whose reads never
/// exceed `trailing_ones(index)` earlier hashes).
pub fn stored_hashes_for<R: tlog_tiles::HashReader>(
    index: u64,
    leaf: Hash,
    earlier: &R,
) -> Result<Vec<Hash>, tlog_tiles::tlog::Error> {
    tlog_tiles::stored_hashes_for_record_hash(index, leaf, earlier)
}

/// The first stored-hash index of record `index` (where its hashes start).
pub fn first_stored_index(index: u64) -> u64 {
    tlog_tiles::stored_hash_index(0, index)
}

/// Which record wrote the stored hash at `stored_index`, and at which position among that record's
/// stored hashes: the hash at level `l`, position `k` is written by record `(k + 1) * 2^l - 1` as
/// its `l`-th hash. The store keeps each record's hashes in one column, so this is how a
/// `HashReader` over the store finds one.
pub fn stored_hash_owner(stored_index: u64) -> (u64, usize) {
    let (level, k) = tlog_tiles::split_stored_hash_index(stored_index);
    let record = ((k + 1) << level) - 1;
    (record, usize::from(level))
}

/// The stored-hash indexes a root of a tree of `size` records reads.
pub fn root_indexes(size: u64) -> Vec<u64> {
    tlog_tiles::sub_tree_index(0, size, Vec::new())
}

/// The root of a tree of `size` records, from a reader of its stored hashes.
pub fn root<R: tlog_tiles::HashReader>(size: u64, r: &R) -> Result<Hash, tlog_tiles::tlog::Error> {
    tlog_tiles::tree_hash(size, r)
}
