//! Approver key files (SPEC §6): where they go, their modes, never overwriting, refusing a private key
//! others can read.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use cajaguard::keys::{
    self, KeyError, PRIVATE_KEY_FILE, PUBLIC_KEY_FILE, generate_signing_key, key_dir,
    load_public_key, load_signing_key, load_trusted_keys, write_keypair,
};
use cajaguard_core::approval::SigningKey;

fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
    let map: HashMap<String, OsString> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), OsString::from(v)))
        .collect();
    move |name| map.get(name).cloned()
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn key_dir_precedence() {
    let all = env(&[
        ("CAJAGUARD_KEY_DIR", "/keys"),
        ("XDG_CONFIG_HOME", "/xdg"),
        ("HOME", "/home/ana"),
    ]);
    assert_eq!(
        key_dir(Some(Path::new("out")), &all).unwrap(),
        PathBuf::from("out")
    );
    assert_eq!(key_dir(None, &all).unwrap(), PathBuf::from("/keys"));
    let no_override = env(&[("XDG_CONFIG_HOME", "/xdg"), ("HOME", "/home/ana")]);
    assert_eq!(
        key_dir(None, &no_override).unwrap(),
        PathBuf::from("/xdg/cajaguard")
    );
    let home_only = env(&[("HOME", "/home/ana")]);
    assert_eq!(
        key_dir(None, &home_only).unwrap(),
        PathBuf::from("/home/ana/.config/cajaguard")
    );
    // Empty values are unset, and a relative XDG_CONFIG_HOME is ignored (XDG base directory spec).
    let odd = env(&[
        ("CAJAGUARD_KEY_DIR", ""),
        ("XDG_CONFIG_HOME", "rel"),
        ("HOME", "/home/ana"),
    ]);
    assert_eq!(
        key_dir(None, &odd).unwrap(),
        PathBuf::from("/home/ana/.config/cajaguard")
    );
    assert!(matches!(key_dir(None, &env(&[])), Err(KeyError::NoKeyDir)));
}

#[test]
fn keypair_is_written_with_care_and_never_overwritten() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("a/cajaguard");
    let key = generate_signing_key().unwrap();
    let written = write_keypair(&dir, &key, false).unwrap();
    assert_eq!(written.private_key, dir.join(PRIVATE_KEY_FILE));
    assert_eq!(written.public_key, dir.join(PUBLIC_KEY_FILE));
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&written.private_key), 0o600);
    assert_eq!(mode(&written.public_key), 0o644);
    let pem = fs::read_to_string(&written.private_key).unwrap();
    assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----"), "PKCS#8 PEM");
    assert_eq!(
        load_signing_key(&written.private_key).unwrap().public_key(),
        key.public_key()
    );
    assert_eq!(
        load_public_key(&written.public_key).unwrap(),
        key.public_key()
    );
    assert_eq!(
        fs::read_dir(&dir).unwrap().count(),
        2,
        "no temporary files left"
    );

    let other = generate_signing_key().unwrap();
    let err = write_keypair(&dir, &other, false).unwrap_err();
    assert!(
        matches!(&err, KeyError::Exists { path } if *path == written.private_key),
        "{err}"
    );
    assert!(err.to_string().contains("--force"), "{err}");
    assert_eq!(
        load_signing_key(&written.private_key).unwrap().public_key(),
        key.public_key(),
        "untouched"
    );

    write_keypair(&dir, &other, true).unwrap();
    assert_eq!(
        load_signing_key(&written.private_key).unwrap().public_key(),
        other.public_key()
    );
    assert_eq!(
        load_public_key(&written.public_key).unwrap(),
        other.public_key()
    );
    assert_eq!(mode(&written.private_key), 0o600);
}

#[test]
fn an_existing_public_key_alone_also_stops_keygen() {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join(PUBLIC_KEY_FILE), b"someone's key").unwrap();
    let err = write_keypair(tmp.path(), &SigningKey::from_seed(&[1; 32]), false).unwrap_err();
    assert!(matches!(err, KeyError::Exists { .. }));
    assert!(!tmp.path().join(PRIVATE_KEY_FILE).exists());
}

#[test]
fn a_private_key_others_can_read_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let written = write_keypair(tmp.path(), &SigningKey::from_seed(&[2; 32]), false).unwrap();
    for loose in [0o640, 0o604, 0o644, 0o660] {
        fs::set_permissions(&written.private_key, fs::Permissions::from_mode(loose)).unwrap();
        let err = load_signing_key(&written.private_key).err().unwrap();
        assert!(
            matches!(err, KeyError::PrivateKeyTooOpen { .. }),
            "{loose:o}: {err}"
        );
        let message = err.to_string();
        assert!(
            message.contains(&format!("chmod 600 {}", written.private_key.display())),
            "{message}"
        );
    }
    fs::set_permissions(&written.private_key, fs::Permissions::from_mode(0o400)).unwrap();
    assert!(load_signing_key(&written.private_key).is_ok());
}

#[test]
fn a_missing_private_key_says_to_run_keygen() {
    let tmp = tempfile::tempdir().unwrap();
    let err = load_signing_key(&tmp.path().join(PRIVATE_KEY_FILE))
        .err()
        .unwrap();
    assert!(matches!(err, KeyError::MissingPrivateKey { .. }));
    assert!(err.to_string().contains("cajaguard keygen"), "{err}");
}

#[test]
fn a_garbled_key_is_an_error_without_its_contents() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join(PRIVATE_KEY_FILE);
    fs::write(
        &path,
        "-----BEGIN PRIVATE KEY-----\nc2VjcmV0LXNlY3JldA==\n-----END PRIVATE KEY-----\n",
    )
    .unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
    let err = load_signing_key(&path).err().unwrap();
    assert!(matches!(err, KeyError::Parse { .. }), "{err}");
    assert!(!err.to_string().contains("c2VjcmV0"), "{err}");
}

#[test]
fn trusted_keys_load_all_or_name_the_missing_one() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a");
    let b = tmp.path().join("b");
    let ka = write_keypair(&a, &SigningKey::from_seed(&[3; 32]), false).unwrap();
    let kb = write_keypair(&b, &SigningKey::from_seed(&[4; 32]), false).unwrap();
    let trusted = load_trusted_keys(&[ka.public_key.clone(), kb.public_key.clone()]).unwrap();
    assert_eq!(trusted.0.len(), 2);
    assert_eq!(trusted.0[0], SigningKey::from_seed(&[3; 32]).public_key());

    let missing = tmp.path().join("nope.pub.pem");
    let err = load_trusted_keys(&[ka.public_key, missing.clone()])
        .err()
        .unwrap();
    assert!(
        matches!(&err, KeyError::TrustedKeyUnreadable { path, .. } if *path == missing),
        "{err}"
    );
    assert!(
        err.to_string().contains(&missing.display().to_string()),
        "{err}"
    );

    // A private key where a public one belongs is a parse error naming the file.
    let err = load_trusted_keys(std::slice::from_ref(&ka.private_key))
        .err()
        .unwrap();
    assert!(
        matches!(&err, KeyError::Parse { path, .. } if *path == ka.private_key),
        "{err}"
    );
}

#[test]
fn keys_are_random() {
    let a = keys::generate_signing_key().unwrap().public_key();
    let b = keys::generate_signing_key().unwrap().public_key();
    assert_ne!(a, b);
}
