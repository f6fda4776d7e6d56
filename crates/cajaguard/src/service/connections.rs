//! The connections a server takes: how many at once, how many from one remote address, and how
//! long one may take to send its headers. `/mcp` and the approval page beside it are served by
//! the same loop ([`serve_connections`]), each with [`Bounds`] of its own: a flood of idle
//! connections on either would otherwise take the process's descriptors, and with them the other.
//!
//! The service closes a new connection past its overall limit, before any token is read: without
//! a share per address, one client that opens connections and sends nothing (each held up to the
//! header timeout, then opened again) takes every place and shuts every agent out. Each remote
//! address gets at most [`PER_REMOTE_ADDRESS`] of them, so such a client takes a quarter; an IPv6
//! address counts as its /64, which one client usually holds whole.
//! Loopback addresses share the overall limit only: a reverse proxy in front of the service, and
//! agents on its own host, all come from there (a process on the host can exhaust the host by
//! other means anyway).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The most connections one remote (not loopback) address holds at once.
const PER_REMOTE_ADDRESS: usize = 128;

/// How many connections each remote address holds now.
type OpenByAddress = Arc<Mutex<HashMap<IpAddr, usize>>>;

/// The connections open per remote address.
#[derive(Clone, Default)]
struct PerAddress {
    open: OpenByAddress,
}

/// One connection's place, given back when it is dropped.
struct Place {
    open: Option<(OpenByAddress, IpAddr)>,
}

impl PerAddress {
    /// A place for a connection from `peer`, or `None` when that address holds its share.
    fn take(&self, peer: IpAddr) -> Option<Place> {
        // A dual-stack listener sees IPv4 clients as IPv4-mapped IPv6: one client, one share.
        let peer = peer.to_canonical();
        if peer.is_loopback() {
            return Some(Place { open: None });
        }
        let peer = match peer {
            IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !u128::from(u64::MAX))),
            v4 => v4,
        };
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let held = open.entry(peer).or_insert(0);
        if *held >= PER_REMOTE_ADDRESS {
            return None;
        }
        *held += 1;
        Some(Place {
            open: Some((Arc::clone(&self.open), peer)),
        })
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let Some((open, peer)) = self.open.take() else {
            return;
        };
        let mut open = open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(held) = open.get_mut(&peer) {
            *held = held.saturating_sub(1);
            if *held == 0 {
                // The map holds the addresses connected now, not every one ever seen.
                open.remove(&peer);
            }
        }
    }
}

/// What bounds one server's connections.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bounds {
    /// What the log calls the server.
    pub(crate) server: &'static str,
    /// Connections served at once. Past it a new one is closed at once, so what a flood of idle
    /// connections can take is this many descriptors, not the process's last one (which a store
    /// file, a shop connection or an approval file needs).
    pub(crate) connections: usize,
    /// How long a connection may take to send a request's headers, the first or the next on a
    /// kept connection: a client that opens connections and sends nothing (or a byte at a time)
    /// would otherwise hold them, and their descriptors, for as long as it likes.
    pub(crate) header_read_timeout: Duration,
}

/// The places of one server's connections, shared by all of its listeners.
#[derive(Clone)]
pub(crate) struct Places {
    bounds: Bounds,
    slots: Arc<tokio::sync::Semaphore>,
    per_address: PerAddress,
}

impl Places {
    pub(crate) fn new(bounds: Bounds) -> Places {
        Places {
            bounds,
            slots: Arc::new(tokio::sync::Semaphore::new(bounds.connections)),
            per_address: PerAddress::default(),
        }
    }
}

/// Accepts and serves connections on `listener` (hyper's HTTP/1, as `axum::serve` would, plus
/// the header read timeout, the cap on connections and a share of it per remote address, from
/// `places`) until `stop` ends; then stops accepting, lets the requests in flight be answered,
/// and returns, within `drain_within` even if a client never finishes its request.
pub(crate) async fn serve_connections(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    places: Places,
    stop: impl std::future::Future<Output = ()>,
    drain_within: Duration,
) {
    let Bounds {
        server,
        connections,
        header_read_timeout,
    } = places.bounds;
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    // A flood is refused at the rate it comes: said in the log once a second at most.
    let mut refusals = Throttle::default();
    let mut stop = std::pin::pin!(stop);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors, say: wait a moment rather than spin.
                    tracing::warn!("{server}: cannot accept a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let Some(place) = places.per_address.take(peer.ip()) else {
            if refusals.should_say() {
                tracing::warn!(
                    "{server}: {} holds {PER_REMOTE_ADDRESS} connections: new ones from it are closed",
                    peer.ip()
                );
            }
            continue;
        };
        let Ok(slot) = places.slots.clone().try_acquire_owned() else {
            if refusals.should_say() {
                tracing::warn!("{server}: {connections} connections open: new ones are closed");
            }
            continue;
        };
        let service = hyper_util::service::TowerToHyperService::new(router.clone());
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(header_read_timeout)
            .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("connection ended: {e}");
            }
            drop(slot);
            drop(place);
        });
    }
    drop(listener);
    if tokio::time::timeout(drain_within, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            "{server}: stopping with connections still open after {} s: their clients never finished",
            drain_within.as_secs()
        );
    }
}

/// Says yes at most once a second.
#[derive(Default)]
struct Throttle {
    last: Option<Instant>,
}

impl Throttle {
    fn should_say(&mut self) -> bool {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|last| now.duration_since(last) < Duration::from_secs(1))
        {
            return false;
        }
        self.last = Some(now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remote_address_holds_its_share_and_no_more() {
        let limits = PerAddress::default();
        let flooder: IpAddr = "203.0.113.7".parse().unwrap();
        let places: Vec<Place> = (0..PER_REMOTE_ADDRESS)
            .map(|_| limits.take(flooder).unwrap())
            .collect();
        assert!(limits.take(flooder).is_none(), "past its share");
        let agent: IpAddr = "198.51.100.2".parse().unwrap();
        assert!(
            limits.take(agent).is_some(),
            "another address still gets in"
        );
        // The same address written as IPv4-mapped IPv6 is the same client.
        let mapped: IpAddr = "::ffff:203.0.113.7".parse().unwrap();
        assert!(limits.take(mapped).is_none());
        drop(places);
        assert!(
            limits.take(flooder).is_some(),
            "places come back when closed"
        );
        assert!(
            limits.open.lock().unwrap().len() <= 1,
            "closed addresses are forgotten"
        );
    }

    #[test]
    fn an_ipv6_client_is_its_64() {
        let limits = PerAddress::default();
        let places: Vec<Place> = (0..PER_REMOTE_ADDRESS)
            .map(|n| {
                let peer: IpAddr = format!("2001:db8:1:2::{:x}", n + 1).parse().unwrap();
                limits.take(peer).unwrap()
            })
            .collect();
        let same_64: IpAddr = "2001:db8:1:2:ffff::1".parse().unwrap();
        assert!(limits.take(same_64).is_none(), "one /64, one share");
        let next_64: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert!(limits.take(next_64).is_some());
        drop(places);
    }

    #[test]
    fn loopback_shares_only_the_overall_limit() {
        let limits = PerAddress::default();
        for peer in ["127.0.0.1", "::1", "::ffff:127.0.0.1"] {
            let peer: IpAddr = peer.parse().unwrap();
            let places: Vec<Place> = (0..PER_REMOTE_ADDRESS + 1)
                .map(|_| limits.take(peer).unwrap())
                .collect();
            assert_eq!(places.len(), PER_REMOTE_ADDRESS + 1);
        }
        assert!(limits.open.lock().unwrap().is_empty());
    }
}
