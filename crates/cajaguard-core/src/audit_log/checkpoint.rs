//! Checkpoints: C2SP `tlog-checkpoint` bodies (`tlog_tiles::Checkpoint`) in C2SP `signed-note`s
//! (`signed_note::Note`), signed with the log key.

use signed_note::{Note, StandardVerifier, Verifier, VerifierList};

use crate::approval::SigningKey;

use super::Hash;

/// A tree's size and root: what a checkpoint says and what an approval commits to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TreeHead {
    pub size: u64,
    pub root: Hash,
}

/// The signed-note algorithm byte for Ed25519 (C2SP `signed-note`).
const ALG_ED25519: u8 = 0x01;

/// The log key as a signed-note signer: its name is the log's origin.
pub struct LogSigner {
    key: SigningKey,
    name: String,
    id: u32,
}

impl LogSigner {
    /// A signer named `origin` (which must be a valid key name: no spaces, no `+`).
    pub fn new(key: SigningKey, origin: &str) -> Result<LogSigner, CheckpointError> {
        if !signed_note::is_key_name_valid(origin) {
            return Err(CheckpointError::Malformed(format!(
                "the log origin {origin:?} is not a valid signed-note key name"
            )));
        }
        let id = signed_note::key_id(origin, &Self::encoded_public(&key));
        Ok(LogSigner {
            key,
            name: origin.to_owned(),
            id,
        })
    }

    fn encoded_public(key: &SigningKey) -> Vec<u8> {
        let mut encoded = vec![ALG_ED25519];
        encoded.extend_from_slice(&key.public_key().to_bytes());
        encoded
    }

    /// The verifier key in signed-note form (`<name>+<id>+<base64>`), which `audit verify` and
    /// anyone with Go's `note` package or `tlog_tiles` can check a checkpoint against.
    pub fn verifier_key(&self) -> String {
        use base64::Engine as _;
        format!(
            "{}+{:08x}+{}",
            self.name,
            self.id,
            base64::engine::general_purpose::STANDARD.encode(Self::encoded_public(&self.key))
        )
    }

    pub fn origin(&self) -> &str {
        &self.name
    }

    /// The signed checkpoint of `head`, as note text.
    pub fn sign(&self, head: TreeHead) -> Result<String, CheckpointError> {
        let body = tlog_tiles::Checkpoint::new(&self.name, head.size, head.root, "")
            .map_err(|_| CheckpointError::Malformed("the log origin is empty".to_owned()))?;
        let mut note = Note::new(&body.to_bytes(), &[])
            .map_err(|e| CheckpointError::Malformed(e.to_string()))?;
        note.add_sigs(&[self])
            .map_err(|e| CheckpointError::Malformed(e.to_string()))?;
        String::from_utf8(note.to_bytes())
            .map_err(|_| CheckpointError::Malformed("the note is not UTF-8".to_owned()))
    }
}

impl signed_note::Signer for LogSigner {
    fn name(&self) -> &str {
        &self.name
    }
    fn key_id(&self) -> u32 {
        self.id
    }
    fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, signature::Error> {
        Ok(self.key.sign_raw(msg).to_vec())
    }
}

/// A checkpoint read from its text.
#[derive(Debug, Clone, PartialEq)]
pub struct VerifiedCheckpoint {
    pub origin: String,
    pub head: TreeHead,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointError {
    #[error("not a checkpoint: {0}")]
    Malformed(String),
    #[error("the checkpoint is signed by no known log key ({0})")]
    UnknownKey(String),
    #[error("a checkpoint signature does not verify ({0})")]
    BadSignature(String),
}

/// The checkpoint in `text` (a signed note), its signatures not checked: for a checkpoint whose
/// authority is another signature (an approval's, which covers the whole note).
pub fn read_checkpoint(text: &str) -> Result<VerifiedCheckpoint, CheckpointError> {
    let note =
        Note::from_bytes(text.as_bytes()).map_err(|e| CheckpointError::Malformed(e.to_string()))?;
    body(&note)
}

/// The checkpoint in `text`, which must carry a valid signature by one of `verifier_keys`
/// (signed-note verifier keys) and no invalid signature by any of them.
pub fn verify_checkpoint(
    text: &str,
    verifier_keys: &[String],
) -> Result<VerifiedCheckpoint, CheckpointError> {
    let note =
        Note::from_bytes(text.as_bytes()).map_err(|e| CheckpointError::Malformed(e.to_string()))?;
    let mut verifiers: Vec<Box<dyn Verifier>> = Vec::new();
    // A key that does not parse verifies nothing; it must not fail the checkpoints the other
    // keys sign (one bad row in the store's key table would otherwise fail them all).
    for vkey in verifier_keys {
        if let Ok(verifier) = StandardVerifier::new(vkey) {
            verifiers.push(Box::new(verifier));
        }
    }
    note.verify(&VerifierList::new(verifiers))
        .map_err(|e| match e {
            signed_note::NoteError::UnverifiedNote => CheckpointError::UnknownKey(e.to_string()),
            other => CheckpointError::BadSignature(other.to_string()),
        })?;
    body(&note)
}

fn body(note: &Note) -> Result<VerifiedCheckpoint, CheckpointError> {
    let checkpoint = tlog_tiles::Checkpoint::from_bytes(note.text())
        .map_err(|e| CheckpointError::Malformed(e.to_string()))?;
    Ok(VerifiedCheckpoint {
        origin: checkpoint.origin().to_owned(),
        head: TreeHead {
            size: checkpoint.size(),
            root: *checkpoint.hash(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of C2SP `signed-note` (and Go's `golang.org/x/mod/sumdb/note`).
    const NEUMANN_VKEY: &str = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW";
    const NEUMANN_NOTE: &str = "If you think cryptography is the answer to your problem,\n\
        then you don't know what your problem is.\n\
        \n\
        \u{2014} PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n";

    #[test]
    fn the_c2sp_signed_note_example_verifies_and_a_changed_text_does_not() {
        let note = Note::from_bytes(NEUMANN_NOTE.as_bytes()).unwrap();
        let list = VerifierList::new(vec![Box::new(StandardVerifier::new(NEUMANN_VKEY).unwrap())]);
        note.verify(&list).unwrap();
        let changed = NEUMANN_NOTE.replace("answer", "ANSWER");
        let note = Note::from_bytes(changed.as_bytes()).unwrap();
        assert!(note.verify(&list).is_err());
    }

    fn signer() -> LogSigner {
        LogSigner::new(SigningKey::from_seed(&[7; 32]), "cajaguard/test-log").unwrap()
    }

    #[test]
    fn a_signed_checkpoint_reads_back_under_its_key_only() {
        let signer = signer();
        let head = TreeHead {
            size: 923_748,
            root: Hash([9; 32]),
        };
        let text = signer.sign(head).unwrap();
        assert!(text.starts_with("cajaguard/test-log\n923748\n"), "{text}");
        let read = verify_checkpoint(&text, &[signer.verifier_key()]).unwrap();
        assert_eq!(read.head, head);
        assert_eq!(read.origin, "cajaguard/test-log");

        let other = LogSigner::new(SigningKey::from_seed(&[8; 32]), "cajaguard/test-log").unwrap();
        assert!(matches!(
            verify_checkpoint(&text, &[other.verifier_key()]),
            Err(CheckpointError::UnknownKey(_))
        ));
        let forged = text.replace("923748", "923749");
        assert!(matches!(
            verify_checkpoint(&forged, &[signer.verifier_key()]),
            Err(CheckpointError::BadSignature(_))
        ));
        // Unsigned reading still sees the forged size: only the signature can tell.
        assert_eq!(read_checkpoint(&forged).unwrap().head.size, 923_749);
    }

    #[test]
    fn the_verifier_key_is_the_one_signed_note_derives() {
        let signer = signer();
        assert!(StandardVerifier::new(&signer.verifier_key()).is_ok());
    }

    #[test]
    fn an_origin_with_a_space_is_refused() {
        assert!(LogSigner::new(SigningKey::from_seed(&[7; 32]), "two words").is_err());
    }
}
