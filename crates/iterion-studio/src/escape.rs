//! Turning run-supplied text into markup that can only ever be text.
//!
//! Every string a run wrote (node ids and outputs, file names, log lines,
//! host names, error messages) may be hostile: it reaches HTML and SVG
//! only through [`text`] and [`attr`], which escape the five markup
//! characters and neutralise what XML cannot carry (C0 controls make a
//! standalone SVG ill-formed) and what misleads a reader (bidi overrides,
//! zero-width characters), through `iterion_core::display::printable`,
//! the same rule the terminal views use. The front-end script never
//! parses markup: it only sets `textContent` (see `assets/studio.js`).
//! URLs built from run data go through [`path_segment`].

use std::fmt::Write as _;

use iterion_core::display::printable;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// `raw` as HTML/XML character data.
pub fn text(raw: &str) -> String {
    let shown = printable(raw);
    let mut out = String::with_capacity(shown.len() + 8);
    for c in shown.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `raw` as the value of a double-quoted attribute (same rule as [`text`]:
/// quotes are escaped too).
pub fn attr(raw: &str) -> String {
    text(raw)
}

/// Characters left as they are in a URL path segment (RFC 3986
/// unreserved); everything else is percent-encoded, `/` included.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `raw` as one URL path segment.
pub fn path_segment(raw: &str) -> String {
    utf8_percent_encode(raw, SEGMENT).to_string()
}

/// A run-relative file path as URL path segments (each encoded, joined by
/// `/`), for download links.
pub fn path_segments(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for (i, part) in raw.split('/').enumerate() {
        if i > 0 {
            out.push('/');
        }
        let _ = write!(out, "{}", utf8_percent_encode(part, SEGMENT));
    }
    out
}

/// At most `max` characters of `raw`, with `…` when cut.
pub fn clip(raw: &str, max: usize) -> String {
    let mut chars = raw.chars();
    let head: String = chars.by_ref().take(max).collect();
    if chars.next().is_some() {
        format!("{head}…")
    } else {
        head
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_becomes_text() {
        let hostile = r#"<img src=x onerror="alert(1)"></script>&'"#;
        let out = text(hostile);
        assert_eq!(
            out,
            "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;&lt;/script&gt;&amp;&#39;"
        );
        assert!(!out.contains('<') && !out.contains('>') && !out.contains('"'));
    }

    #[test]
    fn controls_and_bidi_never_reach_the_markup() {
        let out = text("a\u{0}b\u{1b}[31m\u{202e}c\r\n");
        assert!(!out.chars().any(char::is_control), "{out:?}");
        assert!(!out.contains('\u{202e}'));
        assert!(out.contains("\\x1b"), "{out}");
    }

    #[test]
    fn url_parts_are_encoded() {
        assert_eq!(path_segment("a/b c?#"), "a%2Fb%20c%3F%23");
        assert_eq!(path_segments("out/<x>.txt"), "out/%3Cx%3E.txt");
        assert_eq!(path_segments("é"), "%C3%A9");
    }

    #[test]
    fn clip_counts_characters() {
        assert_eq!(clip("héllo", 3), "hél…");
        assert_eq!(clip("hé", 3), "hé");
    }
}
