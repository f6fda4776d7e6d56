//! The display module (what a person sees of agent and shop text) on arbitrary text: no panic,
//! and each form keeps its promise. `terminal` and `detail` hold no invisible character and no
//! escape byte; `audit` holds none either (they are written as `\u{..}`) and keeps every visible
//! character in order; `name` is printable ASCII only; the bounded forms stay within their bounds.
#![no_main]

use cajaguard_core::display::{audit, detail, is_invisible, name, quoted_code, terminal};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for shown in [terminal(text), detail(text), quoted_code(text)] {
        assert!(!shown.chars().any(is_invisible), "{shown:?}");
    }
    let audited = audit(text);
    assert!(!audited.chars().any(is_invisible), "{audited:?}");
    if text.chars().count() <= 256 {
        let visible: String = text.chars().filter(|c| !is_invisible(*c)).collect();
        let kept: String = audited.chars().filter(|c| !is_invisible(*c)).collect();
        let mut rest = kept.as_str();
        for c in visible.chars() {
            let Some(at) = rest.find(c) else {
                panic!("{c:?} of {text:?} is missing from {audited:?}");
            };
            rest = &rest[at + c.len_utf8()..];
        }
    }
    let named = name(text);
    assert!(named.chars().all(|c| c.is_ascii_graphic() || c == ' ' || c == '…'), "{named:?}");
    assert!(detail(text).chars().count() <= 65);
    assert!(named.chars().filter(|c| *c == '…').count() <= 1);
});
