//! The one error enum of the policy crate. Guard refusals keep their own
//! contract type ([`crate::guards::GuardViolation`]) and ride here as a
//! source.

use crate::guards::GuardViolation;

/// Everything a policy function can refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// An environment variable holds a value outside its vocabulary.
    #[error("{name}={value:?} is invalid: expected {expected}")]
    InvalidEnv {
        /// Variable name.
        name: &'static str,
        /// The value as read.
        value: String,
        /// What it may be.
        expected: &'static str,
    },
    /// A guard refused a value.
    #[error(transparent)]
    Guard(#[from] GuardViolation),
    /// The repository's devcontainer file could not be used.
    #[error("devcontainer {path}: {reason}")]
    Devcontainer {
        /// Which file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The resolved spec is not launchable (`Spec.Validate`).
    #[error("invalid sandbox spec: {reason}")]
    InvalidSpec {
        /// Why.
        reason: String,
    },
    /// A declared read-back path the driver can neither bind nor drain
    /// (ADR-143 R2): refused, never half-served.
    #[error("the {driver} driver cannot serve read_back path {path} (no host bind, no drain)")]
    ReadBackUnservable {
        /// Driver.
        driver: String,
        /// Container path.
        path: String,
    },
    /// The host-root guard's seccomp profile could not be built from its
    /// embedded base (`crate::seccomp`).
    #[error("the host-root guard's seccomp profile cannot be built: {reason}")]
    GuardProfile {
        /// Why.
        reason: String,
    },
}

impl PolicyError {
    /// Stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidEnv { .. } => "SANDBOX_INVALID_ENV",
            Self::Guard(g) => g.code(),
            Self::Devcontainer { .. } => "SANDBOX_DEVCONTAINER_INVALID",
            Self::InvalidSpec { .. } => "SANDBOX_SPEC_INVALID",
            Self::ReadBackUnservable { .. } => "SANDBOX_READBACK_UNSERVABLE",
            Self::GuardProfile { .. } => "SANDBOX_GUARD_PROFILE_INVALID",
        }
    }
}
