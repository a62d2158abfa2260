//! The crate's one error enum.

use std::net::SocketAddr;

use iterion_core::net::NetRuleError;

/// Errors of policy compilation and proxy start-up.
#[derive(Debug, thiserror::Error)]
pub enum NetproxyError {
    /// A shipped preset holds a rule the grammar refuses: a bug in this
    /// crate (its test parses every preset), refused rather than skipped.
    #[error("network preset `{preset}` holds a bad rule")]
    PresetRule {
        /// The preset.
        preset: &'static str,
        /// The parse failure.
        #[source]
        source: NetRuleError,
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
            Self::PresetRule { .. } => "NETWORK_PRESET_INVALID",
            Self::Bind { .. } => "EGRESS_PROXY_BIND",
        }
    }
}
