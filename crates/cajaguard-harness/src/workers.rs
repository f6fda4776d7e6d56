//! Child processes for tests that need real processes racing one store: the running test binary
//! started again to run one test only, which does a worker's part when an environment variable
//! says so, and reports on a `WORKER-RESULT` line.

use std::process::{Child, Command, Stdio};

/// The running test binary as a command that runs only the test `test`, its output captured
/// (the caller adds the environment that makes `test` a worker, then spawns it).
pub fn self_as_worker(test: &str) -> Command {
    let mut command = Command::new(std::env::current_exe().expect("the test binary has a path"));
    command
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .stdout(Stdio::piped());
    command
}

/// Waits for a worker, which must succeed; what it printed after `WORKER-RESULT `.
pub fn worker_result(child: Child) -> String {
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "worker failed: {stdout}");
    stdout
        .lines()
        .find_map(|l| {
            l.split_once("WORKER-RESULT ")
                .map(|(_, r)| r.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("the worker reported nothing: {stdout}"))
}
