//! The gate with passkey approvals (SPEC §6 "Approvals an agent cannot make"): which kinds count
//! under `approvals.require`, the counter the store must move on, and where a blocked refusal
//! sends the human (`approval_url`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use cajaguard_core::approval::{BasketDigest, Decision, TrustedKeys};
use cajaguard_core::effect::{
    ApprovalCandidate, CheckoutLedger, Effect, LedgerView, Outcome, PasskeyCandidate,
    PasskeyCounter,
};
use cajaguard_core::gate::{self, Facts};
use cajaguard_core::passkey::soft_authenticator::{FLAG_UP, SoftAuthenticator};
use cajaguard_core::passkey::{
    PasskeyApproval, PasskeyApprovalTerms, RegisteredPasskey, RelyingParty, verify_registration,
};
use cajaguard_core::policy::Policy;
use cajaguard_core::quote::Quote;
use cajaguard_core::verdict::{Reason, Verdict};
use common::*;
use serde_json::json;

const REG_CHALLENGE: [u8; 32] = [0x33; 32];
const URL: &str = "http://localhost:8377/requests/";

fn policy_with(require: Option<&str>, web: bool) -> Policy {
    let mut c = config_json();
    if web {
        c["approvals"]["web"] = json!({ "listen": "127.0.0.1:8377" });
    }
    if let Some(r) = require {
        c["approvals"]["require"] = json!(r);
    }
    policy_from(&c)
}

fn registered(auth: &SoftAuthenticator) -> RegisteredPasskey {
    let rp = RelyingParty::localhost(8377);
    verify_registration(
        &rp,
        &REG_CHALLENGE,
        &auth.register(&REG_CHALLENGE),
        "laptop",
    )
    .unwrap()
}

struct World {
    quote: Quote,
    request: cajaguard_core::request::CompleteRequest,
    digest: BasketDigest,
}

/// A Day pack (USD 89.00, over the USD 50.00 threshold) ready to complete.
fn day_pack(policy: &Policy) -> World {
    let request = gate::precheck(policy, &complete_args()).unwrap();
    let quote = Quote::from_shop(&usd(PACK, 1)).unwrap();
    let digest = BasketDigest::of(&quote, &request.instruments);
    World {
        quote,
        request,
        digest,
    }
}

fn passkey_doc(auth: &mut SoftAuthenticator, w: &World, decision: Decision) -> PasskeyApproval {
    let terms = PasskeyApprovalTerms::new(
        &terms_for(&w.quote, &w.request.instruments, decision, NOW, minutes(10)),
        None,
    );
    let assertion = auth.assert(&terms.challenge());
    PasskeyApproval { terms, assertion }
}

fn decide(
    policy: &Policy,
    w: &World,
    keys: &[ApprovalCandidate],
    passkeys: &[PasskeyCandidate],
) -> Outcome {
    let ledger = LedgerView {
        agent_window_spent: 0,
        window_spent: 0,
        checkout: CheckoutLedger::Fresh,
        frozen: None,
    };
    gate::decide(
        policy,
        &Facts {
            agent: None,
            request: &w.request,
            quote: &w.quote,
            digest: &w.digest,
            ledger: &ledger,
            approvals: keys,
            passkey_approvals: passkeys,
            trusted_keys: &TrustedKeys(vec![trusted_key().public_key()]),
            now: NOW,
        },
    )
}

fn key_file(w: &World) -> ApprovalCandidate {
    let terms = terms_for(
        &w.quote,
        &w.request.instruments,
        Decision::Approve,
        NOW,
        minutes(10),
    );
    ApprovalCandidate {
        document: sign(&trusted_key(), &terms),
        used: false,
    }
}

fn candidate(doc: PasskeyApproval, passkey: &RegisteredPasskey) -> PasskeyCandidate {
    PasskeyCandidate {
        document: doc,
        passkey: Some(passkey.clone()),
        used: false,
    }
}

fn reason(o: &Outcome) -> Reason {
    o.ruling.reason()
}

#[test]
fn a_passkey_approval_pays_once_and_moves_the_counter_on() {
    for require in ["passkey", "any"] {
        let policy = policy_with(Some(require), true);
        let w = day_pack(&policy);
        let mut auth = SoftAuthenticator::es256();
        let passkey = registered(&auth);
        auth.counter = Some(5);
        let doc = passkey_doc(&mut auth, &w, Decision::Approve);
        let nonce = doc.terms.nonce.clone();
        let o = decide(&policy, &w, &[], &[candidate(doc, &passkey)]);
        assert_eq!(o.ruling.verdict(), Verdict::AllowApproved, "{require}");
        assert!(
            o.ruling.detail().contains("passkey"),
            "{}",
            o.ruling.detail()
        );
        let Effect::Forward {
            use_approval_nonce,
            advance_passkey,
            ..
        } = o.effect
        else {
            panic!("not forwarded: {:?}", o.effect)
        };
        assert_eq!(use_approval_nonce, Some(nonce));
        assert_eq!(
            advance_passkey,
            Some(PasskeyCounter {
                credential_id: passkey.credential_id.clone(),
                from: 0,
                to: 5
            })
        );
    }
}

#[test]
fn require_decides_which_kind_counts() {
    let mut auth = SoftAuthenticator::eddsa();
    let passkey = registered(&auth);

    // "passkey": a key-file approval on the agent's disk approves nothing.
    let policy = policy_with(Some("passkey"), true);
    let w = day_pack(&policy);
    let o = decide(&policy, &w, &[key_file(&w)], &[]);
    assert_eq!(reason(&o), Reason::PendingApproval);
    assert!(
        o.ruling
            .detail()
            .contains("approvals.require (\"passkey\")"),
        "{}",
        o.ruling.detail()
    );
    let url = format!("{URL}{}", w.digest.request_id());
    assert_eq!(o.ruling.approval_url(), Some(url.as_str()));
    assert_eq!(
        o.ruling.to_json()["cajaguard"]["approval_url"],
        url.as_str()
    );
    assert!(
        o.ruling.next().unwrap().contains(&url)
            && !o.ruling.next().unwrap().contains("cajaguard approve"),
        "{:?}",
        o.ruling.next()
    );

    // "key" (the default): a passkey approval does not count, and the terminal is offered first.
    let policy = policy_with(None, true);
    let w = day_pack(&policy);
    let doc = passkey_doc(&mut auth, &w, Decision::Approve);
    let o = decide(&policy, &w, &[], &[candidate(doc, &passkey)]);
    assert_eq!(reason(&o), Reason::PendingApproval);
    assert!(o.ruling.next().unwrap().starts_with("cajaguard approve"));
    assert!(o.ruling.detail().contains(&url), "{}", o.ruling.detail());
    assert!(matches!(
        decide(&policy, &w, &[key_file(&w)], &[]).effect,
        Effect::Forward {
            advance_passkey: None,
            ..
        }
    ));

    // "any": both count.
    let policy = policy_with(Some("any"), true);
    let w = day_pack(&policy);
    assert_eq!(
        decide(&policy, &w, &[key_file(&w)], &[]).ruling.verdict(),
        Verdict::AllowApproved
    );
}

#[test]
fn without_the_page_there_is_no_approval_url_and_no_passkey_counts() {
    let policy = policy_with(Some("any"), false);
    let w = day_pack(&policy);
    let mut auth = SoftAuthenticator::es256();
    let passkey = registered(&auth);
    let doc = passkey_doc(&mut auth, &w, Decision::Approve);
    let o = decide(&policy, &w, &[], &[candidate(doc, &passkey)]);
    assert_eq!(reason(&o), Reason::PendingApproval);
    assert_eq!(o.ruling.approval_url(), None);
    assert!(
        o.ruling.to_json()["cajaguard"]
            .get("approval_url")
            .is_none()
    );
}

#[test]
fn a_passkey_approval_is_refused_for_each_broken_rule() {
    let policy = policy_with(Some("passkey"), true);
    let w = day_pack(&policy);

    let mut auth = SoftAuthenticator::es256();
    let passkey = registered(&auth);
    auth.flags = FLAG_UP; // user verification off
    let doc = passkey_doc(&mut auth, &w, Decision::Approve);
    let o = decide(&policy, &w, &[], &[candidate(doc, &passkey)]);
    assert_eq!(
        reason(&o),
        Reason::ApprovalBadSignature,
        "{}",
        o.ruling.detail()
    );

    let mut auth = SoftAuthenticator::es256();
    let doc = passkey_doc(&mut auth, &w, Decision::Approve);
    let unregistered = PasskeyCandidate {
        document: doc.clone(),
        passkey: None,
        used: false,
    };
    assert_eq!(
        reason(&decide(&policy, &w, &[], &[unregistered])),
        Reason::ApprovalUntrustedKey
    );
    let used = PasskeyCandidate {
        used: true,
        ..candidate(doc.clone(), &passkey)
    };
    assert_eq!(
        reason(&decide(&policy, &w, &[], &[used])),
        Reason::ApprovalAlreadyUsed
    );
    // The counter stored is already past the assertion's: replayed or cloned.
    let mut ahead = passkey.clone();
    ahead.sign_count = 9;
    assert_eq!(
        reason(&decide(&policy, &w, &[], &[candidate(doc, &ahead)])),
        Reason::ApprovalBadSignature
    );
}

#[test]
fn a_passkey_deny_refuses() {
    let policy = policy_with(Some("passkey"), true);
    let w = day_pack(&policy);
    let mut auth = SoftAuthenticator::es256();
    let passkey = registered(&auth);
    let doc = passkey_doc(&mut auth, &w, Decision::Deny);
    let o = decide(&policy, &w, &[], &[candidate(doc, &passkey)]);
    assert_eq!(reason(&o), Reason::ApprovalDenied);
    assert!(matches!(o.effect, Effect::Refuse { pending: None }));
}

/// `audit verify` takes a passkey approval's checkpoint as evidence only when its assertion is a
/// registered passkey's over exactly its terms, whatever the counter has done since.
#[test]
fn a_passkey_approval_counts_as_evidence_only_when_its_assertion_verifies() {
    let policy = policy_with(Some("passkey"), true);
    let rp = RelyingParty::localhost(8377);
    let mut auth = SoftAuthenticator::es256();
    let passkey = registered(&auth);
    let w = day_pack(&policy);
    let terms = PasskeyApprovalTerms::new(
        &terms_for(
            &w.quote,
            &w.request.instruments,
            Decision::Approve,
            NOW,
            minutes(10),
        ),
        Some("cajaguard/0011223344556677\n3\nAAAA\n\n".to_owned()),
    );
    let assertion = auth.assert(&terms.challenge());
    let doc = PasskeyApproval { terms, assertion };
    // Its counter is behind the passkey's by now: still evidence.
    let moved_on = RegisteredPasskey {
        sign_count: 1_000,
        ..passkey.clone()
    };
    assert!(cajaguard_core::passkey::signed_by_registered(
        &doc,
        &[moved_on],
        &rp
    ));
    // A checkpoint planted in the terms, an unregistered passkey, another origin: none.
    let mut planted = doc.clone();
    planted.terms.checkpoint = Some("cajaguard/0011223344556677\n9\nAAAA\n\n".to_owned());
    assert!(!cajaguard_core::passkey::signed_by_registered(
        &planted,
        std::slice::from_ref(&passkey),
        &rp
    ));
    let other = registered(&SoftAuthenticator::eddsa());
    assert!(!cajaguard_core::passkey::signed_by_registered(
        &doc,
        &[other],
        &rp
    ));
    let elsewhere = RelyingParty::localhost(9999);
    assert!(!cajaguard_core::passkey::signed_by_registered(
        &doc,
        &[passkey],
        &elsewhere
    ));
}
