//! The one classifier from "why a run could not be set up (or lost its
//! sandbox)" to the run's `(status, failure code, disposition)` (facts §9.2,
//! every row). The sandbox decision, the booter that executes it and the
//! engine's node execution all call [`classify`]; nothing else maps an
//! error to a failure code.
//!
//! The code decides the status and the disposition
//! ([`FailureCode::status`], [`FailureCode::disposition`]), so the three
//! can never disagree: a failure a retry may cure (infrastructure, or a
//! transient failure of the sandbox start or of the store) ends
//! `failed_resumable`, so a runner that NAKs it finds it redeliverable and
//! `iterion resume` can continue it; a failure the same input repeats
//! ends `failed` (parked).
//!
//! It does not decide *whether* a run is refused (the decision does,
//! [`crate::decision`]) nor retry anything.

use iterion_core::{Disposition, DriverError, FailureCode, RunStatus};

/// Whether the run's context was still alive when setup failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SetupContext {
    /// The run was cancelled (user, signal or its deadline).
    pub cancelled: bool,
    /// The run's process is going away (drain, lost heartbeat).
    pub interrupted: bool,
}

/// Where a driver error happened: setting the sandbox up, or in one
/// node's exec once it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Prepare, build, start, post_create, the proxy, the run's host dirs.
    Setup,
    /// A node's command in a started sandbox.
    Exec,
}

/// Why the sandbox decision refused a run (the refusals that are the
/// decision's own; a driver refuses through its [`DriverError`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refused {
    /// Inline (or an image/build block) with no usable driver: degrade vs
    /// refuse said refuse.
    NoDriver,
    /// The spec or plan is refused: a guard, a bind source, the
    /// devcontainer, the identity rule, an egress policy the driver cannot
    /// enforce, a secret that cannot be delivered.
    Spec,
}

/// Why a run could not be set up, or lost its sandbox.
#[derive(Debug, Clone, Copy)]
pub enum Cause<'a> {
    /// A driver call failed.
    Driver(&'a DriverError),
    /// The decision refused the run.
    Refused(Refused),
    /// A host-side step of the booter failed (the run's private
    /// directories, writing the secret files, starting the proxy).
    HostSetup,
    /// The run store failed.
    Store,
    /// The run was stopped on its cancel token.
    Cancelled,
}

/// The classified failure: what the run ends as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Classified {
    /// Terminal status.
    pub status: RunStatus,
    /// Failure code stamped on the run.
    pub code: FailureCode,
    /// How a redelivering runner treats it.
    pub disposition: Disposition,
}

impl Classified {
    fn of(code: FailureCode) -> Self {
        Self {
            status: code.status(),
            code,
            disposition: code.disposition(),
        }
    }
}

/// Classify `cause` at `stage`. Context wins over the cause: a setup that
/// failed *because* the run was cancelled is a cancellation, not an engine
/// fault (facts §9.2, last two rows).
pub fn classify(cause: Cause<'_>, stage: Stage, ctx: SetupContext) -> Classified {
    if ctx.cancelled {
        return Classified::of(FailureCode::Cancelled);
    }
    if ctx.interrupted {
        return Classified::of(FailureCode::Interrupted);
    }
    Classified::of(match cause {
        Cause::Driver(err) => driver_code(err, stage),
        Cause::Refused(Refused::NoDriver) => FailureCode::SandboxDriverUnavailable,
        Cause::Refused(Refused::Spec) => FailureCode::SandboxSpecRefused,
        Cause::HostSetup => FailureCode::SandboxStartFailed,
        Cause::Store => FailureCode::StoreError,
        Cause::Cancelled => FailureCode::Cancelled,
    })
}

fn driver_code(err: &DriverError, stage: Stage) -> FailureCode {
    match (err, stage) {
        (DriverError::Cancelled, _) => FailureCode::Cancelled,
        (DriverError::ContainerGone { .. }, _) => FailureCode::SandboxLost,
        // In a running sandbox every other driver error is the node's
        // failure (a retry of the run may pass).
        (_, Stage::Exec) => FailureCode::NodeFailed,
        (DriverError::Unavailable { .. }, Stage::Setup) => FailureCode::SandboxDriverUnavailable,
        (DriverError::PhaseTimeout { .. }, Stage::Setup) => FailureCode::SandboxSetupTimeout,
        (DriverError::Capacity { .. }, Stage::Setup) => FailureCode::SandboxCapacity,
        (DriverError::ImageUnavailable { .. }, Stage::Setup) => {
            FailureCode::SandboxImageUnavailable
        }
        (DriverError::BuildFailed { .. }, Stage::Setup) => FailureCode::SandboxBuildFailed,
        (
            DriverError::SpecRefused { .. }
            | DriverError::Unsupported { .. }
            | DriverError::GuardUnavailable { .. },
            Stage::Setup,
        ) => FailureCode::SandboxSpecRefused,
        (
            DriverError::PostCreateFailed { .. }
            | DriverError::ForeignPrepared { .. }
            | DriverError::Engine { .. }
            | DriverError::Io { .. },
            Stage::Setup,
        ) => FailureCode::SandboxStartFailed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use FailureCode as F;
    use RunStatus as S;

    fn io() -> std::io::Error {
        std::io::Error::other("x")
    }

    /// Every row of facts §9.2 plus every driver error, at setup.
    #[test]
    fn every_setup_row() {
        let alive = SetupContext::default();
        let d = |e: DriverError| classify(Cause::Driver(&e), Stage::Setup, alive);
        let rows: Vec<(Classified, S, F, Disposition)> = vec![
            (
                d(DriverError::Unavailable { reason: "x".into() }),
                S::Failed,
                F::SandboxDriverUnavailable,
                Disposition::Deterministic,
            ),
            (
                d(DriverError::PhaseTimeout {
                    phase: "pull",
                    timeout: Duration::from_secs(1),
                    variable: "ITERION_SANDBOX_PULL_TIMEOUT",
                }),
                S::FailedResumable,
                F::SandboxSetupTimeout,
                Disposition::Infrastructure,
            ),
            (
                d(DriverError::Capacity { reason: "x".into() }),
                S::FailedResumable,
                F::SandboxCapacity,
                Disposition::Infrastructure,
            ),
            (
                d(DriverError::ImageUnavailable {
                    image: "i".into(),
                    reason: "x".into(),
                }),
                S::Failed,
                F::SandboxImageUnavailable,
                Disposition::Deterministic,
            ),
            (
                d(DriverError::BuildFailed {
                    stderr_tail: "x".into(),
                }),
                S::Failed,
                F::SandboxBuildFailed,
                Disposition::Deterministic,
            ),
            (
                d(DriverError::SpecRefused { reason: "x".into() }),
                S::Failed,
                F::SandboxSpecRefused,
                Disposition::Deterministic,
            ),
            (
                d(DriverError::GuardUnavailable { reason: "x".into() }),
                S::Failed,
                F::SandboxSpecRefused,
                Disposition::Deterministic,
            ),
            (
                d(DriverError::Unsupported {
                    driver: iterion_core::DriverName::Docker,
                    feature: "build",
                }),
                S::Failed,
                F::SandboxSpecRefused,
                Disposition::Deterministic,
            ),
            (
                d(DriverError::ContainerGone {
                    container: "c".into(),
                }),
                S::FailedResumable,
                F::SandboxLost,
                Disposition::Infrastructure,
            ),
            // Issue 14 item 8(c): a transient start failure stays resumable.
            (
                d(DriverError::PostCreateFailed {
                    exit_code: 1,
                    output_tail: "x".into(),
                }),
                S::FailedResumable,
                F::SandboxStartFailed,
                Disposition::Transient,
            ),
            (
                d(DriverError::Engine {
                    operation: "create",
                    source: Box::new(io()),
                }),
                S::FailedResumable,
                F::SandboxStartFailed,
                Disposition::Transient,
            ),
            (
                d(DriverError::Io {
                    operation: "archive".into(),
                    source: io(),
                }),
                S::FailedResumable,
                F::SandboxStartFailed,
                Disposition::Transient,
            ),
            (
                d(DriverError::Cancelled),
                S::Cancelled,
                F::Cancelled,
                Disposition::Deterministic,
            ),
            (
                classify(Cause::Refused(Refused::NoDriver), Stage::Setup, alive),
                S::Failed,
                F::SandboxDriverUnavailable,
                Disposition::Deterministic,
            ),
            (
                classify(Cause::Refused(Refused::Spec), Stage::Setup, alive),
                S::Failed,
                F::SandboxSpecRefused,
                Disposition::Deterministic,
            ),
            (
                classify(Cause::HostSetup, Stage::Setup, alive),
                S::FailedResumable,
                F::SandboxStartFailed,
                Disposition::Transient,
            ),
            (
                classify(Cause::Store, Stage::Setup, alive),
                S::FailedResumable,
                F::StoreError,
                Disposition::Transient,
            ),
            (
                classify(
                    Cause::Refused(Refused::NoDriver),
                    Stage::Setup,
                    SetupContext {
                        interrupted: true,
                        cancelled: false,
                    },
                ),
                S::FailedResumable,
                F::Interrupted,
                Disposition::Infrastructure,
            ),
            (
                classify(
                    Cause::HostSetup,
                    Stage::Setup,
                    SetupContext {
                        interrupted: false,
                        cancelled: true,
                    },
                ),
                S::Cancelled,
                F::Cancelled,
                Disposition::Deterministic,
            ),
        ];
        for (got, status, code, disposition) in rows {
            assert_eq!(
                got,
                Classified {
                    status,
                    code,
                    disposition
                }
            );
        }
    }

    /// In a running sandbox only a lost container and a cancellation keep
    /// their own code; every other driver error is the node's failure.
    #[test]
    fn exec_stage() {
        let alive = SetupContext::default();
        let e = |err: DriverError| classify(Cause::Driver(&err), Stage::Exec, alive).code;
        assert_eq!(
            e(DriverError::ContainerGone {
                container: "c".into()
            }),
            F::SandboxLost
        );
        assert_eq!(e(DriverError::Cancelled), F::Cancelled);
        assert_eq!(
            e(DriverError::Unavailable { reason: "x".into() }),
            F::NodeFailed
        );
        assert_eq!(
            e(DriverError::Io {
                operation: "exec".into(),
                source: io(),
            }),
            F::NodeFailed
        );
    }

    /// The status agrees with the disposition for every setup cause: what a
    /// runner would NAK (infrastructure, transient) stays redeliverable,
    /// what it parks ends `failed`, a cancellation ends `cancelled`.
    #[test]
    fn status_agrees_with_disposition() {
        let causes = [
            Cause::Refused(Refused::NoDriver),
            Cause::Refused(Refused::Spec),
            Cause::HostSetup,
            Cause::Store,
            Cause::Cancelled,
        ];
        for cause in causes {
            let c = classify(cause, Stage::Setup, SetupContext::default());
            let want = match c.disposition {
                Disposition::Infrastructure | Disposition::Transient => S::FailedResumable,
                _ if c.code == F::Cancelled => S::Cancelled,
                _ => S::Failed,
            };
            assert_eq!(c.status, want, "{cause:?} → {c:?}");
        }
    }
}
