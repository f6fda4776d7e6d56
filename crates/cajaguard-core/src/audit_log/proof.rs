//! An offline proof that one record is in the log (`cajaguard audit proof`): the record, an RFC
//! 6962 inclusion proof, and a signed checkpoint, checkable without the store.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use super::checkpoint::verify_checkpoint;
use super::verify::LogAuditor;
use super::{Hash, Leaf, TreeHead};

const FORMAT: &str = "cajaguard-audit-proof-v1";

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProofBundle {
    pub format: String,
    pub record: Leaf,
    /// Base64 hashes, leaf to root (`tlog_tiles::prove_record`).
    pub inclusion: Vec<String>,
    /// The signed checkpoint the proof is against (C2SP signed note).
    pub checkpoint: String,
    /// The log key that signed it (signed-note verifier key). Pin it with `--log-key` where it
    /// matters: a bundle can name any key.
    pub log_key: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    #[error("not a CajaGuard audit proof: {0}")]
    Malformed(String),
    #[error("the proof's checkpoint does not verify: {0}")]
    Checkpoint(String),
    #[error("record {index} is not in the tree of the proof's checkpoint (size {size})")]
    NotIncluded { index: u64, size: u64 },
}

impl ProofBundle {
    /// The proof that `record` is in the tree `checkpoint` signs (of `head`), from the rebuilt log.
    pub fn make(
        log: &LogAuditor,
        record: Leaf,
        head: TreeHead,
        checkpoint: String,
        log_key: String,
    ) -> Result<ProofBundle, ProofError> {
        let proof =
            tlog_tiles::prove_record(head.size, record.index, &log.reader()).map_err(|_| {
                ProofError::NotIncluded {
                    index: record.index,
                    size: head.size,
                }
            })?;
        Ok(ProofBundle {
            format: FORMAT.to_owned(),
            record,
            inclusion: proof.iter().map(|h| STANDARD.encode(h.0)).collect(),
            checkpoint,
            log_key,
        })
    }

    pub fn from_json(text: &str) -> Result<ProofBundle, ProofError> {
        let bundle: ProofBundle =
            serde_json::from_str(text).map_err(|e| ProofError::Malformed(e.to_string()))?;
        if bundle.format != FORMAT {
            return Err(ProofError::Malformed(format!(
                "format {:?}, expected {FORMAT:?}",
                bundle.format
            )));
        }
        Ok(bundle)
    }

    /// Checks the bundle: the checkpoint under `pinned_keys` (or, without them, the key the
    /// bundle names), then the record's inclusion in its tree. Returns the tree head.
    pub fn verify(&self, pinned_keys: Option<&[String]>) -> Result<TreeHead, ProofError> {
        let own = [self.log_key.clone()];
        let keys = pinned_keys.unwrap_or(&own);
        let checkpoint = verify_checkpoint(&self.checkpoint, keys)
            .map_err(|e| ProofError::Checkpoint(e.to_string()))?;
        let head = checkpoint.head;
        let not_included = ProofError::NotIncluded {
            index: self.record.index,
            size: head.size,
        };
        if self.record.index >= head.size || self.inclusion.len() > 64 {
            return Err(not_included);
        }
        let mut proof = Vec::with_capacity(self.inclusion.len());
        for hash in &self.inclusion {
            let bytes = STANDARD
                .decode(hash)
                .map_err(|e| ProofError::Malformed(format!("an inclusion hash: {e}")))?;
            let hash: [u8; 32] = bytes
                .try_into()
                .map_err(|_| ProofError::Malformed("an inclusion hash is not 32 bytes".into()))?;
            proof.push(Hash(hash));
        }
        tlog_tiles::check_record(
            &proof,
            head.size,
            head.root,
            self.record.index,
            self.record.hash(),
        )
        .map_err(|_| not_included)?;
        Ok(head)
    }
}
