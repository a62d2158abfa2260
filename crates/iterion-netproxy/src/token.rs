//! The per-run proxy token: 32 random bytes, hex (facts §7.3). Its Debug and
//! Display never show the secret; only [`ProxyToken::expose`] does, for the
//! one place that must write it (the container's proxy env).

use std::fmt;

use rand::RngCore;
use subtle::ConstantTimeEq;

/// A per-run proxy credential.
#[derive(Clone, PartialEq, Eq)]
pub struct ProxyToken(String);

impl ProxyToken {
    /// A fresh token from the thread CSPRNG (ChaCha, OS-seeded).
    pub fn generate() -> Self {
        let mut bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        Self(hex::encode(bytes))
    }

    /// The secret text. Never log it, never put it in argv or events.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Constant-time comparison with a presented credential.
    pub fn matches(&self, presented: &[u8]) -> bool {
        self.0.as_bytes().ct_eq(presented).into()
    }

    /// The proxy URL a container is given (`HTTP(S)_PROXY`), facts §7.2:
    /// `http://t:<token>@<advertise>:<port>`. Contains the secret.
    pub fn endpoint_url(&self, advertise_host: &str, port: u16) -> String {
        format!("http://t:{}@{advertise_host}:{port}", self.0)
    }
}

impl fmt::Debug for ProxyToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ProxyToken(<redacted>)")
    }
}

impl fmt::Display for ProxyToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_hex_and_redacted() {
        let a = ProxyToken::generate();
        let b = ProxyToken::generate();
        assert_ne!(a, b);
        assert_eq!(a.expose().len(), 64);
        assert!(a.expose().bytes().all(|c| c.is_ascii_hexdigit()));
        assert!(!format!("{a:?}{a}").contains(a.expose()));
        assert!(a.matches(a.expose().as_bytes()));
        assert!(!a.matches(b.expose().as_bytes()));
        assert!(!a.matches(b""));
    }
}
