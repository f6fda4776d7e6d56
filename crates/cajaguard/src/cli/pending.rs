//! `cajaguard pending --config FILE [--json]` and `cajaguard show <id> --config FILE [--json]`

use super::Exit;
use cajaguard_core::display;
use std::path::PathBuf;

use cajaguard_core::approval::BasketDigest;
use cajaguard_core::money::{self, Currency};
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::output::{json_outcome, print_json, shown};
use super::{Failure, IdArgs, Outcome};
use crate::store::{ApprovalStatus, PendingRow};

#[derive(clap::Args)]
pub struct Args {
    /// The CajaGuard config file (JSON).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// One JSON document on stdout: {"pending": [...]}, each entry as in `status --json`.
    #[arg(long)]
    json: bool,
}

pub fn run(args: &Args) -> Outcome {
    json_outcome(args.json, list(args))
}

fn list(args: &Args) -> Outcome {
    let policy = super::load_policy(&args.config)?;
    let store = super::open_store(&policy)?;
    let trusted = super::load_trusted(&policy).unwrap_or_default();
    // Decided requests (a valid deny, a valid unused approval) are not waiting for anyone.
    let rows = store
        .awaiting_decision(
            &trusted,
            policy.approvals.passkey_relying_party().as_ref(),
            OffsetDateTime::now_utc(),
            policy.approvals.max_ttl,
            None,
        )
        .map_err(Failure::from)?;
    if args.json {
        let entries: Vec<Value> = rows.iter().map(crate::status::pending_entry).collect();
        print_json(&json!({ "pending": entries }))?;
        return Ok(Exit::Done);
    }
    if rows.is_empty() {
        println!("no payment is waiting for a decision");
    }
    for row in rows {
        println!(
            "{}  {}  {}  {}  {}",
            row.request.request_id,
            amount(&row),
            display::terminal(&row.request.merchant),
            display::terminal(&row.request.checkout_id),
            row.created_at.format(&Rfc3339).unwrap_or_default()
        );
    }
    Ok(Exit::Done)
}

/// Where a stored request stands, as `show` names it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Pending,
    Approved,
    Denied,
    Used,
}

impl State {
    fn word(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Approved => "approved",
            State::Denied => "denied",
            State::Used => "used",
        }
    }
    fn meaning(self) -> &'static str {
        match self {
            State::Pending => "waiting for a human's decision",
            State::Approved => "approved, not used yet: the agent's next payment attempt uses it",
            State::Denied => "denied by a human: the gate refuses it",
            State::Used => "its approval paid it already",
        }
    }
}

pub fn show(args: &IdArgs) -> Outcome {
    json_outcome(args.json, show_one(args))
}

fn show_one(args: &IdArgs) -> Outcome {
    let id = super::parse_request_id(&args.id)?;
    let policy = super::load_policy(&args.config)?;
    let store = super::open_store(&policy)?;
    let Some(row) = store.pending_request(&id).map_err(Failure::from)? else {
        return Err(Failure::refused(
            format!("no request {id} in {}", shown(&policy.home)),
            format!(
                "list them with `cajaguard pending --config {}`",
                shown(&policy.source)
            ),
        ));
    };
    let trusted = super::load_trusted(&policy).unwrap_or_default();
    let now = OffsetDateTime::now_utc();
    let status = store
        .approval_status(
            &id,
            &trusted,
            policy.approvals.passkey_relying_party().as_ref(),
            now,
            policy.approvals.max_ttl,
        )
        .map_err(Failure::from)?;
    let state = match status {
        ApprovalStatus::Approved => State::Approved,
        ApprovalStatus::Denied => State::Denied,
        // A request the gate blocked again after its approval was used waits again.
        _ if store
            .pending()
            .map_err(Failure::from)?
            .iter()
            .any(|r| r.request.request_id == id) =>
        {
            State::Pending
        }
        _ => State::Used,
    };
    let next = (state == State::Pending).then(|| {
        format!(
            "cajaguard approve {id} --config {}   (or: cajaguard deny {id} --config {})",
            shown(&policy.source),
            shown(&policy.source)
        )
    });
    // The items are not stored with the request: the shop's checkout is the one source of them.
    let now_at_shop = super::approve::read_back(&policy, &row).map(|quote| {
        let matches =
            BasketDigest::of_request(&quote, &row.request.instruments, row.request.agent.as_ref())
                == row.request.digest;
        (quote, matches)
    });
    let request = &row.request;
    let currency = Currency::from_code(&request.currency).ok();
    let major = |minor: i64| currency.map(|c| money::format_major(minor, c));

    if args.json {
        let checkout = match &now_at_shop {
            Ok((quote, matches)) => json!({
                "status": quote.status,
                "matches_request": matches,
                "items": quote.line_items.iter().map(|line| json!({
                    "title": line.title,
                    "item_id": line.item_id,
                    "quantity": line.quantity,
                    "unit_price": major(line.unit_price),
                    "unit_price_minor": line.unit_price,
                })).collect::<Vec<_>>(),
            }),
            Err(failure) => json!({ "error": failure.message }),
        };
        let mut document = crate::status::pending_entry(&row);
        if let Some(fields) = document.as_object_mut() {
            fields.insert("state".into(), state.word().into());
            fields.insert("handler_ids".into(), json!(request.handler_ids()));
            fields.insert("digest".into(), request.digest.to_hex().into());
            fields.insert("checkout".into(), checkout);
            fields.insert("next".into(), next.clone().into());
        }
        print_json(&document)?;
        return Ok(Exit::Done);
    }

    println!("request:   {}", request.request_id);
    println!("state:     {} ({})", state.word(), state.meaning());
    if let Some(agent) = &request.agent {
        println!("agent:     {}", display::terminal(agent.as_str()));
    }
    println!("merchant:  {}", display::terminal(&request.merchant));
    println!("checkout:  {}", display::terminal(&request.checkout_id));
    println!("amount:    {}", amount(&row));
    match &now_at_shop {
        Ok((quote, matches)) => {
            for line in &quote.line_items {
                println!(
                    "item:      {} x {} at {}",
                    line.quantity,
                    display::terminal(&line.title),
                    currency.map_or_else(
                        || format!("{} (minor units)", line.unit_price),
                        |c| money::display(line.unit_price, c)
                    )
                );
            }
            println!(
                "shop now:  {}, {}",
                display::terminal(&quote.status),
                if *matches {
                    "the same basket as the request"
                } else {
                    "the basket changed since the request (approving it would fail)"
                }
            );
        }
        Err(failure) => println!("items:     unknown: {}", failure.message),
    }
    println!(
        "handlers:  {}",
        request
            .handler_ids()
            .iter()
            .map(|h| display::terminal(h))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!("digest:    {}", request.digest.to_hex());
    println!(
        "created:   {}",
        row.created_at.format(&Rfc3339).unwrap_or_default()
    );
    if let Some(next) = next {
        println!("next:      {next}");
    }
    Ok(Exit::Done)
}

pub fn amount(row: &PendingRow) -> String {
    match Currency::from_code(&row.request.currency) {
        Ok(currency) => money::display(row.request.total, currency),
        Err(_) => format!(
            "{} {} (minor units)",
            display::terminal(&row.request.currency),
            row.request.total
        ),
    }
}
