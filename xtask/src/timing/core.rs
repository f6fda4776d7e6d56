//! The pure decision, timed in process: `decide` (allow, blocked, with approval verification),
//! the request digest, the key-file and passkey approval verifies, and the tripwire, on the core
//! bench's ~2 KB inputs.

use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use cajaguard_core::approval::{self, ApprovalDocument, BasketDigest, SigningKey, TrustedKeys};
use cajaguard_core::effect::{ApprovalCandidate, CheckoutLedger, LedgerView, Outcome};
use cajaguard_core::gate::{self, Facts};
use cajaguard_core::passkey::soft_authenticator::SoftAuthenticator;
use cajaguard_core::passkey::{
    self, PasskeyApproval, PasskeyApprovalTerms, PasskeyRegistry, RegisteredPasskey, RelyingParty,
};
use cajaguard_core::policy::Policy;
use cajaguard_core::quote::Quote;
use cajaguard_core::request::CompleteRequest;
use cajaguard_core::tripwire;
use cajaguard_core::verdict::{Reason, Verdict};
use cajaguard_harness::fixtures;
use serde_json::{Value, json};
use time::OffsetDateTime;

use super::{Sizes, Target, Timing, floor_row, floors};
use crate::stats::Summary;

/// The core bench's inputs: a policy, ~2 KB arguments, ~2 KB checkouts, an approval.
pub(super) struct CoreInputs {
    pub(super) policy: Policy,
    pub(super) args: Value,
    pub(super) request: CompleteRequest,
    pub(super) small: Quote,
    pub(super) big: Quote,
    pub(super) trusted: TrustedKeys,
    pub(super) approval: ApprovalDocument,
    pub(super) digest: BasketDigest,
    pub(super) now: OffsetDateTime,
}

pub(super) fn core_inputs() -> CoreInputs {
    let policy = fixtures::policy("150.00");
    let now = OffsetDateTime::now_utc();
    let args = fixtures::complete_args_2kb();
    let request = fixtures::request_of(&args);
    let small = fixtures::quote_of(&fixtures::checkout_2kb(8, 300)); // USD 24.00
    let big = fixtures::quote_of(&fixtures::checkout_2kb(8, 1100)); // USD 88.00
    let key = SigningKey::from_seed(&[7u8; 32]);
    let trusted = TrustedKeys(vec![key.public_key()]);
    let digest = BasketDigest::of(&big, &request.instruments);
    let approval = approval::sign(
        &key,
        &approval::ApprovalTerms {
            ttl: Duration::from_secs(600),
            note: "report".into(),
            checkpoint: None,
            ..fixtures::approval_terms(
                digest,
                &big.checkout_id,
                big.total,
                now - time::Duration::minutes(1),
            )
        },
    );
    CoreInputs {
        policy,
        args,
        request,
        small,
        big,
        trusted,
        approval,
        digest,
        now,
    }
}

pub(super) fn core_rows(t: &mut Timing, sizes: Sizes) -> Result<()> {
    let c = core_inputs();
    let ledger = LedgerView {
        agent_window_spent: 0,
        window_spent: 2400,
        checkout: CheckoutLedger::Fresh,
        frozen: None,
    };
    // The request digest is computed once per call, before `decide` (see `proxy/complete.rs`):
    // it is timed on its own row, not inside these.
    let small_digest = BasketDigest::of(&c.small, &c.request.instruments);
    let big_digest = BasketDigest::of(&c.big, &c.request.instruments);
    let decide = |quote: &Quote, approvals: &[ApprovalCandidate]| -> Outcome {
        let digest = if std::ptr::eq(quote, &c.small) {
            &small_digest
        } else {
            &big_digest
        };
        let facts = Facts {
            agent: None,
            request: &c.request,
            quote,
            digest,
            ledger: &ledger,
            approvals,
            passkey_approvals: &[],
            trusted_keys: &c.trusted,
            now: c.now,
        };
        gate::decide(&c.policy, &facts)
    };
    let expect = |outcome: Outcome, verdict: Verdict, reason: Reason| -> Result<()> {
        if outcome.ruling.verdict() != verdict || outcome.ruling.reason() != reason {
            bail!(
                "decide gave {}/{}, expected {}/{}",
                outcome.ruling.verdict().as_str(),
                outcome.ruling.reason().as_str(),
                verdict.as_str(),
                reason.as_str()
            );
        }
        Ok(())
    };

    t.timed(
        "decide_allow",
        "decide(): allow (USD 24.00, 8 line items, ~2 KB checkout)",
        "pipe",
        sizes.cpu,
        || expect(decide(&c.small, &[]), Verdict::Allow, Reason::WithinCaps),
    )?;

    t.timed("request_digest", "BasketDigest::of(): the request digest of SPEC §6 (8 line items, ~2 KB checkout), once per payment", "pipe", sizes.cpu, || {
        let digest = BasketDigest::of(std::hint::black_box(&c.small), &c.request.instruments);
        std::hint::black_box(digest);
        Ok(())
    })?;

    t.timed(
        "decide_blocked",
        "decide(): blocked, pending approval (USD 88.00)",
        "pipe",
        sizes.cpu,
        || {
            expect(
                decide(&c.big, &[]),
                Verdict::Blocked,
                Reason::PendingApproval,
            )
        },
    )?;

    // A real approval whose expires_at was edited: the signature check runs in full and fails.
    let mut tampered = c.approval.clone();
    tampered.expires_at = "2099-01-01T00:00:00Z".into();
    let rejected = [ApprovalCandidate {
        document: tampered,
        used: false,
    }];
    let row = t.timed(
        "decide_approval_rejected",
        "decide(): approval rejected (edited expires_at, full signature check)",
        "ed25519",
        sizes.crypto,
        || {
            expect(
                decide(&c.big, &rejected),
                Verdict::Blocked,
                Reason::ApprovalBadSignature,
            )
        },
    )?;
    row.p50_at_most("<= 0.08 ms p50", 80_000.0);

    let accepted = [ApprovalCandidate {
        document: c.approval.clone(),
        used: false,
    }];
    t.timed(
        "decide_allow_approved",
        "decide(): allow with a valid signed approval",
        "ed25519",
        sizes.crypto,
        || {
            expect(
                decide(&c.big, &accepted),
                Verdict::AllowApproved,
                Reason::SignedApproval,
            )
        },
    )?;

    t.timed(
        "approval_verify",
        "approval::verify(): a valid approval",
        "ed25519",
        sizes.crypto,
        || {
            approval::verify(
                std::hint::black_box(&c.approval),
                &c.trusted,
                &c.digest,
                c.now,
                Duration::from_secs(900),
            )
            .map(|_| ())
            .map_err(|r| anyhow!("the approval did not verify: {r:?}"))
        },
    )?;

    passkey_rows(t, &c, sizes)?;

    // The card number sits at the end of the ~2 KB arguments: the scan reads them all.
    let mut with_pan = c.args.clone();
    with_pan["context"]["history"] = json!(["search socks", "paid with 4111 1111 1111 1111"]);
    let row = t.timed(
        "tripwire_deny",
        "tripwire::scan(): deny, card number at the end of ~2 KB arguments",
        "pipe",
        sizes.cpu,
        || match tripwire::scan(&c.policy.test_mode, std::hint::black_box(&with_pan)) {
            Some(hit) => Ok(hit),
            None => bail!("the tripwire missed the card number"),
        },
    )?;
    row.p50_at_most("<= 0.02 ms p50", 20_000.0);

    // What every forwarded call in test mode runs: the whole params, arguments and `_meta`.
    let params = json!({"name": "complete_checkout", "arguments": c.args,
                        "_meta": {"progressToken": "9c1d2e3f-4a5b-4c6d-8e7f-0a1b2c3d4e5f"}});
    let row = t.timed(
        "tripwire_clean",
        "tripwire::scan_params(): clean ~2 KB arguments (every call in test mode)",
        "pipe",
        sizes.cpu,
        || match tripwire::scan_params(&c.policy.test_mode, std::hint::black_box(&params)) {
            None => Ok(()),
            Some(hit) => bail!("the tripwire hit clean arguments: {}", hit.rule.as_str()),
        },
    )?;
    row.p50_at_most("<= 10 µs p50", 10_000.0);
    Ok(())
}

/// An ES256 passkey approval of the big basket as the page files it, made by the software
/// authenticator, and the passkey it was registered as (on the page's relying party).
struct PasskeyInputs {
    rp: RelyingParty,
    registered: RegisteredPasskey,
    document: PasskeyApproval,
}

fn passkey_inputs(c: &CoreInputs) -> Result<PasskeyInputs> {
    let rp = RelyingParty::localhost(8377);
    let mut auth = SoftAuthenticator::es256();
    let challenge = [0x33_u8; 32];
    let registered =
        passkey::verify_registration(&rp, &challenge, &auth.register(&challenge), "report")
            .map_err(|r| anyhow!("the software authenticator did not register: {r:?}"))?;
    let terms = PasskeyApprovalTerms::new(
        &approval::ApprovalTerms {
            ttl: Duration::from_secs(600),
            note: "report".into(),
            ..fixtures::approval_terms(
                c.digest,
                &c.big.checkout_id,
                c.big.total,
                c.now - time::Duration::minutes(1),
            )
        },
        None,
    );
    let assertion = auth.assert(&terms.challenge());
    Ok(PasskeyInputs {
        rp,
        registered,
        document: PasskeyApproval { terms, assertion },
    })
}

/// The passkey approval verify beside a bare P-256 verify of a message of the same shape, both
/// measured here, the floor first.
fn passkey_rows(t: &mut Timing, c: &CoreInputs, sizes: Sizes) -> Result<()> {
    let p = passkey_inputs(c)?;
    let assertion = &p.document.assertion;
    t.floors.push(floor_row(
        "p256",
        "P-256 ECDSA verify (authenticator data || SHA-256(client data), as a passkey signs)",
        Summary::of(&floors::p256_floor(
            &assertion.authenticator_data,
            &assertion.client_data_json,
            sizes.crypto,
        )?),
    ));
    // What the gate runs for each passkey candidate (core `gate::find_approvals`): the registry
    // of the one passkey the document names, then `verify_passkey_approval`.
    let row = t.timed(
        "passkey_verify_es256",
        "passkey assertion verify (ES256): PasskeyRegistry::new + verify_passkey_approval(), as the gate checks one passkey approval",
        "p256",
        sizes.crypto,
        || {
            let registry = PasskeyRegistry::new(std::slice::from_ref(&p.registered))
                .map_err(|r| anyhow!("the registered passkey does not parse: {r:?}"))?;
            passkey::verify_passkey_approval(
                std::hint::black_box(&p.document),
                &registry,
                &p.rp,
                &c.digest,
                c.now,
                Duration::from_secs(900),
            )
            .map(|_| ())
            .map_err(|r| anyhow!("the passkey approval did not verify: {r:?}"))
        },
    )?;
    let ratio = row.ratio_to_floor;
    row.target = Some(Target {
        goal: "<= 1.5x the P-256 verify floor".into(),
        met: ratio.is_some_and(|r| r <= 1.5),
    });
    Ok(())
}
