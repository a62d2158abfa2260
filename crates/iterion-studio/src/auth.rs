//! Who may read the studio: the token rule and the host check.
//!
//! - A studio bound to a non-loopback address must have a token
//!   (`ITERION_STUDIO_TOKEN`): every route then needs it, pages, the API,
//!   live streams and downloads alike, as `Authorization: Bearer TOKEN` or
//!   as the session cookie that `/login?token=TOKEN` sets. A token given
//!   on loopback is enforced the same way.
//! - Without a token (loopback only), a request must name the studio's own
//!   loopback address in `Host`: a web page the operator visits cannot
//!   rebind a DNS name of its own to 127.0.0.1 and read the runs.
//!
//! Comparisons are constant-time (`subtle`) over SHA-256 digests, so
//! neither the content nor the length of the token leaks through timing;
//! the cookie carries a digest of the token under its own label, never the
//! token itself. Nothing here logs or echoes a presented value.

use std::fmt;
use std::net::SocketAddr;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::StudioError;

/// The session cookie's name.
pub const COOKIE: &str = "iterion_studio";

/// Shortest token accepted: a guessable token on a listening socket is
/// no protection.
pub const TOKEN_MIN_LEN: usize = 16;

/// The configured token. Its `Debug` shows nothing of it.
#[derive(Clone)]
pub struct StudioToken {
    bearer: [u8; 32],
    session: String,
}

impl fmt::Debug for StudioToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("StudioToken(<redacted>)")
    }
}

fn digest(label: &str, value: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(label.as_bytes());
    h.update([0]);
    h.update(value.as_bytes());
    h.finalize().into()
}

impl StudioToken {
    /// A token of at least [`TOKEN_MIN_LEN`] characters, none of them
    /// whitespace or control (it travels in a header and a URL).
    pub fn new(raw: &str) -> Result<Self, StudioError> {
        if raw.chars().count() < TOKEN_MIN_LEN {
            return Err(StudioError::WeakToken {
                reason: "shorter than 16 characters",
            });
        }
        if raw.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(StudioError::WeakToken {
                reason: "contains whitespace or control characters",
            });
        }
        Ok(Self {
            bearer: digest("iterion-studio-bearer", raw),
            session: hex::encode(digest("iterion-studio-session", raw)),
        })
    }

    /// Whether `presented` is the token.
    pub fn matches(&self, presented: &str) -> bool {
        digest("iterion-studio-bearer", presented)
            .ct_eq(&self.bearer)
            .into()
    }

    /// The value of the session cookie.
    pub fn session(&self) -> &str {
        &self.session
    }

    /// Whether `presented` is the session cookie's value.
    pub fn session_matches(&self, presented: &str) -> bool {
        presented.as_bytes().ct_eq(self.session.as_bytes()).into()
    }
}

/// Whether a request carries the token: a bearer header or the cookie.
pub fn authorised(token: &StudioToken, headers: &http::HeaderMap) -> bool {
    let bearer = headers
        .get_all(http::header::AUTHORIZATION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.strip_prefix("Bearer "))
        .any(|t| token.matches(t.trim()));
    bearer
        || headers
            .get_all(http::header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|kv| kv.trim().split_once('='))
            .any(|(k, v)| k == COOKIE && token.session_matches(v))
}

/// The `Host` values a loopback studio answers to.
#[derive(Debug, Clone)]
pub struct LocalHosts(Vec<String>);

impl LocalHosts {
    /// The names of `addr`: `localhost`, the IPv4 and IPv6 loopback
    /// literals, with the port.
    pub fn of(addr: SocketAddr) -> Self {
        let port = addr.port();
        let mut names = vec![
            format!("localhost:{port}"),
            format!("127.0.0.1:{port}"),
            format!("[::1]:{port}"),
            addr.to_string(),
        ];
        names.dedup();
        Self(names)
    }

    /// Whether `host` (a `Host` header value) is one of them.
    pub fn allows(&self, host: &str) -> bool {
        self.0.iter().any(|n| n.eq_ignore_ascii_case(host))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_match_only_themselves() {
        let t = StudioToken::new("correct-horse-battery").expect("token");
        assert!(t.matches("correct-horse-battery"));
        assert!(!t.matches("correct-horse-batterz"));
        assert!(!t.matches(""));
        assert!(t.session_matches(t.session()));
        assert!(!t.session_matches("correct-horse-battery"));
        assert!(!format!("{t:?}").contains("horse"));
        assert!(StudioToken::new("short").is_err());
        assert!(StudioToken::new("has a space in it, long").is_err());
    }

    #[test]
    fn bearer_and_cookie_are_both_read() {
        let t = StudioToken::new("correct-horse-battery").expect("token");
        let mut h = http::HeaderMap::new();
        assert!(!authorised(&t, &h));
        h.insert(
            http::header::AUTHORIZATION,
            http::HeaderValue::from_static("Bearer correct-horse-battery"),
        );
        assert!(authorised(&t, &h));
        let mut h = http::HeaderMap::new();
        let cookie = format!("a=b; {COOKIE}={}", t.session());
        h.insert(
            http::header::COOKIE,
            http::HeaderValue::from_str(&cookie).expect("value"),
        );
        assert!(authorised(&t, &h));
        let mut h = http::HeaderMap::new();
        h.insert(
            http::header::COOKIE,
            http::HeaderValue::from_static("iterion_studio=correct-horse-battery"),
        );
        assert!(!authorised(&t, &h), "the raw token is not a session");
    }

    #[test]
    fn only_loopback_names_are_hosts() {
        let hosts = LocalHosts::of("127.0.0.1:4891".parse().expect("addr"));
        assert!(hosts.allows("127.0.0.1:4891"));
        assert!(hosts.allows("LOCALHOST:4891"));
        assert!(!hosts.allows("evil.test:4891"));
        assert!(!hosts.allows("127.0.0.1:80"));
    }
}
