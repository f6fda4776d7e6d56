//! The fixture shop as an MCP Streamable HTTP server on a loopback port, with a bearer token: the
//! HTTP world's shop, which a test can stop and restart like a shop going away.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::bins::fixture_bin;
use crate::world::{SHOP_TOKEN, TOKEN_VAR};

/// The fixture shop serving MCP Streamable HTTP on a loopback port, killed on drop.
pub struct FixtureServer {
    child: Option<Child>,
    pub addr: String,
    state: PathBuf,
    port_file: PathBuf,
}

impl FixtureServer {
    /// Starts the fixture on `listen` (`127.0.0.1:0` for any free port) and waits until it listens.
    pub fn start(state: &Path, port_file: &Path, listen: &str) -> FixtureServer {
        FixtureServer::start_or_exit(state, port_file, listen)
            .unwrap_or_else(|| panic!("the fixture could not listen on {listen}"))
    }

    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// Stops the server (its sessions are lost, like a shop restarting).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server and starts a new one on the same address: old session ids are unknown to it.
    pub fn restart(&mut self) {
        self.stop();
        let addr = self.addr.clone();
        // The port was just freed; a retry covers the short moment before the OS lets go of it.
        for _ in 0..50 {
            let next = FixtureServer::start_or_exit(&self.state, &self.port_file, &addr);
            if let Some(next) = next {
                *self = next;
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("the fixture could not listen on {addr} again");
    }

    fn start_or_exit(state: &Path, port_file: &Path, listen: &str) -> Option<FixtureServer> {
        let _ = std::fs::remove_file(port_file);
        let mut child = Command::new(fixture_bin())
            .arg("--state")
            .arg(state)
            .args([
                "--listen",
                listen,
                "--bearer-token-env",
                TOKEN_VAR,
                "--port-file",
            ])
            .arg(port_file)
            .env(TOKEN_VAR, SHOP_TOKEN)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            if let Ok(addr) = std::fs::read_to_string(port_file) {
                return Some(FixtureServer {
                    child: Some(child),
                    addr,
                    state: state.to_path_buf(),
                    port_file: port_file.to_path_buf(),
                });
            }
            if let Ok(Some(_)) = child.try_wait() {
                return None;
            }
            assert!(std::time::Instant::now() < deadline, "the fixture hung");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

impl Drop for FixtureServer {
    fn drop(&mut self) {
        self.stop();
    }
}
