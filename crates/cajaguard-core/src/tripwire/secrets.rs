//! Live credentials and card-credential fields by name (SPEC §5). Every test here reads text that
//! is already normalised (see `normalise.rs`).

/// ASCII case-insensitive substring test; `needle` must be lower-case.
pub fn contains_ci(hay: &[u8], needle: &[u8]) -> bool {
    let Some((&first, rest)) = needle.split_first() else {
        return true;
    };
    if hay.len() < needle.len() {
        return false;
    }
    let last_start = hay.len() - needle.len();
    hay[..=last_start]
        .iter()
        .enumerate()
        .filter(|(_, b)| b.to_ascii_lowercase() == first)
        .any(|(i, _)| hay[i + 1..i + needle.len()].eq_ignore_ascii_case(rest))
}

/// `sk_live_` or `rk_live_` anywhere, in any case.
pub fn has_live_prefix(b: &[u8]) -> bool {
    // Anchor on the `_` after `sk`/`rk`, which is rare in ordinary text.
    b.iter()
        .enumerate()
        .filter(|(_, c)| **c == b'_')
        .any(|(p, _)| {
            p >= 2
                && b.len() >= p + 6
                && (b[p - 2..p + 6].eq_ignore_ascii_case(b"sk_live_")
                    || b[p - 2..p + 6].eq_ignore_ascii_case(b"rk_live_"))
        })
}

/// A `live` segment: `sk_live_x`, `live-x`, `x_live`, `x.live.y` (segments split by anything not
/// alphanumeric).
pub fn has_live_segment(s: &str) -> bool {
    if !contains_ci(s.as_bytes(), b"live") {
        return false;
    }
    s.split(|c: char| !c.is_alphanumeric())
        .any(|seg| seg.eq_ignore_ascii_case("live"))
}

/// A field name that suggests a secret (`api_key`, `apiKey`, `client_secret`, `Authorization`,
/// `x-api-key`, ...). Short words (`key`, `auth`, `pin`) count only as a whole segment of the name
/// (split at punctuation and camelCase humps), so `keywords`, `author` and `turkey` are not secrets.
///
/// One pass, dispatching on each byte: this runs for nearly every key of every call.
pub fn secret_like_name(k: &str) -> bool {
    let b = k.as_bytes();
    (0..b.len()).any(|i| {
        let rest = &b[i..];
        let word = |w: &[u8]| starts_ci(rest, w);
        let seg = |w: &[u8]| whole_segment(b, i, w);
        match b[i].to_ascii_lowercase() {
            b't' => word(b"token"),
            b's' => {
                word(b"secret")
                    || word(b"signature")
                    || seg(b"session")
                    || seg(b"sessionid")
                    || seg(b"sid")
            }
            b'p' => {
                word(b"passw")
                    || word(b"passphrase")
                    || word(b"privatekey")
                    || seg(b"private")
                    || seg(b"pwd")
                    || seg(b"pin")
            }
            b'c' => word(b"credential") || word(b"cookie"),
            b'b' => word(b"bearer"),
            b'a' => word(b"apikey") || word(b"authoriz") || word(b"authentic") || seg(b"auth"),
            b'k' => seg(b"key") || seg(b"keys"),
            b'o' => seg(b"otp"),
            _ => false,
        }
    })
}

fn starts_ci(hay: &[u8], word: &[u8]) -> bool {
    hay.len() >= word.len() && hay[..word.len()].eq_ignore_ascii_case(word)
}

/// `word` at `b[i..]` as a whole segment: bounded by non-alphanumerics, the ends, or a camelCase hump.
fn whole_segment(b: &[u8], i: usize, word: &[u8]) -> bool {
    let j = i + word.len();
    let hump = |at: usize| b[at - 1].is_ascii_lowercase() && b[at].is_ascii_uppercase();
    starts_ci(&b[i..], word)
        && (i == 0 || !b[i - 1].is_ascii_alphanumeric() || hump(i))
        && (j == b.len() || !b[j].is_ascii_alphanumeric() || hump(j))
}

/// Field names that only a card credential carries, refused wherever they appear.
pub fn card_field_anywhere(k: &str) -> bool {
    const NAMES: &[&str] = &[
        "cvc",
        "cvv",
        "cvc2",
        "cvv2",
        "cryptogram",
        "card_number",
        "cardnumber",
        "card-number",
        "security_code",
        "securitycode",
        "pan",
    ];
    NAMES.iter().any(|n| k.eq_ignore_ascii_case(n))
}

/// Field names that make a credential object a card credential (`number` is too common a name to
/// refuse outside one).
pub fn card_field_in_credential(k: &str) -> bool {
    k.eq_ignore_ascii_case("number")
        || k.eq_ignore_ascii_case("network_token")
        || card_field_anywhere(k)
}

/// A credential `type` of a card.
pub fn card_credential_type(t: &str) -> bool {
    ["card", "pan", "network_token"]
        .iter()
        .any(|c| t.eq_ignore_ascii_case(c))
}

/// Whether a key names a credential object (`credential`, `credentials`, `paymentCredential`).
pub fn credential_name(k: &str) -> bool {
    contains_ci(k.as_bytes(), b"credential")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_names_by_whole_segment() {
        for yes in [
            "api_key",
            "apiKey",
            "APIKEY",
            "x-api-key",
            "client_secret",
            "Authorization",
            "session_key",
            "idempotency-key",
            "accessToken",
            "password",
        ] {
            assert!(secret_like_name(yes), "{yes}");
        }
        for no in ["keywords", "author", "turkey", "monkey", "title", "note"] {
            assert!(!secret_like_name(no), "{no}");
        }
    }

    #[test]
    fn live_segments_and_prefixes() {
        assert!(has_live_segment("sk_live_abc"));
        assert!(has_live_segment("x.LIVE.y"));
        assert!(!has_live_segment("olive_tree"));
        assert!(has_live_prefix(b"use RK_LIVE_abc"));
        assert!(!has_live_prefix(b"sk_test_live"));
    }
}
