//! The PII detector of `privacy_filter`: upstream's v1 rule set
//! (`pkg/backend/tool/privacy/detector`) over the `regex` crate — email,
//! phone (E.164, French national), URL, account numbers (IBAN with its
//! mod-97 check, card numbers of the major networks with Luhn, French
//! BBAN) and secrets (well-known token shapes, plus entropy-gated
//! password/bearer assignments and a high-entropy fallback).
//!
//! `regex` guarantees linear-time matching (no backtracking), so a
//! hostile input cannot stall a node. Spans are byte ranges of the
//! source; overlapping spans are merged keeping the highest score (the
//! longer span on a tie, then the earlier rule). It owns detection only:
//! placeholders and the vault are [`super`]'s.

use std::sync::LazyLock;

use regex::Regex;

/// The categories, in the order `has_<category>` flags are reported.
pub const CATEGORIES: &[&str] = &["account_number", "email", "phone", "url", "secret"];

/// One detected occurrence.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    /// Category (one of [`CATEGORIES`]).
    pub category: &'static str,
    /// Confidence, 0–1 (constant per rule).
    pub score: f64,
    /// Byte offset of the first byte.
    pub start: usize,
    /// Byte offset past the last byte.
    pub end: usize,
    /// Rule name.
    pub rule: &'static str,
}

type PostFilter = fn(&str) -> bool;

struct Rule {
    name: &'static str,
    category: &'static str,
    score: f64,
    re: Regex,
    /// Capture group holding the value (0: the whole match).
    group: usize,
    post: Option<PostFilter>,
}

impl Rule {
    fn find(&self, text: &str, out: &mut Vec<Span>) {
        for caps in self.re.captures_iter(text) {
            let Some(m) = caps.get(self.group) else {
                continue;
            };
            if self.post.is_some_and(|f| !f(m.as_str())) {
                continue;
            }
            out.push(Span {
                category: self.category,
                score: self.score,
                start: m.start(),
                end: m.end(),
                rule: self.name,
            });
        }
    }
}

fn rule(
    name: &'static str,
    category: &'static str,
    score: f64,
    pattern: &str,
    group: usize,
    post: Option<PostFilter>,
) -> Option<Rule> {
    match Regex::new(pattern) {
        Ok(re) => Some(Rule {
            name,
            category,
            score,
            re,
            group,
            post,
        }),
        // The patterns are constants checked by the tests; a rule that
        // does not compile is left out rather than panicking a node.
        Err(e) => {
            tracing::error!(rule = name, error = %e, "privacy rule does not compile");
            None
        }
    }
}

static RULES: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    [
        // email
        rule(
            "rfc5322_simple",
            "email",
            1.0,
            r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]+\.[A-Za-z]{2,}",
            0,
            Some(|m| !m.starts_with('-')),
        ),
        // phone
        rule("e164", "phone", 1.0, r"\+[1-9][0-9]{6,14}\b", 0, None),
        rule(
            "phone_french",
            "phone",
            0.9,
            r"\b0[1-9](?:[\s.\-]?[0-9]{2}){4}\b",
            0,
            None,
        ),
        // url
        rule("url_basic", "url", 1.0, r#"\bhttps?://[^\s<>"']+"#, 0, None),
        // account numbers
        rule(
            "iban",
            "account_number",
            1.0,
            r"\b[A-Z]{2}[0-9]{2}[A-Z0-9]{4}[0-9]{7}[A-Z0-9]{0,16}\b",
            0,
            Some(iban_mod97),
        ),
        rule(
            "credit_card",
            "account_number",
            1.0,
            // First digits of Visa, Mastercard, Amex, Discover: a random
            // 16-digit block (a UUID group) rarely starts so.
            r"\b(?:4[0-9]{3}|5[1-5][0-9]{2}|3[47][0-9]{2}|6(?:011|5[0-9]{2}))[\s\-]?[0-9]{4}[\s\-]?[0-9]{4}[\s\-]?[0-9]{4}\b",
            0,
            Some(luhn),
        ),
        rule(
            "bban_french",
            "account_number",
            0.7,
            r"\b[0-9]{23}\b",
            0,
            None,
        ),
        // secrets: well-known token shapes
        rule(
            "aws_access_key",
            "secret",
            1.0,
            r"\bAKIA[0-9A-Z]{16}\b",
            0,
            None,
        ),
        rule(
            "aws_secret_key",
            "secret",
            0.95,
            r#"(?i)aws(?:.{0,20})?(?:secret|access)?[_\-]?key[_\-]?(?:id)?["'\s:=]+([A-Za-z0-9/+=]{40})\b"#,
            1,
            Some(|m| entropy(m) >= 4.5),
        ),
        rule(
            "github_pat",
            "secret",
            1.0,
            r"\bghp_[A-Za-z0-9]{36}\b",
            0,
            None,
        ),
        rule(
            "github_oauth",
            "secret",
            1.0,
            r"\bgho_[A-Za-z0-9]{36}\b",
            0,
            None,
        ),
        rule(
            "github_app_token",
            "secret",
            1.0,
            r"\b(?:ghu|ghs)_[A-Za-z0-9]{36}\b",
            0,
            None,
        ),
        rule(
            "github_refresh",
            "secret",
            1.0,
            r"\bghr_[A-Za-z0-9]{76}\b",
            0,
            None,
        ),
        rule(
            "slack_bot_token",
            "secret",
            1.0,
            r"\bxoxb-[0-9]{10,}-[0-9]{10,}-[A-Za-z0-9]{20,}\b",
            0,
            None,
        ),
        rule(
            "slack_user_token",
            "secret",
            1.0,
            r"\bxoxp-[A-Za-z0-9\-]{30,}\b",
            0,
            None,
        ),
        rule(
            "slack_webhook",
            "secret",
            1.0,
            r"https://hooks\.slack\.com/services/T[A-Z0-9]+/B[A-Z0-9]+/[A-Za-z0-9]+",
            0,
            None,
        ),
        rule(
            "stripe_live_key",
            "secret",
            1.0,
            r"\bsk_live_[0-9a-zA-Z]{24,}\b",
            0,
            None,
        ),
        rule(
            "stripe_test_key",
            "secret",
            0.9,
            r"\bsk_test_[0-9a-zA-Z]{24,}\b",
            0,
            None,
        ),
        rule(
            "google_api_key",
            "secret",
            1.0,
            r"\bAIza[0-9A-Za-z_\-]{35}\b",
            0,
            None,
        ),
        rule(
            "gcp_service_account",
            "secret",
            0.95,
            r#""type"\s*:\s*"service_account""#,
            0,
            None,
        ),
        rule(
            "pem_private_key",
            "secret",
            1.0,
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----",
            0,
            None,
        ),
        rule(
            "ssh_private_key",
            "secret",
            1.0,
            r"-----BEGIN OPENSSH PRIVATE KEY-----",
            0,
            None,
        ),
        rule(
            "jwt",
            "secret",
            0.95,
            r"\beyJ[A-Za-z0-9_\-]+\.eyJ[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]+\b",
            0,
            None,
        ),
        rule(
            "npm_token",
            "secret",
            1.0,
            r"\bnpm_[A-Za-z0-9]{36}\b",
            0,
            None,
        ),
        rule(
            "pypi_token",
            "secret",
            1.0,
            r"\bpypi-AgEIcHlwaS5vcmc[A-Za-z0-9_\-]+",
            0,
            None,
        ),
        // secrets: shapes that also fit benign text, gated by entropy
        rule(
            "bearer_token_high_entropy",
            "secret",
            0.85,
            r"(?i)bearer\s+([A-Za-z0-9_\-\.]{32,})",
            1,
            Some(|m| entropy(m) >= 4.0),
        ),
        rule(
            "password_assignment_high_entropy",
            "secret",
            0.7,
            r#"(?i)(?:password|secret|api[_\-]?key|access[_\-]?token)\s*[:=]\s*["']?([A-Za-z0-9_\-\.]{8,})["']?"#,
            1,
            Some(|m| entropy(m) >= 3.5 && !looks_like_identifier(m)),
        ),
        rule(
            "generic_high_entropy_string",
            "secret",
            0.6,
            r"\b[A-Za-z0-9+/=_\-]{32,}\b",
            0,
            Some(|m| {
                // Hex digests of the usual lengths are commit hashes and
                // checksums, not secrets.
                entropy(m) >= 4.5
                    && !(m.bytes().all(|b| b.is_ascii_hexdigit()) && matches!(m.len(), 32 | 40 | 64))
            }),
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
});

/// What one scan looks for.
#[derive(Debug, Clone, Default)]
pub struct ScanOptions {
    /// Only these categories (empty: all).
    pub categories: Vec<String>,
    /// Drop spans scoring below this.
    pub min_score: f64,
}

/// The merged, non-overlapping spans of `text`, by ascending start.
pub fn scan(text: &str, opts: &ScanOptions) -> Vec<Span> {
    if is_blank(text) {
        return Vec::new();
    }
    let mut spans = Vec::new();
    for r in RULES.iter() {
        if !opts.categories.is_empty() && !opts.categories.iter().any(|c| c == r.category) {
            continue;
        }
        let before = spans.len();
        r.find(text, &mut spans);
        let mut i = before;
        while i < spans.len() {
            if spans[i].score < opts.min_score {
                spans.swap_remove(i);
            } else {
                i += 1;
            }
        }
    }
    merge(spans)
}

/// Whether `s` holds nothing but whitespace.
pub fn is_blank(s: &str) -> bool {
    s.chars().all(char::is_whitespace)
}

/// Overlaps keep the best span: by start, then score (higher first),
/// then length (longer first); the sort is stable, so on a full tie the
/// earlier rule wins.
fn merge(mut spans: Vec<Span>) -> Vec<Span> {
    spans.sort_by(|a, b| {
        a.start
            .cmp(&b.start)
            .then(b.score.total_cmp(&a.score))
            .then(b.end.cmp(&a.end))
    });
    let mut out: Vec<Span> = Vec::with_capacity(spans.len());
    for s in spans {
        match out.last_mut() {
            Some(last) if s.start < last.end => {
                if s.score > last.score {
                    *last = s;
                }
            }
            _ => out.push(s),
        }
    }
    out
}

/// Shannon entropy in bits per character.
pub fn entropy(s: &str) -> f64 {
    let mut counts = std::collections::HashMap::new();
    let mut total = 0u32;
    for c in s.chars() {
        *counts.entry(c).or_insert(0u32) += 1;
        total += 1;
    }
    if total == 0 {
        return 0.0;
    }
    let n = f64::from(total);
    counts
        .values()
        .map(|&c| {
            let p = f64::from(c) / n;
            -p * p.log2()
        })
        .sum()
}

/// A configuration-style identifier (letters only, no digit nor any of
/// `_-./+=`): passes an entropy bar without being a secret.
fn looks_like_identifier(s: &str) -> bool {
    !s.chars()
        .any(|c| c.is_ascii_digit() || "_-./+=".contains(c))
}

/// The Luhn check over the digits of `s` (12 at least; a run of one
/// repeated digit passes Luhn trivially and is refused).
pub fn luhn(s: &str) -> bool {
    let digits: Vec<u32> = s.chars().filter_map(|c| c.to_digit(10)).collect();
    if digits.len() < 12 || digits.iter().all(|d| *d == digits[0]) {
        return false;
    }
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &d)| {
            if i % 2 == 1 {
                let x = d * 2;
                if x > 9 { x - 9 } else { x }
            } else {
                d
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

/// The IBAN mod-97 check (ISO 13616): the first four characters moved to
/// the end, letters as 10–35, the number mod 97 must be 1.
pub fn iban_mod97(s: &str) -> bool {
    let cleaned: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    if !(15..=34).contains(&cleaned.len()) || !cleaned.is_ascii() {
        return false;
    }
    let (head, tail) = cleaned.split_at(4);
    let mut rem: u32 = 0;
    for c in tail.chars().chain(head.chars()) {
        let v = match c {
            '0'..='9' => c as u32 - '0' as u32,
            'A'..='Z' => c as u32 - 'A' as u32 + 10,
            'a'..='z' => c as u32 - 'a' as u32 + 10,
            _ => return false,
        };
        rem = if v >= 10 {
            (rem * 100 + v) % 97
        } else {
            (rem * 10 + v) % 97
        };
    }
    rem == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(text: &str) -> Vec<Span> {
        scan(text, &ScanOptions::default())
    }

    fn rules_of(text: &str) -> Vec<&'static str> {
        all(text).into_iter().map(|s| s.rule).collect()
    }

    #[test]
    fn every_rule_compiles() {
        assert_eq!(RULES.len(), 28);
    }

    #[test]
    fn luhn_and_mod97() {
        for (n, ok) in [
            ("4532015112830366", true),
            ("4532015112830367", false),
            ("4111111111111111", true),
            ("0000000000000000", false),
            ("2222222222222222", false),
            ("1234567890123456", false),
        ] {
            assert_eq!(luhn(n), ok, "{n}");
        }
        for (n, ok) in [
            ("FR1420041010050500013M02606", true),
            ("FR1420041010050500013M02607", false),
            ("DE89370400440532013000", true),
            ("GB29NWBK60161331926819", true),
            ("AB12", false),
        ] {
            assert_eq!(iban_mod97(n), ok, "{n}");
        }
    }

    #[test]
    fn identifiers_and_entropy() {
        assert!(looks_like_identifier("NormalLookingName"));
        assert!(!looks_like_identifier("HasDigit1"));
        assert!(!looks_like_identifier("snake_case"));
        assert!(entropy("password") < 3.0);
        assert!(entropy("Xj9nQ8vL5pK2mZ7tR4wH6sB1aD3fG0iC") > 4.5);
    }

    #[test]
    fn categories_are_found() {
        let cases = [
            ("write to bob.martin@example.org today", "email"),
            ("call +33612345678 now", "phone"),
            ("ou le 06 12 34 56 78 ce soir", "phone"),
            ("see https://example.com/a?b=c for more", "url"),
            ("IBAN FR1420041010050500013M02606 please", "account_number"),
            ("card 4532 0151 1283 0366 expires", "account_number"),
            ("key AKIAIOSFODNN7EXAMPLE here", "secret"),
        ];
        for (text, cat) in cases {
            let spans = all(text);
            assert!(spans.iter().any(|s| s.category == cat), "{text}: {spans:?}");
        }
    }

    #[test]
    fn checks_refuse_lookalikes() {
        assert!(!rules_of("IBAN FR1420041010050500013M02607").contains(&"iban"));
        assert!(!rules_of("card 4532015112830367").contains(&"credit_card"));
        assert!(all("uuid 12345678-1234-1234-1234-123456789abc").is_empty());
    }

    #[test]
    fn positive_corpus_is_detected() {
        let corpus = [
            "AKIAZXCVBNMASDFGHJKL",
            "ghp_0a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R",
            "gho_0a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R",
            "ghs_0a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R",
            "xoxb-9876543210-9876543210-QwErTyUiOpAsDfGhJkLz",
            "xoxp-9876543210-9876543210-9876543210-QwErTyUiOp",
            "https://hooks.slack.com/services/T0ZZZZZZZZ/B0YYYYYYYY/qwertyuiopASDF",
            "sk_live_Zx9Cv8Bn7Mm6Ll5Kk4Jj3Hh2Gg1",
            "AIzaQwErTyUiOpAsDfGhJkLzXcVbNm1234567",
            r#"{"type": "service_account", "project_id": "demo"}"#,
            "-----BEGIN RSA PRIVATE KEY-----",
            "-----BEGIN OPENSSH PRIVATE KEY-----",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ0ZXN0In0.c2lnbmF0dXJlLXNpZ25hdHVyZQ",
            "npm_Qw3Er4Ty5Ui6Op7As8Df9Gh0Jk1Lz2Xc3Vb4",
            "Authorization: Bearer Qm9Xr7Lp2Vn8Kt4Hs6Jd1Fa3Gb5Yc0Ze9Wu",
            r#"password = "Zq8Xw7Ev6Rc5Tb4Yn3Um2Il1Ok0Pj9Hg""#,
            r#"api_key: "m4N8b2V6c0X4z8L2k6J0h4G8f2D6s0A4""#,
            "5555555555554444",
            "DE89370400440532013000",
        ];
        for line in corpus {
            assert!(!all(line).is_empty(), "not detected: {line}");
        }
    }

    #[test]
    fn negative_corpus_is_left_alone() {
        let corpus = [
            r#"password = "changeme""#,
            r#"secret = "secret""#,
            r#"api_key = "abc123""#,
            "Authorization: Bearer placeholder",
            "00000000-0000-0000-0000-000000000000",
            "ffffffffffffffffffffffffffffffff",
            "4111111111111112",
            "GB29NWBK60161331926820",
            "the quick brown fox jumps over the lazy dog",
            "ServiceName_Test_Build",
            "ThisIsNotASecretAtAll",
            "sha1: aaf4c61ddcc5e8a2dabede0f3b482cd9aea9434d",
            "sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        ];
        for line in corpus {
            let spans = all(line);
            assert!(spans.is_empty(), "false positive on {line}: {spans:?}");
        }
    }

    #[test]
    fn overlaps_keep_the_best_span() {
        let s = |rule, score, start, end| Span {
            category: "secret",
            score,
            start,
            end,
            rule,
        };
        let out = merge(vec![
            s("a", 0.6, 0, 40),
            s("b", 0.9, 5, 35),
            s("c", 0.7, 50, 60),
        ]);
        assert_eq!(out.iter().map(|s| s.rule).collect::<Vec<_>>(), ["b", "c"]);
    }

    #[test]
    fn filters_blank_and_hostile_input() {
        assert!(all("").is_empty());
        assert!(all(" \t\n ").is_empty());
        let only_email = scan(
            "mail a@b.io or https://x.io",
            &ScanOptions {
                categories: vec!["email".into()],
                min_score: 0.0,
            },
        );
        assert_eq!(only_email.len(), 1);
        // Linear time by construction: this returns, whatever its size.
        let hostile = "aaaaa(bbbbb)*".repeat(2000);
        let _ = all(&hostile);
        let emoji = "😀 salut alice@example.com !";
        let sp = &all(emoji)[0];
        assert_eq!(&emoji[sp.start..sp.end], "alice@example.com");
    }
}
