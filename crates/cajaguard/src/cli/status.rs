//! `cajaguard status --config FILE [--json]`

use super::Exit;
use cajaguard_core::display;
use cajaguard_core::money::{self, Currency};
use std::path::PathBuf;

use super::{Failure, Outcome};

#[derive(clap::Args)]
pub struct Args {
    /// The CajaGuard config file (JSON).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// The same JSON document as the `cajaguard_status` tool.
    #[arg(long)]
    json: bool,
}

pub fn run(args: &Args) -> Outcome {
    super::output::json_outcome(args.json, status(args))
}

fn status(args: &Args) -> Outcome {
    let policy = super::load_policy(&args.config)?;
    let store = super::open_store(&policy)?;
    let document = crate::status::document(&policy, &store, time::OffsetDateTime::now_utc())
        .map_err(Failure::from)?;
    if args.json {
        super::output::print_json(&document)?;
        return Ok(Exit::Done);
    }
    let text = |v: &serde_json::Value| v.as_str().unwrap_or("?").to_owned();
    if let Some(frozen) = document["frozen"].as_object() {
        println!(
            "PAYMENTS FROZEN since {} ({}): `cajaguard unfreeze --config FILE` lifts it",
            frozen.get("at").map(text).unwrap_or_default(),
            display::terminal(&frozen.get("reason").map(text).unwrap_or_default())
        );
    }
    println!(
        "mode: {}   window: {} h",
        text(&document["mode"]),
        document["window_hours"]
    );
    let merchants: Vec<String> = document["merchants"]
        .as_array()
        .into_iter()
        .flatten()
        .map(text)
        .collect();
    println!("merchants: {}", merchants.join(", "));
    println!(
        "{:<5} {:>14} {:>14} {:>14} {:>12} {:>12} {:>12}",
        "", "approval above", "per payment", "window", "spent", "in flight", "remaining"
    );
    if let Some(caps) = document["caps"].as_object() {
        for (code, cap) in caps {
            println!(
                "{code:<5} {:>14} {:>14} {:>14} {:>12} {:>12} {:>12}",
                text(&cap["approval_above"]),
                text(&cap["per_transaction"]),
                text(&cap["window"]),
                text(&cap["spent"]),
                text(&cap["in_flight"]),
                text(&cap["remaining"]),
            );
        }
    }
    // The service's agents (SPEC §13): each one's own spend beside the global table.
    let agents = crate::status::agent_spend(&policy, &store, time::OffsetDateTime::now_utc())
        .map_err(Failure::from)?;
    if !agents.is_empty() {
        println!(
            "{:<24} {:<5} {:>12} {:>12} {:>14}",
            "agent", "", "spent", "in flight", "window cap"
        );
        for row in &agents {
            let major = |minor: i64| match Currency::from_code(&row.currency) {
                Ok(currency) => money::format_major(minor, currency),
                Err(_) => minor.to_string(),
            };
            println!(
                "{:<24} {:<5} {:>12} {:>12} {:>14}",
                row.agent.as_str(),
                display::terminal(&row.currency),
                major(row.spent.settled),
                major(row.spent.in_flight),
                row.window.map_or_else(|| "global only".to_owned(), major),
            );
        }
    }
    let pending = document["pending"].as_array().map_or(0, Vec::len);
    if pending > 0 {
        println!(
            "waiting for a decision: {pending} (cajaguard pending --config {})",
            super::output::shown(&policy.source)
        );
    } else {
        println!("waiting for a decision: 0");
    }
    Ok(Exit::Done)
}
