//! CajaGuard's decision core.
//!
//! Everything here is pure: no files, no network, no clock, no randomness. Time and random bytes are
//! passed in by the caller, so every rule of the gate can be tested in microseconds.
//!
//! The path of one `complete_checkout` through this crate:
//! 1. [`gate::precheck`] — tripwire (test mode), request shape, fields an agent may send (SPEC §4.1-4.3).
//! 2. [`quote::Quote::from_shop`] — the shop's own `get_checkout` answer, read strictly (§4.4-4.5).
//! 3. [`gate::decide`] — merchant, currency, status, caps, window, approval (§4.6-4.12).
//! 4. [`settle::classify`] — what the shop's answer to the forwarded call means for the ledger (§4.13).

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod approval;
pub mod error;
pub mod freeze;
pub mod gate;
pub mod money;
pub mod passkey;
pub mod policy;
pub mod quote;
pub mod request;
pub mod settle;
pub mod tripwire;

pub use error::Error;
