//! Asking the human: on the terminal itself, never on piped stdin, so that an agent that can write
//! to our stdin cannot answer for the human (age's `read_secret`).

use std::io::{BufRead, BufReader, Write};

use super::Failure;

/// Asks `question [y/N]` on `/dev/tty`; `Ok` only for a yes. No terminal: a usage error (exit 2)
/// that points to `--yes`; any other answer: refused (exit 3).
pub fn confirm(question: &str) -> Result<(), Failure> {
    let no_terminal = |e: std::io::Error| {
        Failure::usage(
            format!("no terminal to ask on ({e})"),
            "run it in a terminal, or pass --yes to go ahead without asking",
        )
    };
    let tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .map_err(no_terminal)?;
    let mut writer = tty.try_clone().map_err(no_terminal)?;
    write!(writer, "{question} [y/N] ")
        .and_then(|()| writer.flush())
        .map_err(no_terminal)?;
    let mut answer = String::new();
    BufReader::new(tty)
        .read_line(&mut answer)
        .map_err(no_terminal)?;
    if matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes") {
        Ok(())
    } else {
        Err(Failure::refused(
            "not signed: the answer was not yes",
            "nothing changed; run it again to decide",
        ))
    }
}
