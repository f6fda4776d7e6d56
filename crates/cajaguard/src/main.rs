//! The `cajaguard` command: thin over the library; `main` maps a result to an exit code.

use std::process::ExitCode;

fn main() -> ExitCode {
    cajaguard::cli::main()
}
