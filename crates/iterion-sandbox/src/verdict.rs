//! Degrade vs refuse (the one place that policy lives, seed step 10) and
//! enforce, advise or refuse for egress. The failure classifier is
//! [`crate::classify`].
//!
//! The mode alone decides what an absent container runtime means: `auto`
//! degrades with a visible `sandbox_skipped`, `inline` refuses with a typed
//! failure, an explicit opt-out is silent. The source label only rides the
//! event.

use iterion_core::{DriverName, EventKind, Mode};

use crate::classify::{Cause, Classified, Refused, SetupContext, Stage, classify};

/// What stands between an active mode and a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Availability {
    /// A real driver was selected.
    Ready(DriverName),
    /// None could be used (no runtime, no repo root for auto…); the reason
    /// is shown to the operator.
    Blocked {
        /// Human-readable obstacle.
        reason: String,
    },
}

/// The verdict for a run's sandbox.
#[derive(Debug, Clone, PartialEq)]
pub enum SandboxVerdict {
    /// Start a sandbox on this driver.
    Sandbox(DriverName),
    /// No sandbox and no event (explicit opt-out, or nothing asked).
    Unsandboxed,
    /// `auto` with no driver: run on the host, emit the event.
    Degraded {
        /// `sandbox_skipped {mode, source, reason, file_secrets_dropped}`.
        event: EventKind,
    },
    /// `inline` with no driver: emit the event, fail the run.
    Refused {
        /// `sandbox_skipped {refused: true, error_code, …}`.
        event: EventKind,
        /// How the run ends: [`Refused::NoDriver`] classified
        /// (`SANDBOX_DRIVER_UNAVAILABLE`, `failed`, deterministic).
        failure: Classified,
    },
}

/// Decide. `file_secret_count` is the number of `as: file` secrets a
/// degraded run drops (their delivery channel is the mount).
pub fn sandbox_verdict(
    mode: Mode,
    source_label: &str,
    availability: &Availability,
    file_secret_count: usize,
) -> SandboxVerdict {
    if !mode.is_active() {
        return SandboxVerdict::Unsandboxed;
    }
    let reason = match availability {
        Availability::Ready(d) => return SandboxVerdict::Sandbox(*d),
        Availability::Blocked { reason } => reason.clone(),
    };
    match mode {
        Mode::Auto => SandboxVerdict::Degraded {
            event: EventKind::SandboxSkipped {
                mode,
                source: source_label.to_owned(),
                reason,
                file_secrets_dropped: file_secret_count > 0,
                refused: None,
                error_code: None,
                driver: None,
            },
        },
        _ => {
            let failure = classify(
                Cause::Refused(Refused::NoDriver),
                Stage::Setup,
                SetupContext::default(),
            );
            let code = failure.code;
            SandboxVerdict::Refused {
                event: EventKind::SandboxSkipped {
                    mode,
                    source: source_label.to_owned(),
                    reason,
                    file_secrets_dropped: false,
                    refused: Some(true),
                    error_code: Some(code),
                    driver: None,
                },
                failure,
            }
        }
    }
}

/// How a run's egress policy is served on the selected driver: the one
/// home of "enforce, advise or refuse" (docs/reference/SPEC.md §4: never fail open
/// silently). The booter acts on it; `doctor --strict` reports it.
#[derive(Debug, Clone, PartialEq)]
pub enum EgressVerdict {
    /// Open policy: no proxy, normal networking.
    Open,
    /// The driver confines the sandbox to the proxy.
    Enforced,
    /// `auto` on a driver that cannot confine: an advisory proxy, and this
    /// `sandbox_egress_unenforced` event says so.
    Advisory {
        /// The event to emit.
        event: EventKind,
    },
    /// `inline` on a driver that cannot confine: refused before start.
    Refused {
        /// Why.
        reason: String,
    },
}

/// The egress verdict for a policy that `needs_proxy` on `driver`.
pub fn egress_verdict(
    mode: Mode,
    needs_proxy: bool,
    driver: DriverName,
    enforcement_available: bool,
) -> EgressVerdict {
    if !needs_proxy {
        return EgressVerdict::Open;
    }
    if enforcement_available {
        return EgressVerdict::Enforced;
    }
    let reason = format!("the {driver} driver cannot confine the sandbox to the egress proxy here");
    match mode {
        Mode::Inline => EgressVerdict::Refused { reason },
        _ => EgressVerdict::Advisory {
            event: EventKind::SandboxEgressUnenforced { driver, reason },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iterion_core::{Disposition, FailureCode, RunStatus};

    fn blocked() -> Availability {
        Availability::Blocked {
            reason: "no container runtime".into(),
        }
    }

    #[test]
    fn egress_is_enforced_advised_or_refused_never_silently_open() {
        use EgressVerdict as V;
        let d = DriverName::Docker;
        assert_eq!(egress_verdict(Mode::Inline, false, d, false), V::Open);
        assert_eq!(egress_verdict(Mode::Auto, true, d, true), V::Enforced);
        assert!(matches!(
            egress_verdict(Mode::Inline, true, d, false),
            V::Refused { .. }
        ));
        assert!(matches!(
            egress_verdict(Mode::Auto, true, d, false),
            V::Advisory {
                event: EventKind::SandboxEgressUnenforced { .. }
            }
        ));
    }

    #[test]
    fn auto_degrades_inline_refuses_optout_silent() {
        let v = sandbox_verdict(Mode::Auto, "global default (auto)", &blocked(), 2);
        let SandboxVerdict::Degraded { event } = v else {
            panic!("degraded expected")
        };
        let json = serde_json::to_value(&event).expect("ser");
        insta::assert_json_snapshot!("degraded_auto", json);

        let v = sandbox_verdict(Mode::Inline, "workflow sandbox: block", &blocked(), 0);
        let SandboxVerdict::Refused { event, failure } = v else {
            panic!("refused")
        };
        assert_eq!(
            (failure.code, failure.status, failure.disposition),
            (
                FailureCode::SandboxDriverUnavailable,
                RunStatus::Failed,
                Disposition::Deterministic
            )
        );
        insta::assert_json_snapshot!("refused_inline", serde_json::to_value(&event).expect("ser"));

        for m in [Mode::None, Mode::Inherit] {
            assert_eq!(
                sandbox_verdict(m, "x", &blocked(), 1),
                SandboxVerdict::Unsandboxed
            );
        }
        assert_eq!(
            sandbox_verdict(Mode::Auto, "x", &Availability::Ready(DriverName::Docker), 0),
            SandboxVerdict::Sandbox(DriverName::Docker)
        );
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// `none`/inherit at the winning tier: no sandbox, no event, whatever else holds.
            #[test]
            fn none_is_always_silent(
                inherit in any::<bool>(), ready in any::<bool>(), secrets in 0usize..3, label in "\\PC{0,20}",
            ) {
                let mode = if inherit { Mode::Inherit } else { Mode::None };
                let avail = if ready { Availability::Ready(DriverName::Docker) } else { blocked() };
                prop_assert_eq!(sandbox_verdict(mode, &label, &avail, secrets), SandboxVerdict::Unsandboxed);
            }
        }
    }
}
