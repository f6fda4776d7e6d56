//! The tripwire on arbitrary JSON and text: no panic, and a hit's path never repeats a card number
//! or a live key.
#![no_main]

use cajaguard_core::policy::TestModePolicy;
use cajaguard_core::tripwire::{contains_card_number, scan, scan_params};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = contains_card_number(text);
    let Ok(value) = serde_json::from_str::<serde_json::Value>(text) else {
        return;
    };
    let policy = TestModePolicy::spec_default();
    // The proxy's scan of a whole message's params, and the arguments-only scan precheck runs.
    for hit in [scan_params(&policy, &value), scan(&policy, &value)].into_iter().flatten() {
        assert!(
            !contains_card_number(&hit.path),
            "path repeats a card number"
        );
        let lower = hit.path.to_ascii_lowercase();
        assert!(
            !lower.contains("sk_live_") && !lower.contains("rk_live_"),
            "path repeats a live key"
        );
    }
});
