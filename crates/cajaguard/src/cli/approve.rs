//! `cajaguard approve <id>` and `cajaguard deny <id>`: re-read the checkout from the shop, refuse if
//! it changed or is no longer ready, show it, ask the human on the terminal, and sign.

use super::Exit;
use cajaguard_core::display;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use cajaguard_core::approval::{self, ApprovalTerms, BasketDigest, Decision};
use cajaguard_core::money::{self, Currency};
use cajaguard_core::quote::Quote;
use time::OffsetDateTime;

use super::output::shown;
use super::{Failure, Outcome};
use crate::keys;
use crate::proxy::{Shop, checkout};
use crate::store::{FiledApproval, PendingRow};

/// The UCP agent identity CajaGuard uses when it reads a checkout for a human.
const APPROVER_PROFILE: &str = "https://cajaguard.invalid/profiles/approver.json";

#[derive(clap::Args)]
pub struct ApproveArgs {
    #[command(flatten)]
    common: Common,
    /// How long the approval stays valid (humantime: 90s, 5m, 1h); at most approvals.max_ttl_minutes.
    #[arg(long, default_value = "15m", value_parser = humantime::parse_duration)]
    ttl: Duration,
    /// A note kept in the approval (shown, signed).
    #[arg(long, default_value = "")]
    note: String,
}

#[derive(clap::Args)]
pub struct DenyArgs {
    #[command(flatten)]
    common: Common,
    /// A note kept in the deny (shown, signed).
    #[arg(long, default_value = "")]
    note: String,
}

#[derive(clap::Args)]
struct Common {
    /// The request id printed when the payment was blocked (cg-...).
    id: String,
    /// The CajaGuard config file (JSON) whose gate blocked the payment.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Do not ask; needed when there is no terminal.
    #[arg(long)]
    yes: bool,
    /// Where the approver key is (else $CAJAGUARD_KEY_DIR, else the user's config directory).
    #[arg(long, value_name = "DIR")]
    key_dir: Option<PathBuf>,
}

pub fn approve(args: &ApproveArgs) -> Outcome {
    sign(&args.common, Decision::Approve, Some(args.ttl), &args.note)
}

pub fn deny(args: &DenyArgs) -> Outcome {
    sign(&args.common, Decision::Deny, None, &args.note)
}

fn sign(common: &Common, decision: Decision, ttl: Option<Duration>, note: &str) -> Outcome {
    let policy = super::load_policy(&common.config)?;
    passkey_only(&policy, &common.id)?;
    let max_ttl = policy.approvals.max_ttl;
    let ttl = ttl.unwrap_or(max_ttl);
    if ttl > max_ttl || ttl.is_zero() {
        return Err(Failure::usage(
            format!(
                "--ttl {} is not within 1s..{} (approvals.max_ttl_minutes)",
                humantime::format_duration(ttl),
                humantime::format_duration(max_ttl)
            ),
            "pass a shorter --ttl",
        ));
    }
    let id = super::parse_request_id(&common.id)?;
    let store = super::open_store(&policy)?;
    let Some(pending) = store.pending_request(&id).map_err(Failure::from)? else {
        return Err(Failure::refused(
            format!("no pending request {id} in {}", shown(&policy.home)),
            format!(
                "list them with `cajaguard pending --config {}` (a newer block on the same checkout replaces a request)",
                shown(&policy.source)
            ),
        ));
    };
    let key_dir =
        keys::key_dir(common.key_dir.as_deref(), &|name| super::env(name)).map_err(|e| {
            Failure::usage(e.to_string(), "pass --key-dir DIR or set CAJAGUARD_KEY_DIR")
        })?;
    let key = keys::load_signing_key(&key_dir.join(keys::PRIVATE_KEY_FILE)).map_err(|e| {
        super::said(
            Exit::Usage,
            &e,
            e.says_what_to_do(),
            "run `cajaguard keygen`, or point --key-dir at your approver key",
        )
    })?;

    let quote = reread(&policy, &pending)?;
    show(&pending, &quote, decision);
    let public = key.public_key();
    let trusted = super::load_trusted(&policy).unwrap_or_default();
    if !trusted.0.contains(&public) {
        eprintln!(
            "warning: your key {} is not in approvals.trusted_keys of {}; the gate will not accept this approval",
            public.key_id(),
            shown(&policy.source)
        );
    }
    if !common.yes {
        confirm(decision, &pending)?;
    }
    let mut nonce = [0u8; 16];
    getrandom::fill(&mut nonce)
        .map_err(|e| Failure::unexpected(format!("no randomness for the nonce: {e}")))?;
    let now = OffsetDateTime::now_utc();
    // The approval commits to the audit log as it is now (SPEC §8): a fresh checkpoint.
    let checkpoint = store.checkpoint(now).map_err(Failure::from)?;
    let terms = ApprovalTerms {
        request_id: id.clone(),
        digest: pending.request.digest,
        decision,
        merchant: pending.request.merchant.clone(),
        checkout_id: pending.request.checkout_id.clone(),
        currency: pending.request.currency.clone(),
        total: pending.request.total,
        issued_at: now,
        ttl,
        nonce,
        note: note.to_owned(),
        checkpoint: Some(checkpoint),
    };
    let document = approval::sign(&key, &terms);
    let filed = store.write_approval(&document).map_err(Failure::from)?;
    match decision {
        Decision::Approve => println!(
            "approved {id} for {}, valid for {}: {}",
            super::pending::amount(&pending),
            humantime::format_duration(ttl),
            filed_shown(&filed)
        ),
        Decision::Deny => println!("denied {id}: {}", filed_shown(&filed)),
    }
    Ok(Exit::Done)
}

fn filed_shown(filed: &FiledApproval) -> String {
    match filed {
        FiledApproval::File(path) => shown(path),
        other => other.to_string(),
    }
}

/// The checkout as the shop has it now, whatever its state (`show` prints it as it is).
pub fn read_back(
    policy: &cajaguard_core::policy::Policy,
    pending: &PendingRow,
) -> Result<Quote, Failure> {
    let shop = Shop::new(&policy.downstream, Arc::new(|_: &str| {})).map_err(|e| {
        super::said(
            Exit::Usage,
            &e,
            e.says_what_to_do(),
            "fix downstream in the config",
        )
    })?;
    let agent = serde_json::json!({ "profile": APPROVER_PROFILE });
    let params = checkout::get_checkout_params(&agent, &pending.request.checkout_id);
    let reply = shop.request("tools/call", Some(&params), &mut |_| {});
    checkout::quote_from_reply(reply, &pending.request.checkout_id).map_err(|ruling| {
        Failure::refused(
            format!(
                "cannot read the checkout back from the shop: {}",
                ruling.detail()
            ),
            "nothing was signed; try again when the shop answers",
        )
    })
}

/// The checkout as the shop has it now; exit 3 if it is no longer the basket that was blocked.
fn reread(policy: &cajaguard_core::policy::Policy, pending: &PendingRow) -> Result<Quote, Failure> {
    let quote = read_back(policy, pending)?;
    if quote.status != "ready_for_complete" {
        return Err(Failure::refused(
            format!(
                "the checkout is {} now, not ready_for_complete",
                display::terminal(&quote.status)
            ),
            "nothing was signed; the agent must start a new checkout",
        ));
    }
    if BasketDigest::of_request(
        &quote,
        &pending.request.instruments,
        pending.request.agent.as_ref(),
    ) != pending.request.digest
    {
        return Err(Failure::refused(
            "the checkout changed since it was blocked (items, amounts, merchant or currency)",
            "nothing was signed; the agent's next attempt makes a new request to approve",
        ));
    }
    Ok(quote)
}

fn show(pending: &PendingRow, quote: &Quote, decision: Decision) {
    let request = &pending.request;
    let currency = Currency::from_code(&quote.currency).ok();
    let amount = |minor: i64| match currency {
        Some(c) => money::display(minor, c),
        None => format!("{minor} (minor units)"),
    };
    eprintln!(
        "{} request {}",
        if decision == Decision::Approve {
            "Approve"
        } else {
            "Deny"
        },
        request.request_id
    );
    if let Some(agent) = &request.agent {
        eprintln!("  agent:     {}", display::terminal(agent.as_str()));
    }
    eprintln!("  merchant:  {}", display::terminal(&request.merchant));
    eprintln!("  checkout:  {}", display::terminal(&request.checkout_id));
    eprintln!("  amount:    {}", amount(quote.total));
    for line in &quote.line_items {
        eprintln!(
            "  item:      {} x {} [{}] at {}",
            line.quantity,
            display::terminal(&line.title),
            display::terminal(&line.item_id),
            amount(line.unit_price)
        );
    }
    // Where it goes is part of what is approved (the request digest binds it).
    for destination in quote.destinations() {
        eprintln!("  delivery:  {}", display::terminal(&destination));
    }
    for instrument in &request.instruments {
        eprintln!(
            "  pays with: {}{}",
            display::terminal(&instrument.handler_id),
            instrument
                .id
                .as_deref()
                .map_or_else(String::new, |id| format!(" [{}]", display::terminal(id)))
        );
    }
    eprintln!(
        "  handlers:  {}",
        request
            .handler_ids()
            .iter()
            .map(|h| display::terminal(h))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

/// Asks the human (see `terminal::confirm`).
fn confirm(decision: Decision, pending: &PendingRow) -> Result<(), Failure> {
    let verb = if decision == Decision::Approve {
        "Approve"
    } else {
        "Deny"
    };
    super::terminal::confirm(&format!(
        "{verb} {} to {}?",
        super::pending::amount(pending),
        display::terminal(&pending.request.merchant)
    ))
}

/// With `approvals.require: "passkey"` the gate counts no key-file approval, so signing one would
/// only mislead: exit 2 (the config says this is not how to decide), pointing to the page.
pub(super) fn passkey_only(
    policy: &cajaguard_core::policy::Policy,
    id: &str,
) -> Result<(), Failure> {
    if policy.approvals.require.accepts_key_file() {
        return Ok(());
    }
    let page = match (&policy.approvals.web, super::parse_request_id(id)) {
        (Some(web), Ok(id)) => web.request_url(id.as_str()),
        (Some(web), Err(_)) => format!("{}/", web.origin()),
        (None, _) => "the approval page".to_owned(),
    };
    Err(Failure::usage(
        format!(
            "approvals.require is \"passkey\" in {}: an approver key file decides nothing here",
            shown(&policy.source)
        ),
        format!("decide with your passkey at {page} (`cajaguard web --config FILE` serves it)"),
    ))
}
