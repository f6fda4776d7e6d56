//! The audit log's pure parts: RFC 6962 and C2SP vectors, and every kind of tampering `audit
//! verify` must name (SPEC §8). The store-level tests (both backends) are in the cajaguard crate.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use cajaguard_core::approval::SigningKey;
use cajaguard_core::audit_log::{
    Anchor, Hash, Leaf, LogAuditor, LogSigner, OtherLogs, ProofBundle, Tampering, TreeHead,
    leaf_hash, root, stored_hashes_for,
};

/// The Certificate Transparency reference leaves (transparency-dev/merkle `testonly`).
const CT_LEAVES: [&str; 8] = [
    "",
    "00",
    "10",
    "2021",
    "3031",
    "40414243",
    "5051525354555657",
    "606162636465666768696a6b6c6d6e6f",
];
/// The RFC 6962 root of the first `n` of them, `n` = 0..=8.
const CT_ROOTS: [&str; 9] = [
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
];

struct Stored(Vec<Hash>);
impl tlog_tiles::HashReader for Stored {
    fn read_hashes(&self, indexes: &[u64]) -> Result<Vec<Hash>, tlog_tiles::tlog::Error> {
        indexes
            .iter()
            .map(|&i| {
                self.0
                    .get(i as usize)
                    .copied()
                    .ok_or(tlog_tiles::tlog::Error::IndexesNotInTree)
            })
            .collect()
    }
}

#[test]
fn rfc6962_roots_of_the_ct_reference_leaves() {
    let mut stored = Stored(Vec::new());
    assert_eq!(hex::encode(root(0, &stored).unwrap().0), CT_ROOTS[0]);
    for (n, leaf) in CT_LEAVES.iter().enumerate() {
        let hashes =
            stored_hashes_for(n as u64, leaf_hash(&hex::decode(leaf).unwrap()), &stored).unwrap();
        stored.0.extend(hashes);
        assert_eq!(
            hex::encode(root(n as u64 + 1, &stored).unwrap().0),
            CT_ROOTS[n + 1],
            "size {}",
            n + 1
        );
    }
    // The reference inclusion proof of leaf 5 in the tree of 8.
    let proof = tlog_tiles::prove_record(8, 5, &stored).unwrap();
    let want = [
        "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    ];
    let got: Vec<String> = proof.iter().map(|h| hex::encode(h.0)).collect();
    assert_eq!(got, want);
}

fn leaf(index: u64) -> Leaf {
    Leaf {
        agent: None,
        index,
        at: "2026-12-01T10:00:00Z".into(),
        at_us: 1_795_000_000_000_000 + index as i64,
        tool: "complete_checkout".into(),
        verdict: "allow".into(),
        reason: "allow".into(),
        merchant: Some("fixture-shop.example".into()),
        currency: Some("USD".into()),
        total: Some(8900 + index as i64),
        request_id: None,
        idempotency_key: Some(format!("k-{index}")),
        checkout_id: Some(format!("chk_{index}")),
        latency_us: 300,
        note: None,
    }
}

/// A log as the store keeps it: each record with the stored hashes its append wrote.
fn written(n: u64) -> Vec<(Leaf, Vec<u8>)> {
    let mut stored = Stored(Vec::new());
    (0..n)
        .map(|i| {
            let l = leaf(i);
            let hashes = stored_hashes_for(i, l.hash(), &stored).unwrap();
            stored.0.extend(hashes.iter().copied());
            (l, hashes.iter().flat_map(|h| h.0).collect())
        })
        .collect()
}

fn audit(rows: &[(Leaf, Vec<u8>)]) -> Result<LogAuditor, Tampering> {
    let mut log = LogAuditor::new();
    for (l, stored) in rows {
        log.push(l.index, l, stored)?;
    }
    Ok(log)
}

const ORIGIN: &str = "cajaguard/test-log";

fn signer(seed: u8) -> LogSigner {
    LogSigner::new(SigningKey::from_seed(&[seed; 32]), ORIGIN).unwrap()
}

fn checkpoint_of(rows: &[(Leaf, Vec<u8>)], size: u64, key: &LogSigner) -> String {
    let log = audit(&rows[..size as usize]).unwrap();
    key.sign(TreeHead {
        size,
        root: log.root(size).unwrap(),
    })
    .unwrap()
}

fn first_bad(result: Result<LogAuditor, Tampering>) -> (u64, u64) {
    match result.err().expect("tampering must be found") {
        Tampering::Record { first, last, .. } => (first, last),
        other => panic!("expected a record finding, got {other}"),
    }
}

#[test]
fn a_whole_log_verifies_against_its_checkpoints_and_anchors() {
    let rows = written(20);
    let key = signer(1);
    let log = audit(&rows).unwrap();
    let stored = vec![("checkpoint 20".to_owned(), checkpoint_of(&rows, 20, &key))];
    let anchors = vec![anchor("approval a", checkpoint_of(&rows, 13, &key), false)];
    let summary = log
        .finish(
            ORIGIN,
            20,
            &stored,
            &[key.verifier_key()],
            &anchors,
            OtherLogs::Refused,
        )
        .unwrap();
    assert_eq!(
        (summary.records, summary.checkpoints, summary.anchors),
        (20, 1, 1)
    );
}

#[test]
fn an_edited_record_is_named() {
    let mut rows = written(20);
    rows[7].0.total = Some(1);
    assert_eq!(first_bad(audit(&rows)), (7, 7));
}

#[test]
fn a_deleted_record_is_named() {
    let mut rows = written(20);
    rows.remove(11);
    assert_eq!(first_bad(audit(&rows)), (11, 11));
}

#[test]
fn two_swapped_records_are_named_at_the_first() {
    let mut rows = written(20);
    // The rows trade places, each keeping its own content and hashes.
    rows.swap(4, 9);
    assert_eq!(first_bad(audit(&rows)), (4, 4));
    // Or trade contents under their index column, each renumbered to its new place.
    let mut rows = written(20);
    let (a, b) = (rows[4].0.clone(), rows[9].0.clone());
    rows[4].0 = Leaf { index: 4, ..b };
    rows[9].0 = Leaf { index: 9, ..a };
    assert_eq!(first_bad(audit(&rows)), (4, 4));
}

#[test]
fn an_edit_with_its_own_hash_rewritten_is_caught_by_the_tree_above_it() {
    let mut rows = written(20);
    rows[4].0.total = Some(1);
    let new = rows[4].0.hash();
    rows[4].1[..32].copy_from_slice(&new.0);
    let (first, last) = first_bad(audit(&rows));
    assert!(first <= 4 && 4 <= last, "{first}..={last}");
}

#[test]
fn a_truncated_tail_is_named_through_an_approvals_checkpoint() {
    let rows = written(20);
    let key = signer(1);
    let anchor = Anchor {
        source: "approval cg-1".into(),
        checkpoint: checkpoint_of(&rows, 18, &key),
        kept_by_human: false,
    };
    let log = audit(&rows[..15]).unwrap();
    // The head row and the stored checkpoints were cut back too: only the approval remembers.
    let found = log
        .finish(
            ORIGIN,
            15,
            &[],
            &[key.verifier_key()],
            &[anchor],
            OtherLogs::Refused,
        )
        .unwrap_err();
    assert_eq!(found.first_bad(), Some(15), "{found}");
    assert!(found.to_string().contains("approval cg-1"), "{found}");
}

#[test]
fn a_rewritten_history_with_a_fresh_signature_is_found_through_an_approvals_checkpoint() {
    let honest = written(20);
    let key = signer(1);
    let anchors = [
        Anchor {
            source: "approval early".into(),
            checkpoint: checkpoint_of(&honest, 5, &key),
            kept_by_human: false,
        },
        Anchor {
            source: "approval late".into(),
            checkpoint: checkpoint_of(&honest, 12, &key),
            kept_by_human: false,
        },
    ];
    // Record 8 rewritten, every hash after it recomputed and the checkpoints re-signed: the log
    // is consistent with itself and its own key.
    let mut rewritten = Vec::new();
    let mut stored = Stored(Vec::new());
    for (i, (l, _)) in honest.iter().enumerate() {
        let mut l = l.clone();
        if i == 8 {
            l.total = Some(1);
        }
        let hashes = stored_hashes_for(i as u64, l.hash(), &stored).unwrap();
        stored.0.extend(hashes.iter().copied());
        rewritten.push((l, hashes.iter().flat_map(|h| h.0).collect::<Vec<u8>>()));
    }
    let log = audit(&rewritten).unwrap();
    // Re-signed checkpoints, one between the anchors: it matches the rewritten records, which
    // says nothing about them, so it must not narrow the finding.
    let resigned = vec![
        (
            "checkpoint 10".to_owned(),
            checkpoint_of(&rewritten, 10, &key),
        ),
        (
            "checkpoint 20".to_owned(),
            checkpoint_of(&rewritten, 20, &key),
        ),
    ];
    let found = log
        .finish(
            ORIGIN,
            20,
            &resigned,
            &[key.verifier_key()],
            &anchors,
            OtherLogs::Refused,
        )
        .unwrap_err();
    // The early approval vouches for records 0..5; the late one's root names 5..=11.
    assert!(
        matches!(
            found,
            Tampering::Record {
                first: 5,
                last: 11,
                ..
            }
        ),
        "{found}"
    );
    assert!(found.to_string().contains("approval late"), "{found}");
}

#[test]
fn a_stored_checkpoint_not_signed_by_the_log_key_is_named() {
    let rows = written(10);
    let log = audit(&rows).unwrap();
    let forged = vec![(
        "checkpoint 10".to_owned(),
        checkpoint_of(&rows, 10, &signer(2)),
    )];
    let found = log
        .finish(
            ORIGIN,
            10,
            &forged,
            &[signer(1).verifier_key()],
            &[],
            OtherLogs::Refused,
        )
        .unwrap_err();
    assert!(matches!(found, Tampering::Checkpoint { .. }), "{found}");
}

fn anchor(source: &str, checkpoint: String, kept_by_human: bool) -> Anchor {
    Anchor {
        source: source.into(),
        checkpoint,
        kept_by_human,
    }
}

#[test]
fn anchors_of_another_log_are_refused_unless_the_human_moved_approvals_in() {
    let rows = written(10);
    let log = audit(&rows).unwrap();
    let other = LogSigner::new(SigningKey::from_seed(&[3; 32]), "cajaguard/other").unwrap();
    let foreign = other
        .sign(TreeHead {
            size: 99,
            root: Hash([1; 32]),
        })
        .unwrap();
    let own = checkpoint_of(&rows, 6, &signer(1));
    let both = [
        anchor("moved approval", foreign.clone(), false),
        anchor("approval", own, false),
    ];
    // By default an approval of another log is what changing this log's origin looks like.
    let found = log
        .finish(ORIGIN, 10, &[], &[], &both, OtherLogs::Refused)
        .unwrap_err();
    assert!(
        found.to_string().contains("origin was changed")
            && found.to_string().contains("moved approval"),
        "{found}"
    );
    // One approval moved in from another home, as the human says, beside this log's own:
    // counted apart.
    let summary = log
        .finish(ORIGIN, 10, &[], &[], &both, OtherLogs::CountedApart)
        .unwrap();
    assert_eq!((summary.anchors, summary.foreign_anchors), (1, 1));
    // Every approval of another log is a finding even then.
    let only = [anchor("moved approval", foreign.clone(), false)];
    let found = log
        .finish(ORIGIN, 10, &[], &[], &only, OtherLogs::CountedApart)
        .unwrap_err();
    assert!(found.to_string().contains("origin"), "{found}");
    // A checkpoint the human kept and gave is never set aside.
    let kept = [anchor("--checkpoint kept.txt", foreign, true)];
    let found = log
        .finish(ORIGIN, 10, &[], &[], &kept, OtherLogs::CountedApart)
        .unwrap_err();
    assert!(matches!(found, Tampering::Checkpoint { .. }), "{found}");
}

#[test]
fn a_size_zero_checkpoint_with_a_wrong_root_is_named_not_a_panic() {
    let rows = written(3);
    let log = audit(&rows).unwrap();
    let key = signer(1);
    let bogus = key
        .sign(TreeHead {
            size: 0,
            root: Hash([7; 32]),
        })
        .unwrap();
    let found = log
        .finish(
            ORIGIN,
            3,
            &[],
            &[],
            &[anchor("kept", bogus, true)],
            OtherLogs::Refused,
        )
        .unwrap_err();
    assert!(matches!(found, Tampering::Checkpoint { .. }), "{found}");
}

#[test]
fn a_forged_stored_checkpoint_does_not_blame_records_an_approval_vouches_for() {
    let rows = written(20);
    let key = signer(1);
    let log = audit(&rows).unwrap();
    let forged = key
        .sign(TreeHead {
            size: 8,
            root: Hash([5; 32]),
        })
        .unwrap();
    let anchors = [anchor("approval", checkpoint_of(&rows, 15, &key), false)];
    let found = log
        .finish(
            ORIGIN,
            20,
            &[("the stored checkpoint of size 8".to_owned(), forged)],
            &[key.verifier_key()],
            &anchors,
            OtherLogs::Refused,
        )
        .unwrap_err();
    assert!(matches!(found, Tampering::Checkpoint { .. }), "{found}");
    assert!(found.to_string().contains("forged"), "{found}");
}

#[test]
fn a_proof_bundle_verifies_offline_and_a_changed_record_does_not() {
    let rows = written(13);
    let key = signer(1);
    let log = audit(&rows).unwrap();
    let head = TreeHead {
        size: 13,
        root: log.root(13).unwrap(),
    };
    for index in [0, 6, 12] {
        let bundle = ProofBundle::make(
            &log,
            rows[index].0.clone(),
            head,
            key.sign(head).unwrap(),
            key.verifier_key(),
        )
        .unwrap();
        let text = serde_json::to_string(&bundle).unwrap();
        let read = ProofBundle::from_json(&text).unwrap();
        assert_eq!(read.verify(Some(&[key.verifier_key()])).unwrap(), head);
        let mut changed = read.clone();
        changed.record.total = Some(0);
        assert!(changed.verify(None).is_err());
        // Pinned to another key, the bundle's own key claim is not enough.
        assert!(read.verify(Some(&[signer(2).verifier_key()])).is_err());
    }
}

/// The example checkpoint of C2SP `tlog-checkpoint` / `tlog-witness`, verbatim.
const C2SP_CHECKPOINT: &str = "example.com/behind-the-sofa\n\
    20852163\n\
    CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n\
    \n\
    \u{2014} example.com/behind-the-sofa Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJurmRDeOoRDe4URYN7u5/Zhcyv2q1gGzGku9nTo+zyWE+xeMcTOAYQ8=\n";

#[test]
fn the_c2sp_example_checkpoint_reads_and_is_not_ours() {
    use base64::Engine as _;
    let read = cajaguard_core::audit_log::read_checkpoint(C2SP_CHECKPOINT).unwrap();
    assert_eq!(read.origin, "example.com/behind-the-sofa");
    assert_eq!(read.head.size, 20_852_163);
    let root = base64::engine::general_purpose::STANDARD
        .decode("CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=")
        .unwrap();
    assert_eq!(read.head.root.0.to_vec(), root);
    // Signed by a key this log does not know: read, never verified.
    assert!(matches!(
        cajaguard_core::audit_log::verify_checkpoint(C2SP_CHECKPOINT, &[signer(1).verifier_key()]),
        Err(cajaguard_core::audit_log::CheckpointError::UnknownKey(_))
    ));
    // Our own checkpoints are in the same format, line for line.
    let ours = signer(1)
        .sign(read.head)
        .unwrap()
        .replace(ORIGIN, "example.com/behind-the-sofa");
    assert_eq!(
        ours.split("\n\n").next(),
        C2SP_CHECKPOINT.split("\n\n").next()
    );
}
