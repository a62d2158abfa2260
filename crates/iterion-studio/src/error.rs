//! Why the studio refuses to start, each with a stable code, and the
//! variable those refusals name. A leaf: the token check and the settings
//! return it.

use std::net::SocketAddr;

/// The variable holding the studio's token.
pub const TOKEN_ENV: &str = "ITERION_STUDIO_TOKEN";

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
