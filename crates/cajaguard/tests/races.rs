//! Several `cajaguard mcp` processes sharing one home (SPEC §4.12, §11.2-3): together they never
//! pass a cap and never use one approval twice.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::{Arc, Barrier};

use support::*;

#[test]
fn eight_proxies_racing_split_purchases_never_pass_the_window() {
    let world = World::new();
    let proxies = 8;
    // Each proxy gets its own checkout first, so that the race is only over the window.
    let mut agents: Vec<(Mcp, String)> = (0..proxies)
        .map(|_| {
            let mut mcp = world.proxy();
            let checkout = mcp.create_checkout("rain-shell", 1);
            (mcp, checkout)
        })
        .collect();
    let barrier = Arc::new(Barrier::new(proxies));
    let verdicts: Vec<(String, String)> = std::thread::scope(|scope| {
        let handles: Vec<_> = agents
            .iter_mut()
            .map(|(mcp, checkout)| {
                let barrier = barrier.clone();
                scope.spawn(move || {
                    barrier.wait();
                    let (verdict, reason, _) = verdict(&mcp.pay(checkout));
                    (verdict, reason)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let allowed = verdicts.iter().filter(|(v, _)| v == "allow").count();
    // USD 150.00 window, USD 45.00 each: three fit, the fourth would make 180.00.
    assert_eq!(allowed, 3, "{verdicts:?}");
    assert!(
        verdicts
            .iter()
            .filter(|(v, _)| v != "allow")
            .all(|(v, r)| v == "denied" && r == "over_window_cap"),
        "{verdicts:?}"
    );
    let completed: usize = agents
        .iter()
        .map(|(_, c)| world.completes_reaching_shop(c))
        .sum();
    assert_eq!(
        completed, 3,
        "exactly the allowed payments reached the shop"
    );

    let store = cajaguard::store::Store::open(&world.home).unwrap();
    let spend = store
        .window_spend(
            std::time::Duration::from_secs(24 * 3600),
            time::OffsetDateTime::now_utc(),
        )
        .unwrap();
    let usd = spend.get("USD").copied().unwrap_or_default();
    assert_eq!((usd.settled, usd.in_flight), (13500, 0));
}

#[test]
fn one_approval_raced_by_two_proxies_is_used_once() {
    let world = World::new();
    let mut first = world.proxy();
    let checkout = first.create_checkout("day-pack", 1);
    let request_id = verdict(&first.pay(&checkout))
        .2
        .expect("blocked with a request id");
    let out = world.cli(&["approve", &request_id, "--yes"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let mut second = world.proxy();
    let barrier = Arc::new(Barrier::new(2));
    let results: Vec<(String, String)> = std::thread::scope(|scope| {
        [&mut first, &mut second]
            .into_iter()
            .map(|mcp| {
                let barrier = barrier.clone();
                let checkout = checkout.clone();
                scope.spawn(move || {
                    barrier.wait();
                    let (verdict, reason, _) = verdict(&mcp.pay(&checkout));
                    (verdict, reason)
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect()
    });
    let approved = results
        .iter()
        .filter(|(v, _)| v == "allow_approved")
        .count();
    assert_eq!(approved, 1, "{results:?}");
    assert_eq!(world.completes_reaching_shop(&checkout), 1, "{results:?}");
}
