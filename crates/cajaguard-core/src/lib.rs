//! CajaGuard's decision core.
//!
//! Everything here is pure: no files, no network, no clock, no randomness. Time and random bytes are
//! passed in by the caller, so every rule of the gate can be tested in microseconds.
//!
//! The path of one `complete_checkout` through this crate:
//! 1. [`gate::precheck`] — tripwire (test mode), request shape, fields an agent may send (SPEC §4.1-4.3).
//! 2. [`quote::Quote::from_shop`] — the shop's own `get_checkout` answer, read strictly (§4.4-4.5);
//!    [`digest::BasketDigest::of`] names the basket (§6).
//! 3. [`gate::decide`] — merchant, currency, status, caps, window, approval (§4.6-4.12), from the
//!    store's [`effect::LedgerView`] to an [`effect::Outcome`]: a [`verdict::Ruling`] and the
//!    [`effect::Effect`] the store applies.
//! 4. [`settle::read_completion`], [`settle::charge`] — what the shop's answer to the forwarded call
//!    means for the ledger (§4.13).
//!
//! The modules below the gate depend on nothing above them: `error`, `display`, `digest` and
//! `verdict` are leaves; `money`, `quote`, `request`, `tripwire`, `policy` and `approval` build on
//! them; `effect` and `freeze` on those; `gate` and `settle` on everything.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod agent;
pub mod approval;
pub mod audit_log;
pub mod digest;
pub mod display;
pub mod effect;
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
pub mod verdict;

pub use error::Error;
