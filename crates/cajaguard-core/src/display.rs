//! Text that came from an agent or a shop, made safe to show a person. One table of the
//! characters that draw nothing or change how the text around them reads ([`is_invisible`]), and
//! one function per place the text goes:
//!
//! | form | where | invisible characters | bound |
//! | --- | --- | --- | --- |
//! | [`terminal`] | the CLI, the approval page | removed, and ANSI escape sequences with them | none |
//! | [`detail`] | a ruling's detail, a freeze reason | removed | 64 characters, then `…` |
//! | [`audit`] | audit records | written as `\u{..}` | 256 characters, then `…` |
//! | [`name`] | tool and method names | anything but printable ASCII written as `\u{..}` | 64, then `…` |
//!
//! Removing is right where a person reads the text to decide (a zero-width space or a bidi
//! override could disguise what is being approved); escaping is right where the text is evidence
//! (the audit log must show that `cg-1\u{200b}` is not `cg-1`). Names are ASCII in MCP, so a
//! homoglyph (`сomplete_checkout` with a Cyrillic `с`) shows as what it is.
//!
//! Whether agent text may be echoed at all (it could hold a secret) is a different question:
//! [`is_plain_identifier`].

use std::fmt::Write as _;

/// Unicode format characters (general category Cf, Unicode 16), plus the variation selectors, the
/// combining grapheme joiner and the Hangul fillers: all draw nothing, so a human reading the text
/// (or a shop stripping them) sees the characters on either side as adjacent. The tripwire drops
/// them before it looks for card numbers, for the same reason.
pub fn renders_as_nothing(c: char) -> bool {
    matches!(u32::from(c),
        0xAD | 0x34F | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x890..=0x891 | 0x8E2
        | 0x115F..=0x1160 | 0x17B4..=0x17B5 | 0x180B..=0x180F | 0x200B..=0x200F
        | 0x202A..=0x202E | 0x2060..=0x206F | 0x3164 | 0xFE00..=0xFE0F | 0xFEFF | 0xFFA0
        | 0xFFF9..=0xFFFB | 0x110BD | 0x110CD | 0x13430..=0x1343F | 0x1BCA0..=0x1BCA3
        | 0x1D173..=0x1D17A | 0xE0001 | 0xE0020..=0xE007F | 0xE0100..=0xE01EF)
}

/// Control characters, the line and paragraph separators, and everything that
/// [`renders_as_nothing`]: the one table every form below uses.
pub fn is_invisible(c: char) -> bool {
    c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') || renders_as_nothing(c)
}

/// For a terminal or a web page a person reads to decide: ANSI escape sequences (`ESC [ … final`,
/// or `ESC` and one character) and invisible characters removed; nothing else changed.
pub fn terminal(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for c in chars.by_ref() {
                    if ('\u{40}'..='\u{7e}').contains(&c) {
                        break;
                    }
                }
            } else {
                chars.next();
            }
        } else if !is_invisible(c) {
            out.push(c);
        }
    }
    out
}

/// For a ruling's detail or a freeze reason: invisible characters removed, at most 64 characters.
pub fn detail(text: &str) -> String {
    bounded(text.chars().filter(|c| !is_invisible(*c)), 64, |out, c| {
        out.push(c)
    })
}

/// For an audit record: invisible characters written as `\u{..}`, at most 256 characters.
pub fn audit(text: &str) -> String {
    bounded(text.chars(), 256, |out, c| {
        if is_invisible(c) {
            escape(out, c);
        } else {
            out.push(c);
        }
    })
}

/// For a name the agent chose (a tool, a method): printable ASCII as is, everything else as
/// `\u{..}`, at most 64 characters.
pub fn name(text: &str) -> String {
    bounded(text.chars(), 64, |out, c| {
        if c.is_ascii_graphic() || c == ' ' {
            out.push(c);
        } else {
            escape(out, c);
        }
    })
}

/// A short code (a currency) quoted for an error message: at most 8 characters, invisible ones
/// removed.
pub fn quoted_code(code: &str) -> String {
    let shown = bounded(code.chars().filter(|c| !is_invisible(*c)), 8, |out, c| {
        out.push(c)
    });
    format!("\"{shown}\"")
}

/// Whether agent text may be echoed at all: 1 to `max_len` bytes of ASCII letters, `_` and `-`
/// (and digits when `digits`). Anything else could carry a secret (digits in several keys join
/// into a card number across the `.` of a path), so the caller shows a placeholder instead.
pub fn is_plain_identifier(text: &str, max_len: usize, digits: bool) -> bool {
    !text.is_empty()
        && text.len() <= max_len
        && text.bytes().all(|b| {
            b.is_ascii_alphabetic() || b == b'_' || b == b'-' || (digits && b.is_ascii_digit())
        })
}

fn escape(out: &mut String, c: char) {
    let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
}

/// The first `max` characters of `chars`, each written by `push`, and `…` if there were more.
fn bounded(
    chars: impl Iterator<Item = char>,
    max: usize,
    mut push: impl FnMut(&mut String, char),
) -> String {
    let mut out = String::new();
    for (i, c) in chars.enumerate() {
        if i == max {
            out.push('…');
            break;
        }
        push(&mut out, c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn terminal_strips_escapes_controls_bidi_and_zero_width() {
        assert_eq!(terminal("Day\u{1b}[2J\u{1b}[31mpack\r\n\u{7}"), "Daypack");
        assert_eq!(terminal("a\u{202e}b\u{2066}c"), "abc");
        assert_eq!(terminal("Day\u{200b}pack\u{feff}\u{2028}"), "Daypack");
        assert_eq!(terminal("Tea set 茶"), "Tea set 茶");
    }

    #[test]
    fn audit_escapes_what_it_would_hide_and_keeps_other_unicode() {
        assert_eq!(audit("cg-1\u{200b}"), "cg-1\\u{200b}");
        assert_eq!(audit("\u{1b}[2J"), "\\u{1b}[2J");
        assert_eq!(audit("Café"), "Café");
        assert_eq!(audit(&"x".repeat(300)).chars().count(), 257);
    }

    #[test]
    fn names_show_homoglyphs_and_controls_as_escapes() {
        assert_eq!(name("complete_checkout"), "complete_checkout");
        assert_eq!(name("\u{441}omplete"), "\\u{441}omplete");
        assert_eq!(name("a\nb"), "a\\u{a}b");
    }

    #[test]
    fn details_and_codes_are_bounded() {
        assert_eq!(detail(&"m".repeat(80)), format!("{}…", "m".repeat(64)));
        assert_eq!(detail("shop\u{200b}.example"), "shop.example");
        assert_eq!(quoted_code("USD"), "\"USD\"");
        assert_eq!(quoted_code("ABCDEFGHIJ"), "\"ABCDEFGH…\"");
    }

    #[test]
    fn plain_identifiers() {
        assert!(is_plain_identifier("payment_data", 40, true));
        assert!(!is_plain_identifier("card4111", 64, false));
        assert!(!is_plain_identifier("", 40, true));
        assert!(!is_plain_identifier("naïve", 40, true));
    }

    proptest! {
        #[test]
        fn no_form_lets_an_invisible_character_through(text in any::<String>()) {
            for shown in [terminal(&text), detail(&text), quoted_code(&text)] {
                prop_assert!(!shown.chars().any(is_invisible), "{shown:?}");
            }
            for shown in [audit(&text), name(&text)] {
                prop_assert!(!shown.chars().any(is_invisible), "{shown:?}");
            }
            prop_assert!(name(&text).chars().all(|c| c.is_ascii_graphic() || c == ' ' || c == '…'));
        }
    }
}
