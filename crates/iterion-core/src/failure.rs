//! Run statuses, failure codes and dispositions (facts §9, verbatim names).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Lifecycle status of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Created, not yet admitted/started.
    Queued,
    /// Executing.
    Running,
    /// Waiting on a human node.
    PausedWaitingHuman,
    /// Paused by an operator.
    PausedOperator,
    /// Reached `done`.
    Finished,
    /// Failed for good (parked).
    Failed,
    /// Failed in a way a healthy runner may retry (infrastructure).
    FailedResumable,
    /// Cancelled.
    Cancelled,
}

impl RunStatus {
    /// All statuses.
    pub const ALL: [RunStatus; 8] = [
        Self::Queued,
        Self::Running,
        Self::PausedWaitingHuman,
        Self::PausedOperator,
        Self::Finished,
        Self::Failed,
        Self::FailedResumable,
        Self::Cancelled,
    ];

    /// Terminal for pollers and the reaper.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Finished | Self::Failed | Self::FailedResumable | Self::Cancelled
        )
    }

    /// The legal transitions of the run state machine. A store refuses any
    /// other (compare-and-set).
    pub fn can_transition_to(self, next: RunStatus) -> bool {
        use RunStatus::*;
        match self {
            Queued => matches!(next, Running | Failed | FailedResumable | Cancelled),
            Running => matches!(
                next,
                PausedWaitingHuman
                    | PausedOperator
                    | Finished
                    | Failed
                    | FailedResumable
                    | Cancelled
            ),
            PausedWaitingHuman | PausedOperator => {
                matches!(next, Running | Failed | FailedResumable | Cancelled)
            }
            // A resumable failure is redelivered: it may be queued again.
            FailedResumable => matches!(next, Queued | Running | Failed | Cancelled),
            // `iterion resume` reopens a failed or cancelled run (upstream
            // resumes cancelled runs; issue 14 failed ones too); nothing
            // else moves it, and a finished run never moves.
            Failed | Cancelled => matches!(next, Running),
            Finished => false,
        }
    }

    /// The snake_case spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::PausedWaitingHuman => "paused_waiting_human",
            Self::PausedOperator => "paused_operator",
            Self::Finished => "finished",
            Self::Failed => "failed",
            Self::FailedResumable => "failed_resumable",
            Self::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RunStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| format!("unknown run status {s:?}"))
    }
}

/// How a failure should be handled by whoever redelivers runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Disposition {
    /// Timeouts, rate limits, network blips.
    Transient,
    /// The platform failed (interrupted, setup timeout, capacity): NAK.
    Infrastructure,
    /// Another attempt might pass (schema validation, no outgoing edge).
    Reexecutable,
    /// The same input fails the same way: park (ack).
    Deterministic,
    /// Not classified: NAK.
    Unknown,
}

impl Disposition {
    /// The snake_case spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Transient => "transient",
            Self::Infrastructure => "infrastructure",
            Self::Reexecutable => "reexecutable",
            Self::Deterministic => "deterministic",
            Self::Unknown => "unknown",
        }
    }
}

impl fmt::Display for Disposition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Typed failure code stamped on `run.failure_code`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum FailureCode {
    /// An active inline sandbox with no usable driver.
    SandboxDriverUnavailable,
    /// A bounded sandbox setup phase stalled.
    SandboxSetupTimeout,
    /// The sandbox could not be placed (capacity).
    SandboxCapacity,
    /// Refused at admission (e.g. untrusted without sandbox).
    LaunchFailed,
    /// A resume whose scratch cannot be restored.
    ScratchNotPortable,
    /// The run's process went away (lost owner, drain).
    Interrupted,
    /// Cancelled by a user or signal.
    Cancelled,
    /// The sandbox image could not be found or pulled.
    SandboxImageUnavailable,
    /// `build:` failed.
    SandboxBuildFailed,
    /// The sandbox failed to start (post_create failed, engine refused).
    SandboxStartFailed,
    /// The container engine went away mid-run.
    SandboxLost,
    /// The spec violates a guard (sensitive bind source, injection).
    SandboxSpecRefused,
    /// A tool node failed (non-zero exit, bad output).
    NodeFailed,
    /// The workflow routed to `fail`.
    WorkflowFailed,
    /// No outgoing edge matched the node's output.
    NoOutgoingEdge,
    /// A loop exceeded its bound.
    LoopLimitExceeded,
    /// The run store failed.
    StoreError,
    /// A node's `timeout:` or the run's `--timeout` ran out (upstream's
    /// `TIMEOUT`); the command was killed inside the sandbox.
    Timeout,
    /// A workflow `budget:` bound (`max_duration`, `max_iterations`, and
    /// the agents' token/cost bounds) was reached (upstream's
    /// `BUDGET_EXCEEDED`).
    BudgetExceeded,
    /// A `required: true` attachment of the run cannot be provided
    /// (`run_attachment_lost`): the same store fails the same way.
    AttachmentLost,
    /// More than one parallel branch may write the workspace (upstream's
    /// `WORKSPACE_SAFETY`): refused before any node runs.
    WorkspaceSafety,
}

impl FailureCode {
    /// The SCREAMING_SNAKE spelling persisted on runs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SandboxDriverUnavailable => "SANDBOX_DRIVER_UNAVAILABLE",
            Self::SandboxSetupTimeout => "SANDBOX_SETUP_TIMEOUT",
            Self::SandboxCapacity => "SANDBOX_CAPACITY",
            Self::LaunchFailed => "LAUNCH_FAILED",
            Self::ScratchNotPortable => "SCRATCH_NOT_PORTABLE",
            Self::Interrupted => "INTERRUPTED",
            Self::Cancelled => "CANCELLED",
            Self::SandboxImageUnavailable => "SANDBOX_IMAGE_UNAVAILABLE",
            Self::SandboxBuildFailed => "SANDBOX_BUILD_FAILED",
            Self::SandboxStartFailed => "SANDBOX_START_FAILED",
            Self::SandboxLost => "SANDBOX_LOST",
            Self::SandboxSpecRefused => "SANDBOX_SPEC_REFUSED",
            Self::NodeFailed => "NODE_FAILED",
            Self::WorkflowFailed => "WORKFLOW_FAILED",
            Self::NoOutgoingEdge => "NO_OUTGOING_EDGE",
            Self::LoopLimitExceeded => "LOOP_LIMIT_EXCEEDED",
            Self::StoreError => "STORE_ERROR",
            Self::Timeout => "TIMEOUT",
            Self::BudgetExceeded => "BUDGET_EXCEEDED",
            Self::AttachmentLost => "ATTACHMENT_LOST",
            Self::WorkspaceSafety => "WORKSPACE_SAFETY",
        }
    }

    /// The disposition class of this code (facts §9.2).
    pub fn disposition(self) -> Disposition {
        match self {
            Self::SandboxSetupTimeout
            | Self::SandboxCapacity
            | Self::Interrupted
            | Self::SandboxLost => Disposition::Infrastructure,
            Self::SandboxDriverUnavailable
            | Self::LaunchFailed
            | Self::ScratchNotPortable
            | Self::SandboxImageUnavailable
            | Self::SandboxBuildFailed
            | Self::SandboxSpecRefused
            | Self::WorkflowFailed
            | Self::LoopLimitExceeded
            | Self::BudgetExceeded
            | Self::AttachmentLost
            | Self::WorkspaceSafety => Disposition::Deterministic,
            Self::NodeFailed | Self::NoOutgoingEdge => Disposition::Reexecutable,
            Self::SandboxStartFailed | Self::StoreError | Self::Timeout => Disposition::Transient,
            Self::Cancelled => Disposition::Deterministic,
        }
    }

    /// The status a run with this failure ends in. A failure a retry may
    /// cure — the platform's (infrastructure), or a transient failure of the
    /// sandbox start or of the store (issue 14 item 8(c); upstream keeps a
    /// failed sandbox start resumable) — ends `failed_resumable`, so a
    /// runner that NAKs it finds it redeliverable; a run's own bound
    /// (`TIMEOUT`) and everything the same input repeats end `failed`.
    pub fn status(self) -> RunStatus {
        match self {
            Self::Cancelled => RunStatus::Cancelled,
            Self::SandboxStartFailed | Self::StoreError => RunStatus::FailedResumable,
            _ if self.disposition() == Disposition::Infrastructure => RunStatus::FailedResumable,
            _ => RunStatus::Failed,
        }
    }
}

impl fmt::Display for FailureCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for FailureCode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        serde_json::from_value(serde_json::Value::String(s.to_owned()))
            .map_err(|_| format!("unknown failure code {s:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_codes_have_seed_statuses() {
        assert_eq!(
            FailureCode::SandboxDriverUnavailable.status(),
            RunStatus::Failed
        );
        assert_eq!(
            FailureCode::SandboxDriverUnavailable.disposition(),
            Disposition::Deterministic
        );
        assert_eq!(
            FailureCode::SandboxSetupTimeout.status(),
            RunStatus::FailedResumable
        );
        assert_eq!(
            FailureCode::SandboxCapacity.disposition(),
            Disposition::Infrastructure
        );
        assert_eq!(FailureCode::Cancelled.status(), RunStatus::Cancelled);
        // Transient failures of the platform stay resumable (issue 14 8(c)).
        for c in [FailureCode::SandboxStartFailed, FailureCode::StoreError] {
            assert_eq!(c.disposition(), Disposition::Transient);
            assert_eq!(c.status(), RunStatus::FailedResumable);
        }
        // A bound that was hit is a plain failure: a redelivery would hit it
        // again (budget) or may pass (timeout), never an infrastructure NAK.
        assert_eq!(FailureCode::Timeout.status(), RunStatus::Failed);
        assert_eq!(FailureCode::Timeout.disposition(), Disposition::Transient);
        assert_eq!(FailureCode::BudgetExceeded.status(), RunStatus::Failed);
        assert_eq!(
            FailureCode::BudgetExceeded.disposition(),
            Disposition::Deterministic
        );
        for c in ["TIMEOUT", "BUDGET_EXCEEDED"] {
            assert_eq!(c.parse::<FailureCode>().expect(c).as_str(), c);
        }
    }

    #[test]
    fn codes_round_trip() {
        let c: FailureCode = "SANDBOX_SETUP_TIMEOUT".parse().expect("known");
        assert_eq!(c.as_str(), "SANDBOX_SETUP_TIMEOUT");
        assert_eq!(
            serde_json::to_string(&c).expect("ser"),
            "\"SANDBOX_SETUP_TIMEOUT\""
        );
    }

    #[test]
    fn terminal_statuses_move_only_when_resumed() {
        for from in RunStatus::ALL {
            for to in RunStatus::ALL {
                match from {
                    RunStatus::Finished => assert!(!from.can_transition_to(to)),
                    // A resume reopens them, and nothing else moves them.
                    RunStatus::Failed | RunStatus::Cancelled => {
                        assert_eq!(from.can_transition_to(to), to == RunStatus::Running);
                    }
                    _ => {}
                }
            }
        }
    }
}
