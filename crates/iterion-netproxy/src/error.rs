//! The crate's one error enum.

use std::net::SocketAddr;

use crate::policy::RuleError;

/// Errors of policy compilation and proxy start-up.
#[derive(Debug, thiserror::Error)]
pub enum NetproxyError {
    /// One or more rules of the `network:` block are malformed.
    #[error("invalid network rules: {}", errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    InvalidRules {
        /// Every malformed rule, with its index.
        errors: Vec<RuleError>,
    },
    /// The block names a preset that does not exist. Upstream resolves an
    /// unknown preset to nothing; we refuse it so a typo cannot silently
    /// drop the allow rules the author meant (deny wins, loudly).
    #[error("unknown network preset `{name}` (known: iterion-default)")]
    UnknownPreset {
        /// The name as written.
        name: String,
    },
    /// The proxy listener could not bind.
    #[error("egress proxy cannot bind {addr}")]
    Bind {
        /// The requested address.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl NetproxyError {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidRules { .. } => "NETWORK_RULE_INVALID",
            Self::UnknownPreset { .. } => "NETWORK_PRESET_UNKNOWN",
            Self::Bind { .. } => "EGRESS_PROXY_BIND",
        }
    }
}
