//! One audit record as a leaf: its fields and their canonical bytes.

use crate::approval::jcs::{self, int, key, str};

use super::Hash;

/// An audit record as the log hashes it: every column the store keeps, `index` included (so a
/// record moved to another place in the log no longer matches its hash). The store builds it from
/// the same values it writes, and `audit verify` from the values it reads back; a column edited in
/// between changes the leaf. No field holds a secret (SPEC §8: the audit never does).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Leaf {
    pub index: u64,
    /// RFC 3339, UTC, as stored.
    pub at: String,
    pub at_us: i64,
    pub tool: String,
    pub verdict: String,
    pub reason: String,
    pub merchant: Option<String>,
    pub currency: Option<String>,
    pub total: Option<i64>,
    pub request_id: Option<String>,
    pub idempotency_key: Option<String>,
    pub checkout_id: Option<String>,
    pub latency_us: i64,
    pub note: Option<String>,
    /// The paying agent (the service, SPEC §13). Absent, not `null`, when there is none, so
    /// records written before agents existed keep their bytes and their hashes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
}

impl Leaf {
    /// RFC 8785 (JCS) bytes of the record, every key present (`null` where empty). Written by hand
    /// in JCS key order, like the approval's signed fields, because the crate's encoder costs ~10
    /// µs and this runs in every gate transaction; integers JCS would format as floats fall back
    /// to the crate. A test checks both give the same bytes.
    pub fn canonical_bytes(&self) -> Vec<u8> {
        if self.index > jcs_max() || !self.ints_are_exact() {
            return jcs::canonical(self);
        }
        let (mut out, at) = self.written_around_index();
        let mut digits = Vec::with_capacity(20);
        int(&mut digits, self.index as i64);
        out.splice(at..at, digits);
        out
    }

    /// [`Leaf::canonical_bytes`] as the bytes before the index's digits and those after, whatever
    /// `self.index` is: the record's bytes at index `n` are `before`, `n` in decimal, `after`,
    /// for every `n` up to 2^53 - 1 (RFC 8785 writes larger ones as floats). `None` when another
    /// integer is past that too. The PostgreSQL store hands these to the database, which learns
    /// the index only when it takes the log's head.
    pub fn canonical_around_index(&self) -> Option<(Vec<u8>, Vec<u8>)> {
        if !self.ints_are_exact() {
            return None;
        }
        let (mut before, at) = self.written_around_index();
        let after = before.split_off(at);
        Some((before, after))
    }

    fn ints_are_exact(&self) -> bool {
        [Some(self.at_us), Some(self.latency_us), self.total]
            .iter()
            .flatten()
            .all(|i| jcs::safe(*i))
    }

    /// The hand-written JCS bytes without the index's digits, and where they go.
    fn written_around_index(&self) -> (Vec<u8>, usize) {
        let mut out = Vec::with_capacity(256);
        out.push(b'{');
        if let Some(agent) = &self.agent {
            key(&mut out, true, "agent");
            str(&mut out, agent);
        }
        key(&mut out, self.agent.is_none(), "at");
        str(&mut out, &self.at);
        key(&mut out, false, "at_us");
        int(&mut out, self.at_us);
        key(&mut out, false, "checkout_id");
        opt_str(&mut out, self.checkout_id.as_deref());
        key(&mut out, false, "currency");
        opt_str(&mut out, self.currency.as_deref());
        key(&mut out, false, "idempotency_key");
        opt_str(&mut out, self.idempotency_key.as_deref());
        key(&mut out, false, "index");
        let at = out.len();
        key(&mut out, false, "latency_us");
        int(&mut out, self.latency_us);
        key(&mut out, false, "merchant");
        opt_str(&mut out, self.merchant.as_deref());
        key(&mut out, false, "note");
        opt_str(&mut out, self.note.as_deref());
        key(&mut out, false, "reason");
        str(&mut out, &self.reason);
        key(&mut out, false, "request_id");
        opt_str(&mut out, self.request_id.as_deref());
        key(&mut out, false, "tool");
        str(&mut out, &self.tool);
        key(&mut out, false, "total");
        match self.total {
            Some(total) => int(&mut out, total),
            None => out.extend_from_slice(b"null"),
        }
        key(&mut out, false, "verdict");
        str(&mut out, &self.verdict);
        out.push(b'}');
        (out, at)
    }

    /// The RFC 6962 leaf hash of [`Leaf::canonical_bytes`].
    pub fn hash(&self) -> Hash {
        super::leaf_hash(&self.canonical_bytes())
    }
}

fn opt_str(out: &mut Vec<u8>, value: Option<&str>) {
    match value {
        Some(s) => str(out, s),
        None => out.extend_from_slice(b"null"),
    }
}

/// The largest index written as a plain integer (an `i64` JCS also writes as one).
fn jcs_max() -> u64 {
    crate::money::MAX_MINOR.unsigned_abs()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Leaf {
        Leaf {
            agent: None,
            index: 7,
            at: "2026-12-01T10:00:00Z".into(),
            at_us: 1_795_000_000_000_000,
            tool: "complete_checkout".into(),
            verdict: "allow".into(),
            reason: "allow".into(),
            merchant: Some("shop.example \"quoted\" \u{e9}".into()),
            currency: Some("USD".into()),
            total: Some(8900),
            request_id: None,
            idempotency_key: Some("k-1".into()),
            checkout_id: Some("chk_1".into()),
            latency_us: 412,
            note: None,
        }
    }

    #[test]
    fn hand_written_bytes_are_the_crates_jcs() {
        let leaf = sample();
        assert_eq!(leaf.canonical_bytes(), jcs::canonical(&leaf));
        let mut empty = sample();
        empty.merchant = None;
        empty.currency = None;
        empty.total = None;
        empty.note = Some("line\nbreak \u{1}".into());
        assert_eq!(empty.canonical_bytes(), jcs::canonical(&empty));
    }

    #[test]
    fn the_bytes_around_the_index_make_the_record_at_every_index() {
        let around = sample().canonical_around_index().unwrap();
        let mut with_agent = sample();
        with_agent.agent = Some("shopper".into());
        let around_agent = with_agent.canonical_around_index().unwrap();
        for index in [0, 1, 7, 10, 12_345, jcs_max()] {
            for (leaf, (before, after)) in
                [(sample(), &around), (with_agent.clone(), &around_agent)]
            {
                let leaf = Leaf { index, ..leaf };
                let joined = [before.as_slice(), index.to_string().as_bytes(), after].concat();
                assert_eq!(joined, leaf.canonical_bytes(), "index {index}");
                assert_eq!(joined, jcs::canonical(&leaf), "index {index}");
            }
        }
        let mut large = sample();
        large.total = Some(i64::MAX);
        assert_eq!(large.canonical_around_index(), None);
    }

    #[test]
    fn large_integers_fall_back_to_the_crate() {
        let mut leaf = sample();
        leaf.total = Some(i64::MAX);
        assert_eq!(leaf.canonical_bytes(), jcs::canonical(&leaf));
    }

    #[test]
    fn every_field_changes_the_hash() {
        let base = sample().hash();
        let mut moved = sample();
        moved.index = 8;
        assert_ne!(moved.hash(), base);
        let mut edited = sample();
        edited.total = Some(8901);
        assert_ne!(edited.hash(), base);
        let mut noted = sample();
        noted.note = Some(String::new());
        assert_ne!(noted.hash(), base, "an empty note is not a missing one");
    }
}
