//! The command line (SPEC §7). One file per subcommand; this file parses the arguments, loads the
//! config, and maps every outcome to an exit code that means something:
//! 0 done, 1 unexpected, 2 usage or config, 3 unknown id / not approved / checkout changed / the
//! human said no, 4 denied.

mod agent;
pub(crate) mod approve;
mod audit;
mod client_config;
mod freeze;
mod keygen;
mod mcp;
mod output;
mod passkey;
mod pending;
mod serve;
mod status;
mod terminal;
mod verify;
mod web;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use cajaguard_core::policy::{ConfigOrigin, Policy};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "cajaguard",
    version,
    about = "A spend gate for shopping agents: an MCP proxy that gates complete_checkout."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write an Ed25519 approver key pair (approver.key.pem, approver.pub.pem).
    Keygen(keygen::Args),
    /// Serve MCP on stdio: the gate in front of the configured shop (--config), or a bridge to a
    /// CajaGuard service (--connect) for clients that speak only stdio.
    Mcp(mcp::Args),
    /// Caps, spend and headroom per currency, and the requests waiting for a decision.
    Status(status::Args),
    /// Payments waiting for a human's decision (not those approved or denied already).
    Pending(pending::Args),
    /// One request in full: items, state, and what to do next.
    Show(IdArgs),
    /// Whether a request has a valid, unused approval (exit 0), none yet (3), or a deny (4).
    Verify(IdArgs),
    /// Re-read the checkout from the shop, show it, and sign an approval.
    Approve(approve::ApproveArgs),
    /// Re-read the checkout from the shop, show it, and sign a deny.
    Deny(approve::DenyArgs),
    /// Stop every payment at once, on every process and host on the store.
    Freeze(freeze::FreezeArgs),
    /// Let payments through again: signed with the approver key, asked on the terminal.
    Unfreeze(freeze::UnfreezeArgs),
    /// Serve the gate to many agents over MCP Streamable HTTP on serve.listen (SPEC §13).
    Serve(serve::Args),
    /// Serve the local approval page (passkeys) on approvals.web.listen.
    Web(web::Args),
    /// Register (one-time link), list or remove the passkeys that approve on the page.
    #[command(subcommand)]
    Passkey(passkey::Command),
    /// Check the tamper-evident audit log, and write or check proofs of its records.
    #[command(subcommand)]
    Audit(audit::Command),
    /// Give the service's agents bearer tokens (printed once), list them, or take one away.
    #[command(subcommand)]
    Agent(agent::Command),
    /// Print a ready-to-paste MCP client entry (claude-desktop, claude-code, cursor, vscode).
    ClientConfig(client_config::Args),
}

#[derive(clap::Args)]
struct IdArgs {
    /// A request id (cg-...), as printed when a payment was blocked.
    id: String,
    /// The CajaGuard config file (JSON).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// One JSON document on stdout instead of text (the exit code is the same).
    #[arg(long)]
    json: bool,
}

/// The exit codes of SPEC §7, the one place they are numbered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Done; for `verify`, approved; for `mcp`, the client hung up.
    Done = 0,
    /// Anything unexpected (a store that failed, no randomness).
    Unexpected = 1,
    /// A usage or config error (for `mcp --connect`, a URL not allowed or an unset token
    /// variable), and `keygen` refusing to overwrite.
    Usage = 2,
    /// An unknown id, not approved (pending, invalid, used, expired), a checkout that changed, or
    /// a human who said no.
    Refused = 3,
    /// `verify`: a human signed a deny.
    Denied = 4,
    /// `audit verify`, `audit check-proof`: the log was altered.
    Altered = 5,
}

impl Exit {
    pub fn code(self) -> u8 {
        self as u8
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> ExitCode {
        ExitCode::from(exit.code())
    }
}

/// A failure with its exit code: one line of cause and one of what to do.
#[derive(Debug)]
pub struct Failure {
    pub exit: Exit,
    pub message: String,
    pub hint: Option<String>,
}

impl Failure {
    pub fn usage(message: impl Into<String>, hint: impl Into<String>) -> Failure {
        Failure {
            exit: Exit::Usage,
            message: message.into(),
            hint: Some(hint.into()),
        }
    }
    pub fn unexpected(message: impl Into<String>) -> Failure {
        Failure {
            exit: Exit::Unexpected,
            message: message.into(),
            hint: None,
        }
    }
    pub fn refused(message: impl Into<String>, hint: impl Into<String>) -> Failure {
        Failure {
            exit: Exit::Refused,
            message: message.into(),
            hint: Some(hint.into()),
        }
    }
}

/// A store failure: its own hint (none when the message already says what to do); an unsafe home
/// or an unusable `store` setting is the config's to fix (2), anything else unexpected (1).
impl From<crate::store::StoreError> for Failure {
    fn from(e: crate::store::StoreError) -> Failure {
        use crate::store::StoreError;
        Failure {
            exit: match e {
                StoreError::Unsafe { .. } | StoreError::Config(_) => Exit::Usage,
                _ => Exit::Unexpected,
            },
            message: e.to_string(),
            hint: e.hint().map(str::to_owned),
        }
    }
}

pub type Outcome = Result<Exit, Failure>;

/// A failure from an error whose message may already say what to do: then no hint repeats it.
pub fn said(
    exit: Exit,
    error: &dyn std::fmt::Display,
    says_what_to_do: bool,
    hint: &str,
) -> Failure {
    Failure {
        exit,
        message: error.to_string(),
        hint: (!says_what_to_do && !hint.is_empty()).then(|| hint.to_owned()),
    }
}

pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    init_logging();
    let outcome = match cli.command {
        Command::Keygen(args) => keygen::run(&args),
        Command::Mcp(args) => mcp::run(&args),
        Command::Status(args) => status::run(&args),
        Command::Pending(args) => pending::run(&args),
        Command::Show(args) => pending::show(&args),
        Command::Verify(args) => verify::run(&args),
        Command::Approve(args) => approve::approve(&args),
        Command::Deny(args) => approve::deny(&args),
        Command::Freeze(args) => freeze::freeze(&args),
        Command::Unfreeze(args) => freeze::unfreeze(&args),
        Command::ClientConfig(args) => client_config::run(&args),
        Command::Audit(command) => audit::run(&command),
        Command::Web(args) => web::run(&args),
        Command::Serve(args) => serve::run(&args),
        Command::Passkey(command) => passkey::run(&command),
        Command::Agent(command) => agent::run(&command),
    };
    match outcome {
        Ok(exit) => ExitCode::from(exit),
        Err(failure) => {
            eprintln!("cajaguard: {}", failure.message);
            if let Some(hint) = failure.hint {
                eprintln!("  -> {hint}");
            }
            ExitCode::from(failure.exit)
        }
    }
}

/// Logs go to stderr only: stdout of `cajaguard mcp` is the MCP channel. `CAJAGUARD_LOG` takes a
/// tracing filter (`cajaguard=debug`); the default shows warnings only. Colour only on a terminal
/// and without `NO_COLOR`: MCP clients capture stderr into log files, where escapes are noise.
fn init_logging() {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_env("CAJAGUARD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("cajaguard=warn"));
    let colour = std::io::stderr().is_terminal() && env("NO_COLOR").is_none();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

/// Reads and validates the config (exit 2 on any problem, naming the file).
pub fn load_policy(path: &Path) -> Result<Policy, Failure> {
    let absolute = std::path::absolute(path).map_err(|e| {
        Failure::usage(
            format!("{}: {e}", path.display()),
            "pass --config with a readable file",
        )
    })?;
    let text = std::fs::read_to_string(&absolute).map_err(|e| {
        Failure::usage(
            format!("cannot read the config {}: {e}", absolute.display()),
            "check the --config path",
        )
    })?;
    refuse_writable_by_others(&absolute)?;
    let user_home = env("HOME").map(PathBuf::from);
    let origin = ConfigOrigin {
        path: &absolute,
        user_home: user_home.as_deref(),
    };
    let policy = Policy::parse(&text, &origin)
        .map_err(|e| Failure::usage(e.to_string(), "fix the config file and run again"))?;
    // A build without the feature cannot open the store the config names: that is the config's
    // (or the build's) to fix, so 2, before any command starts.
    #[cfg(not(feature = "postgres"))]
    if matches!(
        policy.store,
        cajaguard_core::policy::StoreConfig::Postgres { .. }
    ) {
        return Err(Failure::usage(
            format!(
                "{}: this cajaguard was built without the `postgres` feature, so it cannot use the PostgreSQL store the config names",
                absolute.display()
            ),
            "install a build with the default features (`cargo install cajaguard`), or remove `store` to use the SQLite store in `home`",
        ));
    }
    Ok(policy)
}

/// The config is a trust root (caps, merchants, trusted keys): one that any user may rewrite, or
/// that sits in a folder where any user may replace it, could raise every cap. Refused (exit 2).
/// A world-writable folder with the sticky bit (like /tmp) is fine: others cannot replace the file.
fn refuse_writable_by_others(config: &Path) -> Result<(), Failure> {
    use std::os::unix::fs::PermissionsExt;
    let mode_of = |path: &Path| std::fs::metadata(path).map(|m| m.permissions().mode());
    if let Ok(mode) = mode_of(config)
        && mode & 0o002 != 0
    {
        return Err(Failure::usage(
            format!(
                "the config {} is writable by every user (mode {:o}): anyone could raise the caps",
                config.display(),
                mode & 0o7777
            ),
            format!("run `chmod o-w {}`", config.display()),
        ));
    }
    if let Some(dir) = config.parent()
        && let Ok(mode) = mode_of(dir)
        && mode & 0o002 != 0
        && mode & 0o1000 == 0
    {
        return Err(Failure::usage(
            format!(
                "the config's folder {} is writable by every user (mode {:o}): anyone could replace the config",
                dir.display(),
                mode & 0o7777
            ),
            format!("run `chmod o-w {}` or move the config", dir.display()),
        ));
    }
    Ok(())
}

pub fn env(name: &str) -> Option<OsString> {
    std::env::var_os(name).filter(|v| !v.is_empty())
}

/// Says in the audit log that `tool` started under this config, with the config's SHA-256 (SPEC
/// §8). A process that cannot write that does not start: its decisions would have no policy.
/// The clock the gate decides by: the database's with PostgreSQL (SPEC §13), else this host's.
fn decision_clock(
    store: &std::sync::Arc<crate::store::Store>,
) -> Result<crate::proxy::Clock, Failure> {
    let host = crate::clock::host_clock()
        .map_err(|e| Failure::usage(e, "unset it, or give whole seconds"))?;
    crate::clock::decision_clock(store, host)
        .map_err(|e| Failure::unexpected(format!("cannot read the store's clock: {e}")))
}

pub fn log_config_loaded(
    store: &crate::store::Store,
    policy: &Policy,
    tool: &str,
) -> Result<(), Failure> {
    use crate::store::{AuditEvent, AuditRecord};
    let record = AuditRecord {
        note: Some(format!(
            "config {} sha256 {}",
            cajaguard_core::display::audit(&policy.source.display().to_string()),
            hex::encode(policy.config_sha256)
        )),
        ..AuditRecord::new(time::OffsetDateTime::now_utc(), tool)
    };
    store
        .audit(AuditEvent::ConfigLoaded, &record)
        .map_err(Failure::from)
}

/// Opens the store named by the policy (its `store`, else SQLite in `home`).
pub fn open_store(policy: &Policy) -> Result<crate::store::Store, Failure> {
    use cajaguard_core::policy::StoreConfig;
    crate::store::Store::for_policy(policy).map_err(|e| Failure {
        // An unsafe home (world-writable, a link out of it) is the config's trust root to fix: 2.
        exit: if matches!(e, crate::store::StoreError::Unsafe { .. }) { Exit::Usage } else { Exit::Unexpected },
        message: e.to_string(),
        hint: e.hint().is_some().then(|| match policy.store {
            StoreConfig::Sqlite => format!(
                "check that {} is a directory you own",
                output::shown(&policy.home)
            ),
            StoreConfig::Postgres { .. } => {
                "check that the PostgreSQL server is up and that store.url (or the variable store.url_env names) is right".to_owned()
            }
        }),
    })
}

pub fn load_trusted(policy: &Policy) -> Result<cajaguard_core::approval::TrustedKeys, Failure> {
    crate::keys::counted_trusted_keys(policy).map_err(|e| {
        said(
            Exit::Usage,
            &e,
            e.says_what_to_do(),
            "run `cajaguard keygen` or fix approvals.trusted_keys in the config",
        )
    })
}

/// A malformed id is a usage error (2); a well-formed id the store does not know is the caller's 3.
pub fn parse_request_id(id: &str) -> Result<cajaguard_core::approval::RequestId, Failure> {
    cajaguard_core::approval::RequestId::parse(id).map_err(|_| {
        Failure::usage(
            format!("{id:?} is not a CajaGuard request id"),
            "request ids look like cg-0123456789abcdef",
        )
    })
}
