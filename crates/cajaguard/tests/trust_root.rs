//! The trust root (SPEC §6, §8, §12): the config, the trusted keys and the home must not be open to
//! other users, state files are private, and nothing in the home is followed out of it by a link.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::os::unix::fs::{PermissionsExt, symlink};

use support::*;

fn mode(path: &std::path::Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o777
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_world_writable_config_or_config_folder_is_refused_with_exit_2() {
    let world = World::new();
    std::fs::set_permissions(&world.config, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = world.cli(&["status"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("writable by every user"),
        "{}",
        stderr(&out)
    );
    std::fs::set_permissions(&world.config, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(world.cli(&["status"]).status.code(), Some(0));

    let dir = world.dir.path();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = world.cli(&["status"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("replace the config"),
        "{}",
        stderr(&out)
    );
    // Sticky, like /tmp: others cannot replace the file, so it is fine.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    assert_eq!(
        world.cli(&["status"]).status.code(),
        Some(0),
        "{}",
        stderr(&world.cli(&["status"]))
    );
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
}

#[test]
fn a_world_writable_trusted_key_is_refused() {
    let world = World::new();
    let public = world.key_dir.join("approver.pub.pem");
    std::fs::set_permissions(&public, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = world.cli(&["status"]);
    let out_mcp = std::process::Command::new(cajaguard_bin())
        .args(["mcp", "--config"])
        .arg(&world.config)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out_mcp.status.code(), Some(2), "{}", stderr(&out_mcp));
    assert!(
        stderr(&out_mcp).contains("swap in their own key"),
        "{}",
        stderr(&out_mcp)
    );
    // `status` reads no keys; it still works.
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn state_files_are_private_and_links_out_of_home_are_refused() {
    let world = World::new();
    let mut mcp = world.proxy();
    let checkout = mcp.create_checkout("day-pack", 1);
    let request_id = verdict(&mcp.pay(&checkout)).2.unwrap();
    let out = world.cli(&["approve", &request_id, "--yes"]);
    assert!(out.status.success(), "{}", stderr(&out));
    drop(mcp);

    assert_eq!(mode(&world.home), 0o700);
    assert_eq!(mode(&world.approvals_dir()), 0o700);
    for entry in std::fs::read_dir(&world.home).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            assert_eq!(mode(&path), 0o600, "{}", path.display());
        }
    }
    for entry in std::fs::read_dir(world.approvals_dir()).unwrap() {
        let path = entry.unwrap().path();
        assert_eq!(mode(&path), 0o600, "{}", path.display());
    }

    // The audit log and pending requests live in the database: a database that is a link to
    // somewhere else is refused, and the proxy does not start.
    let db = world.home.join("cajaguard.db");
    let elsewhere = world.dir.path().join("elsewhere.db");
    std::fs::rename(&db, &elsewhere).unwrap();
    symlink(&elsewhere, &db).unwrap();
    let out = world.cli(&["status"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "an unsafe home is a config error"
    );
    assert!(stderr(&out).contains("symbolic link"), "{}", stderr(&out));
}

#[test]
fn a_world_writable_home_is_a_config_error() {
    let world = World::new();
    assert_eq!(world.cli(&["status"]).status.code(), Some(0));
    std::fs::set_permissions(&world.home, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = world.cli(&["status"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(world.home.to_str().unwrap()),
        "{}",
        stderr(&out)
    );
}
