//! Payments started at the same instant from several sessions, for the tests and the report's
//! scenarios that race proxies over one window or one approval.

use std::sync::Barrier;

use crate::mcp::Mcp;
use crate::ucp::verdict;

/// Pays each agent's checkout (test instrument, fresh key) from its own thread, all released by
/// one barrier; `(verdict, reason)` per agent, in order.
pub fn pay_at_once(agents: &mut [(Mcp, String)]) -> Vec<(String, String)> {
    let barrier = Barrier::new(agents.len());
    std::thread::scope(|scope| {
        let handles: Vec<_> = agents
            .iter_mut()
            .map(|(mcp, checkout)| {
                let barrier = &barrier;
                scope.spawn(move || {
                    barrier.wait();
                    let (verdict, reason, _) = verdict(&mcp.pay(checkout));
                    (verdict, reason)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| panic!("an agent thread panicked"))
            })
            .collect()
    })
}

/// Each session with a checkout of its own for `quantity` x `slug` (made before any race, so
/// that the race is only over what the payments share).
pub fn with_checkouts(
    sessions: impl IntoIterator<Item = Mcp>,
    slug: &str,
    quantity: u64,
) -> Vec<(Mcp, String)> {
    sessions
        .into_iter()
        .map(|mut mcp| {
            let checkout = mcp.create_checkout(slug, quantity);
            (mcp, checkout)
        })
        .collect()
}

/// A day pack blocked on `first`, approved by `approve` (given the request id), then paid by
/// `first` and `second` at once: the checkout and both rulings.
pub fn approval_raced(
    mut first: Mcp,
    second: Mcp,
    approve: impl FnOnce(&str),
) -> (String, Vec<(String, String)>) {
    let checkout = first.create_checkout("day-pack", 1);
    let request_id = verdict(&first.pay(&checkout))
        .2
        .expect("blocked with a request id");
    approve(&request_id);
    let rulings = pay_at_once(&mut [(first, checkout.clone()), (second, checkout.clone())]);
    (checkout, rulings)
}
