//! What the tripwire reads instead of the raw string (SPEC §5): every form a shop or a human might
//! read the same digits or key out of.
//!
//! - **Percent-escapes.** `%XX` is decoded, repeatedly (a value may be escaped twice on its way into
//!   a URL), at most three times, and every layer is scanned, the raw string included.
//! - **NFKC**, so full-width and mathematical digits and no-break or ideographic spaces fold to
//!   ASCII.
//! - **Characters that render as nothing** are removed: Unicode format characters (zero-width space
//!   and joiner, soft hyphen, bidi marks, tags), variation selectors and fillers, and combining
//!   marks that follow a digit (`4\u{0301}1` reads as `41`).
//!
//! Whitespace runs are left in place: the card scanner reads any run of them as one separator.

use std::borrow::Cow;

use unicode_normalization::UnicodeNormalization;

/// How many times `%XX` is decoded at most. Three layers is more than any real URL carries; the
/// bound keeps a hostile `%252525...` from costing more than a few passes.
const MAX_DECODE_LAYERS: usize = 3;

/// Every form of `s` the rules must see: the raw string, then each percent-decoded layer, each
/// normalised. The first is always the raw string's.
pub fn forms(s: &str) -> Vec<String> {
    // Each layer is decoded from the previous one normalised, so that escapes split by invisible
    // characters (`%3\u{200B}4`) or written full-width (`％34`) decode as a reader would see them.
    let mut out = vec![normalise(s).into_owned()];
    for _ in 0..MAX_DECODE_LAYERS {
        let Some(last) = out.last() else { break };
        match percent_decode(last) {
            Some(decoded) => out.push(normalise(&decoded).into_owned()),
            None => break,
        }
    }
    out
}

/// NFKC, then every character that renders as nothing removed (and NFKC again if that brought
/// a letter and its mark together). Borrowed when nothing changes; normalising twice changes
/// nothing more.
pub fn normalise(s: &str) -> Cow<'_, str> {
    let once = fold_and_strip(s);
    match once {
        Cow::Borrowed(_) => once,
        Cow::Owned(text) => match fold_and_strip(&text) {
            Cow::Borrowed(_) => Cow::Owned(text),
            Cow::Owned(again) => Cow::Owned(again),
        },
    }
}

fn fold_and_strip(s: &str) -> Cow<'_, str> {
    if s.is_ascii() {
        return Cow::Borrowed(s);
    }
    let folded: Cow<'_, str> = if unicode_normalization::is_nfkc_quick(s.chars())
        == unicode_normalization::IsNormalized::Yes
    {
        Cow::Borrowed(s)
    } else {
        Cow::Owned(s.nfkc().collect())
    };
    if !folded.chars().any(|c| renders_as_nothing(c) || is_mark(c)) {
        return folded;
    }
    let mut out = String::with_capacity(folded.len());
    // Whether the last character kept was a digit: marks after it are dropped, so `4\u{20E3}` is `4`.
    let mut after_digit = false;
    for c in folded.chars() {
        if renders_as_nothing(c) {
            continue;
        }
        if is_mark(c) {
            if after_digit {
                continue;
            }
        } else {
            after_digit = super::cards::digit_value(c).is_some();
        }
        out.push(c);
    }
    Cow::Owned(out)
}

/// `%XX` escapes decoded (bytes that are not UTF-8 become U+FFFD, a non-digit). `None` when `s`
/// holds no valid escape.
pub fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    if !b.contains(&b'%') {
        return None;
    }
    let mut out = Vec::with_capacity(b.len());
    let mut changed = false;
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let (Some(h), Some(l)) = (hex_value(b[i + 1]), hex_value(b[i + 2]))
        {
            out.push(h * 16 + l);
            changed = true;
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    changed.then(|| String::from_utf8_lossy(&out).into_owned())
}

fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

fn is_mark(c: char) -> bool {
    !c.is_ascii() && unicode_normalization::char::is_combining_mark(c)
}

use crate::display::renders_as_nothing;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invisible_characters_and_marks_after_digits_go() {
        assert_eq!(
            normalise("41\u{200B}11\u{00AD}1\u{2060}1\u{200E}"),
            "411111"
        );
        assert_eq!(normalise("4\u{0301}\u{0302}1"), "41");
        // A mark on a letter is part of the letter and stays.
        assert_eq!(normalise("e\u{0301}"), "\u{00E9}");
        assert_eq!(normalise("４１"), "41");
        // Once the invisible character between them goes, the letter and its mark compose.
        assert_eq!(normalise("e\u{200B}\u{0301}"), "\u{00E9}");
    }

    #[test]
    fn percent_layers_are_all_kept() {
        assert_eq!(percent_decode("a%20b%zz%4"), Some("a b%zz%4".into()));
        assert_eq!(percent_decode("100%"), None);
        assert_eq!(
            forms("%2534%31"),
            vec!["%2534%31".to_owned(), "%341".to_owned(), "41".to_owned()]
        );
        assert_eq!(
            forms("%3\u{200B}4\u{FF05}31").last().map(String::as_str),
            Some("41")
        );
    }
}
