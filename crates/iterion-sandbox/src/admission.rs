//! The admission verdict of a run (seed step 3–4) — the one type the
//! engine persists and the sandbox decision returns — and the gate for
//! untrusted workspaces (facts §3.5): a run whose trust is not the trusted
//! default and whose sandbox resolves to no container is refused before
//! any workspace setup or model call. Pure: the runtime persists the
//! verdict's record under its CAS contract.

use iterion_core::store::{Admission, AdmissionDecision};
use iterion_core::{FailureCode, Trust};
use time::OffsetDateTime;

use crate::precedence::{ModeSource, ResolvedMode};

/// The admission phase this gate runs in.
pub const PRE_MODEL: &str = "pre_model";
/// The denial code.
pub const UNTRUSTED_WITHOUT_SANDBOX: &str = "untrusted_without_sandbox";

/// Whether a run may start, decided before anything is created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdmissionVerdict {
    /// The run may start.
    Admit {
        /// Why (names the tier that spoke, when one did).
        reason: String,
    },
    /// The run is refused before anything starts.
    Deny {
        /// Admission code (`untrusted_without_sandbox`,
        /// `SANDBOX_READBACK_UNSERVABLE`, the engine's own checks' codes).
        code: String,
        /// Why (names the tier that spoke).
        reason: String,
        /// The run's failure code (`LAUNCH_FAILED`: facts §9.2, "refused at
        /// admission").
        failure: FailureCode,
    },
}

impl AdmissionVerdict {
    /// A denial with the admission failure code (`LAUNCH_FAILED`).
    pub fn deny(code: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::Deny {
            code: code.into(),
            reason: reason.into(),
            failure: FailureCode::LaunchFailed,
        }
    }

    /// Whether the run may start.
    pub fn admitted(&self) -> bool {
        matches!(self, Self::Admit { .. })
    }

    /// Why.
    pub fn reason(&self) -> &str {
        match self {
            Self::Admit { reason } | Self::Deny { reason, .. } => reason,
        }
    }

    /// The denial code, when denied.
    pub fn code(&self) -> Option<&str> {
        match self {
            Self::Admit { .. } => None,
            Self::Deny { code, .. } => Some(code),
        }
    }

    /// The record to persist, checked at `now`.
    pub fn record(&self, now: OffsetDateTime) -> Admission {
        Admission {
            decision: if self.admitted() {
                AdmissionDecision::Admitted
            } else {
                AdmissionDecision::Denied
            },
            phase: PRE_MODEL.to_owned(),
            code: self.code().map(str::to_owned),
            reason: self.reason().to_owned(),
            checked_at: now,
        }
    }
}

/// Ask the one question the run's boot will ask: will it get a container?
/// `sandboxed` is whether the decision gives it one (an active mode and a
/// real driver: "auto on a runtime-less host" counts as no container).
pub fn admit(trust: Trust, resolved: &ResolvedMode, sandboxed: bool) -> AdmissionVerdict {
    if trust == Trust::Trusted || sandboxed {
        return AdmissionVerdict::Admit {
            reason: format!(
                "trust {}; sandbox {} ({})",
                if trust == Trust::Trusted {
                    "trusted"
                } else {
                    "untrusted"
                },
                if sandboxed {
                    "will run in a container"
                } else {
                    "not required"
                },
                resolved.source
            ),
        };
    }
    let why = if resolved.mode.is_active() {
        format!(
            "sandbox mode {} has no usable container runtime on this host",
            resolved.mode
        )
    } else if resolved.mode.as_str().is_empty() {
        "no sandbox configured".to_owned()
    } else {
        format!("sandbox mode {}", resolved.mode)
    };
    let tier = match resolved.source {
        ModeSource::Override => "ITERION_SANDBOX_OVERRIDE is set and spoke".to_owned(),
        other => format!("decided by {other}"),
    };
    AdmissionVerdict::deny(
        UNTRUSTED_WITHOUT_SANDBOX,
        format!("untrusted workspace without a sandbox: {why}; {tier}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use iterion_core::Mode;

    fn r(mode: Mode, source: ModeSource) -> ResolvedMode {
        ResolvedMode { mode, source }
    }

    #[test]
    fn untrusted_needs_a_container() {
        let now = OffsetDateTime::UNIX_EPOCH;
        let cases = [
            (
                Trust::Trusted,
                r(Mode::None, ModeSource::CliFlag),
                false,
                true,
            ),
            (
                Trust::Untrusted,
                r(Mode::Auto, ModeSource::GlobalDefault),
                true,
                true,
            ),
            (
                Trust::Untrusted,
                r(Mode::Inline, ModeSource::Workflow),
                true,
                true,
            ),
            (
                Trust::Untrusted,
                r(Mode::Auto, ModeSource::GlobalDefault),
                false,
                false,
            ),
            (
                Trust::Untrusted,
                r(Mode::None, ModeSource::Override),
                true,
                false,
            ),
            (
                Trust::Untrusted,
                r(Mode::Inherit, ModeSource::Unset),
                true,
                false,
            ),
        ];
        for (trust, resolved, avail, admitted) in cases {
            let sandboxed = resolved.mode.is_active() && avail;
            let v = admit(trust, &resolved, sandboxed);
            let record = v.record(now);
            assert_eq!(
                record.decision == AdmissionDecision::Admitted,
                admitted,
                "{trust:?} {resolved:?} {avail}"
            );
            if !admitted {
                assert!(matches!(
                    v,
                    AdmissionVerdict::Deny {
                        failure: FailureCode::LaunchFailed,
                        ..
                    }
                ));
                assert_eq!(record.code.as_deref(), Some(UNTRUSTED_WITHOUT_SANDBOX));
                assert_eq!(record.phase, "pre_model");
                assert!(
                    record.reason.contains(resolved.source.as_str())
                        || resolved.source == ModeSource::Override
                );
            }
        }
        let v = admit(
            Trust::Untrusted,
            &r(Mode::None, ModeSource::Override),
            false,
        );
        assert!(v.reason().contains("ITERION_SANDBOX_OVERRIDE"));
        insta::assert_snapshot!("admission_denied_override", v.reason());
    }
}
