//! `iterion studio`: a read-only web page and JSON API over a run store.
//!
//! What a run decided is all recorded; the studio lets an operator look
//! at it: the runs (live), and per run its sandbox decision, its workflow
//! graph coloured by node state, its event timeline (live over
//! server-sent events while the run goes), node logs, the egress requests
//! that were blocked and the files it kept, downloadable. The page uses the
//! JSON API under `/api/`, whose documents have exactly the shapes of the
//! CLI's `--json` output (`iterion_core::view`, `EventRecord`).
//!
//! It owns the HTTP surface (axum over hyper 1, assets embedded, no build
//! step, no CDN), the rendering, the token rule and the graph layout. It
//! decides nothing about runs: the store comes in as an
//! `Arc<dyn RunStore>` (the CLI opens it as every store verb does), the
//! decision card reads what the run recorded, and the only workflow it
//! compiles is the run's own source, to draw it ([`source`]).
//!
//! Security, because every value it shows was written by a workflow that
//! may be hostile: run data reaches markup only escaped ([`escape`]) and
//! the script only sets `textContent`; every response carries a strict
//! Content-Security-Policy (`default-src 'none'`, scripts and styles from
//! `'self'` only, no inline script, `frame-ancestors 'none'`), `nosniff`
//! and `no-referrer`; only `GET`/`HEAD` are served (anything else is 405),
//! request heads and URIs are bounded and bodies refused; downloads are
//! attachments with a safe name, served only after their bytes match the
//! record; and the token rule of [`auth`] guards every route.

mod api;
pub mod auth;
pub mod decision;
mod download;
pub mod escape;
pub mod graph;
mod live;
mod pages;
mod rows;
mod server;
pub mod source;
mod state;
pub mod timeline;

use std::net::SocketAddr;

pub use auth::StudioToken;
pub use server::Studio;

/// The port `iterion studio` listens on by default (upstream's studio
/// port, so an operator's bookmarks keep working).
pub const DEFAULT_PORT: u16 = 4891;

/// The variable holding the studio's token.
pub const TOKEN_ENV: &str = "ITERION_STUDIO_TOKEN";

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

/// Errors of the studio, each with a stable [`StudioError::code`].
#[derive(Debug, thiserror::Error)]
pub enum StudioError {
    /// A non-loopback address without a token.
    #[error(
        "{addr} is not a loopback address: set {TOKEN_ENV} (at least 16 characters) to serve the studio there"
    )]
    TokenRequired {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// A token too weak to guard a socket.
    #[error("{TOKEN_ENV} is unusable: {reason}")]
    WeakToken {
        /// Why.
        reason: &'static str,
    },
    /// The address cannot be listened on.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

impl StudioError {
    /// Stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::TokenRequired { .. } => "STUDIO_TOKEN_REQUIRED",
            Self::WeakToken { .. } => "STUDIO_TOKEN_WEAK",
            Self::Bind { .. } => "STUDIO_BIND_FAILED",
        }
    }

    /// Whether the operator's input is at fault (exit 2).
    pub fn is_user_input(&self) -> bool {
        matches!(self, Self::TokenRequired { .. } | Self::WeakToken { .. })
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
