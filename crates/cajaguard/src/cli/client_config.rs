//! `cajaguard client-config <client> --config FILE [--name NAME]`: the MCP client entry that starts
//! this `cajaguard` in front of the config's shop, with absolute paths, ready to paste.
//!
//! MCP clients start servers from their own working directory with a bare environment (`HOME`,
//! `PATH`, `USER`, `SHELL`, `TERM`, `LOGNAME`), so every path in the entry is absolute and every
//! CajaGuard variable the server needs is in its `env`.

use super::Exit;
use std::path::PathBuf;

use serde_json::{Value, json};

use super::output::print_json;
use super::{Failure, Outcome};

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Client {
    ClaudeDesktop,
    ClaudeCode,
    Cursor,
    Vscode,
}

#[derive(clap::Args)]
pub struct Args {
    /// The MCP client the entry is for.
    #[arg(value_enum)]
    client: Client,
    /// The CajaGuard config file (JSON) the server will use; checked before anything is printed.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// The server's name in the client.
    #[arg(long, value_name = "NAME", default_value = "shop-via-cajaguard")]
    name: String,
}

pub fn run(args: &Args) -> Outcome {
    // An entry for a config that does not load would only fail later, inside the client.
    let policy = super::load_policy(&args.config)?;
    let config = std::fs::canonicalize(&policy.source).map_err(|e| {
        Failure::usage(
            format!("cannot resolve {}: {e}", policy.source.display()),
            "pass --config with a readable file",
        )
    })?;
    let program = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .map_err(|e| Failure::unexpected(format!("cannot find this cajaguard's own path: {e}")))?;
    let (document, place) = entry(
        args.client,
        &args.name,
        &program.display().to_string(),
        &config.display().to_string(),
    );
    print_json(&document)?;
    eprintln!("cajaguard: paste this into {place}");
    Ok(Exit::Done)
}

/// The entry and where it goes. The four clients differ only in the top-level key and in whether
/// the transport is named.
fn entry(client: Client, name: &str, program: &str, config: &str) -> (Value, String) {
    let mut server = json!({
        "command": program,
        "args": ["mcp", "--config", config],
        "env": { "CAJAGUARD_LOG": "cajaguard=info" },
    });
    let typed = matches!(client, Client::ClaudeCode | Client::Vscode);
    if let (true, Some(fields)) = (typed, server.as_object_mut()) {
        fields.insert("type".into(), "stdio".into());
    }
    let (key, place) = match client {
        Client::ClaudeDesktop => (
            "mcpServers",
            "claude_desktop_config.json (macOS: ~/Library/Application Support/Claude/, Windows: %APPDATA%\\Claude\\), merging mcpServers if the file has it".to_owned(),
        ),
        Client::ClaudeCode => (
            "mcpServers",
            format!(
                ".mcp.json at the project's root (or run: claude mcp add {name} -- {} mcp --config {})",
                shell_word(program),
                shell_word(config)
            ),
        ),
        Client::Cursor => (
            "mcpServers",
            "~/.cursor/mcp.json (or .cursor/mcp.json in the project)".to_owned(),
        ),
        Client::Vscode => ("servers", ".vscode/mcp.json in the workspace".to_owned()),
    };
    (json!({ key: { name: server } }), place)
}

/// A word a POSIX shell reads back as itself.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:@%,".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::{Client, entry, shell_word};

    #[test]
    fn vscode_uses_servers_and_names_the_transport() {
        let (doc, _) = entry(Client::Vscode, "cg", "/bin/cajaguard", "/etc/cg.json");
        assert_eq!(doc["servers"]["cg"]["type"], "stdio");
        assert_eq!(doc["servers"]["cg"]["args"][2], "/etc/cg.json");
        let (doc, _) = entry(Client::Cursor, "cg", "/bin/cajaguard", "/etc/cg.json");
        assert!(doc["mcpServers"]["cg"].get("type").is_none());
    }

    #[test]
    fn shell_words_with_spaces_are_quoted() {
        assert_eq!(shell_word("/a b/it's"), "'/a b/it'\\''s'");
        assert_eq!(shell_word("/usr/bin/cajaguard"), "/usr/bin/cajaguard");
    }
}
