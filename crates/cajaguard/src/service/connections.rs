//! How many connections one remote address may hold at once.
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

/// The most connections one remote (not loopback) address holds at once.
pub(super) const PER_REMOTE_ADDRESS: usize = 128;

/// How many connections each remote address holds now.
type OpenByAddress = Arc<Mutex<HashMap<IpAddr, usize>>>;

/// The connections open per remote address.
#[derive(Clone, Default)]
pub(super) struct PerAddress {
    open: OpenByAddress,
}

/// One connection's place, given back when it is dropped.
pub(super) struct Place {
    open: Option<(OpenByAddress, IpAddr)>,
}

impl PerAddress {
    /// A place for a connection from `peer`, or `None` when that address holds its share.
    pub(super) fn take(&self, peer: IpAddr) -> Option<Place> {
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
