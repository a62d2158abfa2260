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
    /// The run's inspection CA, a leaf, or the upstream trust could not be
    /// set up (issue 17).
    #[error("egress TLS inspection: {reason}")]
    Tls {
        /// What failed.
        reason: String,
    },
    /// `ITERION_EGRESS_UPSTREAM_CA` names no readable PEM bundle.
    #[error("ITERION_EGRESS_UPSTREAM_CA={path}: {reason}")]
    UpstreamCa {
        /// The path as given.
        path: String,
        /// Why it is unusable.
        reason: String,
    },
}

impl NetproxyError {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::PresetRule { .. } => "NETWORK_PRESET_INVALID",
            Self::Bind { .. } => "EGRESS_PROXY_BIND",
            Self::Tls { .. } => "EGRESS_TLS_SETUP",
            Self::UpstreamCa { .. } => "EGRESS_UPSTREAM_CA_INVALID",
        }
    }
}
