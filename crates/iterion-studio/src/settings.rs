//! Where the studio listens and who may read it: the token rule (a
//! non-loopback address needs a token) applied once, when the settings are
//! made.

use std::net::SocketAddr;

use crate::auth::StudioToken;
use crate::error::StudioError;

/// The port `iterion studio` listens on by default (upstream's studio
/// port, so an operator's bookmarks keep working).
pub const DEFAULT_PORT: u16 = 4891;

/// Where the studio listens and who may read it.
#[derive(Debug, Clone)]
pub struct StudioSettings {
    /// Listen address.
    pub addr: SocketAddr,
    /// The token every request must carry, when set.
    pub token: Option<StudioToken>,
}

impl StudioSettings {
    /// Settings for `addr` with the token `raw` (empty counts as unset):
    /// a non-loopback address without one is refused, and so is a weak
    /// token.
    pub fn new(addr: SocketAddr, raw: Option<&str>) -> Result<Self, StudioError> {
        let token = match raw.filter(|t| !t.is_empty()) {
            Some(t) => Some(StudioToken::new(t)?),
            None => None,
        };
        if token.is_none() && !addr.ip().is_loopback() {
            return Err(StudioError::TokenRequired { addr });
        }
        Ok(Self { addr, token })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_rule() {
        let lan: SocketAddr = "0.0.0.0:4891".parse().expect("addr");
        let lo: SocketAddr = "127.0.0.1:4891".parse().expect("addr");
        let err = StudioSettings::new(lan, None).expect_err("no token");
        assert_eq!(err.code(), "STUDIO_TOKEN_REQUIRED");
        assert!(err.is_user_input());
        assert!(StudioSettings::new(lan, Some("")).is_err());
        assert_eq!(
            StudioSettings::new(lan, Some("short"))
                .expect_err("weak")
                .code(),
            "STUDIO_TOKEN_WEAK"
        );
        assert!(StudioSettings::new(lan, Some("a-long-enough-token")).is_ok());
        let local = StudioSettings::new(lo, None).expect("loopback");
        assert!(local.token.is_none());
        let v6: SocketAddr = "[::1]:4891".parse().expect("addr");
        assert!(StudioSettings::new(v6, None).is_ok());
    }
}
