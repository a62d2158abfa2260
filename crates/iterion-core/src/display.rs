//! Making run-supplied text safe to print on a terminal (issue 19 #12).
//!
//! A file name, node id, host name, log line or error a sandbox influenced
//! may carry line breaks (forging a row of a table), ANSI escape sequences
//! (rewriting or hiding what the terminal shows) or bidirectional and
//! invisible format characters (text that reads differently than it is).
//! Human output passes every such string through [`printable`]; machine
//! output (`--json`) stays exact, since JSON escapes them itself.
//!
//! It owns only the escaping; what counts as human output is the CLI's.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether `c` must not reach a terminal as is: C0 controls and DEL (tab
/// included: it breaks columns), C1 controls, the bidirectional overrides,
/// embeddings and isolates, and zero-width or invisible format characters.
pub fn is_unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{200B}'..='\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{2069}'
                | '\u{FEFF}'
                | '\u{FFF9}'..='\u{FFFB}'
        )
}

/// `text` with every unsafe character escaped (`\n`, `\r`, `\t`, `\x1b`,
/// `\u{202e}`); text without one comes back borrowed.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if is_unsafe_char(c) && (c as u32) < 0x100 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if is_unsafe_char(c) => {
                let _ = write!(out, "\\u{{{:04x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_ansi_and_bidi_are_escaped_plain_text_borrowed() {
        assert!(matches!(printable("report.txt"), Cow::Borrowed(_)));
        assert!(matches!(printable("名前/データ.csv"), Cow::Borrowed(_)));
        assert_eq!(printable("a\nb\tc\rd"), "a\\nb\\tc\\rd");
        assert_eq!(printable("\u{1b}[31mred\u{1b}[0m"), "\\x1b[31mred\\x1b[0m");
        assert_eq!(printable("x\u{7f}\u{9b}y"), "x\\x7f\\x9by");
        assert_eq!(printable("evil\u{202e}txt.exe"), "evil\\u{202e}txt.exe");
        assert_eq!(printable("zero\u{200b}width"), "zero\\u{200b}width");
    }

    proptest::proptest! {
        /// Whatever the input, nothing unsafe survives and no line break
        /// is printed.
        #[test]
        fn nothing_unsafe_survives(s in "\\PC*|[\\x00-\\x1f\\x7f-\\u{9f}\\u{200b}-\\u{202e}a-z]*") {
            let out = printable(&s);
            proptest::prop_assert!(!out.chars().any(is_unsafe_char), "{out:?}");
        }
    }
}
