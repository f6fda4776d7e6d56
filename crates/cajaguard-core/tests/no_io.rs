//! The core crate does no I/O (STYLE "Pure core, I/O shell"): no files, network, clock or OS
//! randomness in its library source. Tests may do I/O; this one reads the sources.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

const FORBIDDEN: &[&str] = &[
    "std::fs",
    "SystemTime::now",
    "OffsetDateTime::now",
    "getrandom",
    "std::net",
    "Instant::now",
    "std::env",
    "std::process",
    "rand::",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().and_then(|e| e.to_str()) == Some("rs") {
            out.push(path);
        }
    }
}

#[test]
fn library_source_does_no_io() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(
        files.len() >= 10,
        "expected the core's sources under {}",
        src.display()
    );
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for needle in FORBIDDEN {
            assert!(
                !text.contains(needle),
                "{} uses `{needle}`: the core must stay pure",
                file.display()
            );
        }
    }
    let manifest =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap();
    let deps = manifest.split("[dev-dependencies]").next().unwrap();
    for dep in ["getrandom", "rand", "tokio"] {
        assert!(
            !deps.lines().any(|l| l.trim_start().starts_with(dep)),
            "the core must not depend on {dep}"
        );
    }
}
