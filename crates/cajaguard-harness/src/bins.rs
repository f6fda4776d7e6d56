//! Where the binaries a world drives are: beside the running executable (a test or bench binary
//! in `target/<profile>/deps/`, or the xtask in `target/<profile>/`), from one build profile.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

/// The binaries a world starts.
#[derive(Debug, Clone)]
pub struct Bins {
    pub cajaguard: PathBuf,
    pub fixture: PathBuf,
    pub test_shop: PathBuf,
    pub demo: PathBuf,
}

impl Bins {
    /// The binaries of the running executable's profile (not built yet: see [`sibling_bin`]).
    pub fn here() -> &'static Bins {
        static BINS: OnceLock<Bins> = OnceLock::new();
        BINS.get_or_init(|| {
            let dir = profile_dir();
            Bins {
                cajaguard: dir.join("cajaguard"),
                fixture: dir.join("cajaguard-fixture-shop"),
                test_shop: dir.join("cajaguard-test-shop"),
                demo: dir.join("cajaguard-demo"),
            }
        })
    }
}

/// `target/<profile>`: the running executable's folder, or its parent when that is `deps`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the running executable has a path");
    let dir = exe.parent().expect("the executable is in a folder");
    if dir.file_name().is_some_and(|d| d == "deps") {
        dir.parent().unwrap_or(dir).to_path_buf()
    } else {
        dir.to_path_buf()
    }
}

/// `cajaguard` (built by cargo before its own integration tests run; the xtask builds it first).
pub fn cajaguard_bin() -> PathBuf {
    sibling_bin("cajaguard", &Bins::here().cajaguard)
}

/// The fixture is another package's binary: `cargo test --workspace` builds it before any test
/// runs; `cargo test -p cajaguard` does not, so it is built here once if missing.
pub fn fixture_bin() -> PathBuf {
    sibling_bin("cajaguard-fixture-shop", &Bins::here().fixture)
}

/// The demo agent (`crates/cajaguard-demo`), found like the fixture.
pub fn demo_bin() -> PathBuf {
    sibling_bin("cajaguard-demo", &Bins::here().demo)
}

/// The scriptable misbehaving shop (`crates/cajaguard-test-shop`), found like the fixture.
pub fn test_shop_bin() -> PathBuf {
    sibling_bin("cajaguard-test-shop", &Bins::here().test_shop)
}

/// `path`, the binary of workspace package `package`, built with the running profile if missing.
fn sibling_bin(package: &str, path: &Path) -> PathBuf {
    static BUILD: Mutex<()> = Mutex::new(());
    let _guard = BUILD.lock().unwrap_or_else(|p| p.into_inner());
    if !path.is_file() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut build = Command::new(cargo);
        build.args(["build", "--quiet", "-p", package, "--bin", package]);
        if path
            .parent()
            .and_then(Path::file_name)
            .is_some_and(|d| d == "release")
        {
            build.arg("--release");
        }
        let status = build.status().unwrap();
        assert!(
            status.success() && path.is_file(),
            "cannot build {package}: run `cargo build --workspace` first"
        );
    }
    path.to_path_buf()
}
