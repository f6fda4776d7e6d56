//! `cajaguard pending --config FILE` and `cajaguard show <id> --config FILE`

use std::path::Path;

use cajaguard_core::money::{self, Currency};
use time::format_description::well_known::Rfc3339;

use super::{Failure, Outcome, printable};
use crate::store::PendingRow;

pub fn run(config: &Path) -> Outcome {
    let policy = super::load_policy(config)?;
    let store = super::open_store(&policy)?;
    let rows = store
        .pending()
        .map_err(|e| Failure::unexpected(e.to_string()))?;
    if rows.is_empty() {
        println!("no payment is waiting for approval");
    }
    for row in rows {
        println!(
            "{}  {}  {}  {}  {}",
            row.request.request_id,
            amount(&row),
            printable(&row.request.merchant),
            printable(&row.request.checkout_id),
            row.created_at.format(&Rfc3339).unwrap_or_default()
        );
    }
    Ok(0)
}

pub fn show(id: &str, config: &Path) -> Outcome {
    let policy = super::load_policy(config)?;
    let id = super::parse_request_id(id)?;
    let store = super::open_store(&policy)?;
    let Some(row) = store
        .pending_request(&id)
        .map_err(|e| Failure::unexpected(e.to_string()))?
    else {
        return Err(Failure::refused(
            format!("no request {id} in {}", policy.home.display()),
            "list them with `cajaguard pending --config FILE`",
        ));
    };
    let request = &row.request;
    println!("request:   {}", request.request_id);
    println!("merchant:  {}", printable(&request.merchant));
    println!("checkout:  {}", printable(&request.checkout_id));
    println!("amount:    {}", amount(&row));
    println!(
        "handlers:  {}",
        request
            .handler_ids()
            .iter()
            .map(|h| printable(h))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!("digest:    {}", request.digest.to_hex());
    println!(
        "created:   {}",
        row.created_at.format(&Rfc3339).unwrap_or_default()
    );
    println!(
        "approve:   cajaguard approve {} --config {}",
        request.request_id,
        policy.source.display()
    );
    Ok(0)
}

pub fn amount(row: &PendingRow) -> String {
    match Currency::from_code(&row.request.currency) {
        Ok(currency) => money::display(row.request.total, currency),
        Err(_) => format!(
            "{} {} (minor units)",
            printable(&row.request.currency),
            row.request.total
        ),
    }
}
