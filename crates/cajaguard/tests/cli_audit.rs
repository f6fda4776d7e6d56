//! `cajaguard audit` through the binary (SPEC §7, §8): a log written by real payments and an
//! approval verifies (exit 0); an edited record makes `audit verify` exit 5 naming it; a proof
//! bundle checks offline, and a changed one does not (exit 5).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::Output;

use support::*;

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn code(out: &Output) -> Option<i32> {
    out.status.code()
}

/// A world with a small payment, a Day pack blocked, approved by the human and paid.
fn paid_world() -> World {
    let world = World::new();
    let mut mcp = world.proxy();
    let small = mcp.create_checkout("trail-socks", 1);
    let (verdict, _, _) = verdict(&mcp.pay(&small));
    assert_eq!(verdict, "allow");
    let day_pack = mcp.create_checkout("day-pack", 1);
    let (_, reason, request_id) = verdict_of(&mut mcp, &day_pack);
    assert_eq!(reason, "pending_approval");
    let out = world.cli(&["approve", &request_id.unwrap(), "--yes"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (verdict, _, _) = verdict_of(&mut mcp, &day_pack);
    assert_eq!(verdict, "allow_approved");
    drop(mcp);
    world
}

fn verdict_of(mcp: &mut Mcp, checkout: &str) -> (String, String, Option<String>) {
    verdict(&mcp.pay(checkout))
}

#[test]
fn a_log_written_by_payments_verifies_and_an_edited_record_is_named_with_exit_5() {
    let world = paid_world();
    let out = world.cli(&["audit", "verify"]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("the audit log is whole"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // The approval committed to a checkpoint, so the log has an anchor outside its own key.
    assert!(
        !stderr(&out).contains("and 0 checkpoint(s) held"),
        "{}",
        stderr(&out)
    );

    let db = rusqlite::Connection::open(world.home.join(cajaguard::store::DB_FILE)).unwrap();
    db.execute(
        "UPDATE audit SET total = 1 WHERE log_index = 2 AND total IS NOT NULL",
        [],
    )
    .unwrap();
    let edited: i64 = db.changes() as i64;
    if edited == 0 {
        db.execute("UPDATE audit SET tool = 'edited' WHERE log_index = 2", [])
            .unwrap();
    }
    drop(db);
    let out = world.cli(&["audit", "verify"]);
    assert_eq!(code(&out), Some(5), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("record 2 was altered"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_proof_bundle_checks_offline_and_a_changed_one_does_not() {
    let world = paid_world();
    let bundle = world.dir.path().join("proof.json");
    let out = world.cli(&["audit", "proof", "1", "--out", bundle.to_str().unwrap()]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    let checkpoint = world.cli(&["audit", "checkpoint"]);
    assert_eq!(code(&checkpoint), Some(0), "{}", stderr(&checkpoint));
    let vkey = stderr(&checkpoint)
        .rsplit(' ')
        .next()
        .unwrap()
        .trim()
        .to_owned();

    // check-proof needs no config and no store.
    let check = |path: &std::path::Path, key: &str| {
        std::process::Command::new(cajaguard_bin())
            .args([
                "audit",
                "check-proof",
                path.to_str().unwrap(),
                "--log-key",
                key,
            ])
            .env("HOME", world.dir.path())
            .output()
            .unwrap()
    };
    let out = check(&bundle, &vkey);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));

    let text = std::fs::read_to_string(&bundle).unwrap();
    let mut doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    doc["record"]["latency_us"] = serde_json::json!(123_456_789);
    let changed = world.dir.path().join("changed.json");
    std::fs::write(&changed, doc.to_string()).unwrap();
    let out = check(&changed, &vkey);
    assert_eq!(code(&out), Some(5), "{}", stderr(&out));
}
