//! The admission gate for untrusted workspaces (facts §3.5): a run whose
//! trust is not the trusted default and whose sandbox resolves to no
//! container is refused before any workspace setup or model call. Pure:
//! the runtime persists the returned record under its CAS contract.

use iterion_core::store::{Admission, AdmissionDecision};
use iterion_core::{FailureCode, Trust};
use time::OffsetDateTime;

use crate::precedence::{ModeSource, ResolvedMode};

/// The admission phase this gate runs in.
pub const PRE_MODEL: &str = "pre_model";
/// The denial code.
pub const UNTRUSTED_WITHOUT_SANDBOX: &str = "untrusted_without_sandbox";

/// The verdict: the record to persist, plus the failure code when denied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionVerdict {
    /// The record.
    pub admission: Admission,
    /// `LAUNCH_FAILED` when denied.
    pub failure: Option<FailureCode>,
}

/// Ask the one question the run's boot will ask: will it get a container?
/// `driver_available` is whether the host can run a real driver (so "auto
/// on a runtime-less host" counts as no container).
pub fn admit(
    trust: Trust,
    resolved: &ResolvedMode,
    driver_available: bool,
    now: OffsetDateTime,
) -> AdmissionVerdict {
    let sandboxed = resolved.mode.is_active() && driver_available;
    if trust == Trust::Trusted || sandboxed {
        return AdmissionVerdict {
            admission: Admission {
                decision: AdmissionDecision::Admitted,
                phase: PRE_MODEL.to_owned(),
                code: None,
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
                checked_at: now,
            },
            failure: None,
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
    AdmissionVerdict {
        admission: Admission {
            decision: AdmissionDecision::Denied,
            phase: PRE_MODEL.to_owned(),
            code: Some(UNTRUSTED_WITHOUT_SANDBOX.to_owned()),
            reason: format!("untrusted workspace without a sandbox: {why}; {tier}"),
            checked_at: now,
        },
        failure: Some(FailureCode::LaunchFailed),
    }
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
            let v = admit(trust, &resolved, avail, now);
            assert_eq!(
                v.admission.decision == AdmissionDecision::Admitted,
                admitted,
                "{trust:?} {resolved:?} {avail}"
            );
            if !admitted {
                assert_eq!(v.failure, Some(FailureCode::LaunchFailed));
                assert_eq!(v.admission.code.as_deref(), Some(UNTRUSTED_WITHOUT_SANDBOX));
                assert_eq!(v.admission.phase, "pre_model");
                assert!(
                    v.admission.reason.contains(resolved.source.as_str())
                        || resolved.source == ModeSource::Override
                );
            }
        }
        let v = admit(
            Trust::Untrusted,
            &r(Mode::None, ModeSource::Override),
            true,
            now,
        );
        assert!(v.admission.reason.contains("ITERION_SANDBOX_OVERRIDE"));
        insta::assert_snapshot!("admission_denied_override", v.admission.reason);
    }
}
