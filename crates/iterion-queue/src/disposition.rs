//! What a finished delivery does to its queue message: the one table of
//! the runner's acks (facts §9.3, issue 13). The disposition of a failure
//! is not decided here: it is the failure code's, from the core table
//! (`FailureCode::disposition`).
//!
//! | delivery ended | action |
//! |---|---|
//! | finished, paused, cancelled by a user | ack |
//! | failed, deterministic / re-executable / transient disposition | ack (parked `failed`; `iterion resume` retries it) |
//! | failed, infrastructure or unknown disposition (`failed_resumable`) | nak, delay = `ITERION_RUNNER_NAK_DELAY` × attempt |
//! | interrupted (lease lost, drain) | nak, no delay (a sibling takes it over now) |
//! | the lease is held by a live sibling | nak, delay = one lease TTL (upstream #770), so a dead holder's lease has expired by then |
//! | the store could not be read or written | nak, delay as infrastructure |
//! | a malformed message, an unknown run, a run that cannot run here | dead letter, then term |
//! | any nak on the final delivery (`ITERION_RUNNER_MAX_DELIVER`) | dead letter, then term |
//!
//! A dead letter goes to the DLQ stream first and the message is termed
//! only once the DLQ holds it, so nothing is dropped between the two.

use std::time::Duration;

use iterion_core::store::Failure;
use iterion_core::{Disposition, RunStatus};

/// How a delivery ended, as the runner saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// The engine recorded this status (and failure).
    Run {
        /// Status.
        status: RunStatus,
        /// Failure, when failed.
        failure: Option<Failure>,
        /// The platform interrupted it (lease lost, drain).
        interrupted: bool,
    },
    /// Another runner holds the run's lease.
    LeaseHeld {
        /// Who, as the lease says.
        holder: String,
    },
    /// The store (or NATS) failed before the run could be settled.
    Unavailable {
        /// Why.
        reason: String,
    },
    /// The message or its run cannot be executed by any runner.
    Poison {
        /// Why (goes into the dead letter).
        reason: String,
    },
}

/// What to do with the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Done with it.
    Ack,
    /// Redeliver it after `delay`.
    Nak {
        /// Redelivery delay.
        delay: Duration,
    },
    /// Publish it to the DLQ with `reason`, then term it.
    DeadLetter {
        /// Why.
        reason: String,
    },
}

impl Action {
    /// The word recorded in `run_released.action`.
    pub fn word(&self) -> &'static str {
        match self {
            Self::Ack => "ack",
            Self::Nak { .. } => "nak",
            Self::DeadLetter { .. } => "dead_letter",
        }
    }
}

/// Which delivery this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt {
    /// From 1.
    pub delivered: u64,
    /// `ITERION_RUNNER_MAX_DELIVER`.
    pub max_deliver: u64,
}

impl Attempt {
    /// No redelivery follows this one.
    pub fn is_final(self) -> bool {
        self.delivered >= self.max_deliver
    }
}

/// The delays the table uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delays {
    /// Base delay of an infrastructure retry.
    pub infrastructure: Duration,
    /// The lease TTL.
    pub lease_ttl: Duration,
}

/// The one table (see the module docs).
pub fn settle(ending: &Ending, attempt: Attempt, delays: Delays) -> Action {
    let retry = |delay: Duration, why: String| {
        if attempt.is_final() {
            Action::DeadLetter {
                reason: format!(
                    "{why}; delivery {} of {} was the last",
                    attempt.delivered, attempt.max_deliver
                ),
            }
        } else {
            Action::Nak { delay }
        }
    };
    let backoff = delays
        .infrastructure
        .saturating_mul(u32::try_from(attempt.delivered.max(1)).unwrap_or(u32::MAX));
    match ending {
        Ending::Run {
            interrupted: true,
            status,
            ..
        } if !status.is_terminal() || *status == RunStatus::FailedResumable => retry(
            Duration::ZERO,
            "the run was interrupted (lease lost or runner draining)".to_owned(),
        ),
        Ending::Run {
            status, failure, ..
        } => match (status, failure) {
            (RunStatus::Failed | RunStatus::FailedResumable, Some(f)) => {
                match f.code.disposition() {
                    Disposition::Infrastructure | Disposition::Unknown => retry(
                        backoff,
                        format!("infrastructure failure {} ({})", f.code, f.message),
                    ),
                    Disposition::Deterministic
                    | Disposition::Reexecutable
                    | Disposition::Transient => Action::Ack,
                }
            }
            // A resumable status without its failure: doubt is a retry.
            (RunStatus::FailedResumable, None) => {
                retry(backoff, "failed_resumable without a failure".to_owned())
            }
            _ => Action::Ack,
        },
        Ending::LeaseHeld { holder } => retry(
            delays.lease_ttl,
            format!("the run's lease is held by {holder}"),
        ),
        Ending::Unavailable { reason } => retry(backoff, reason.clone()),
        Ending::Poison { reason } => Action::DeadLetter {
            reason: reason.clone(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iterion_core::FailureCode;

    const D: Delays = Delays {
        infrastructure: Duration::from_secs(10),
        lease_ttl: Duration::from_secs(60),
    };

    fn run(status: RunStatus, code: Option<FailureCode>) -> Ending {
        Ending::Run {
            status,
            failure: code.map(|c| Failure::new(c, "x")),
            interrupted: false,
        }
    }

    #[test]
    fn the_table() {
        let first = Attempt {
            delivered: 1,
            max_deliver: 3,
        };
        let last = Attempt {
            delivered: 3,
            max_deliver: 3,
        };
        let nak = |s| Action::Nak {
            delay: Duration::from_secs(s),
        };
        let rows: Vec<(Ending, Attempt, Action)> = vec![
            (run(RunStatus::Finished, None), first, Action::Ack),
            (run(RunStatus::PausedWaitingHuman, None), first, Action::Ack),
            (
                run(RunStatus::Cancelled, Some(FailureCode::Cancelled)),
                last,
                Action::Ack,
            ),
            (
                run(
                    RunStatus::Failed,
                    Some(FailureCode::SandboxDriverUnavailable),
                ),
                first,
                Action::Ack,
            ),
            (
                run(RunStatus::Failed, Some(FailureCode::NodeFailed)),
                first,
                Action::Ack,
            ),
            (
                run(RunStatus::Failed, Some(FailureCode::Timeout)),
                first,
                Action::Ack,
            ),
            (
                run(
                    RunStatus::FailedResumable,
                    Some(FailureCode::SandboxSetupTimeout),
                ),
                first,
                nak(10),
            ),
            (
                run(
                    RunStatus::FailedResumable,
                    Some(FailureCode::SandboxCapacity),
                ),
                Attempt {
                    delivered: 2,
                    max_deliver: 3,
                },
                nak(20),
            ),
            (
                Ending::Run {
                    status: RunStatus::FailedResumable,
                    failure: Some(Failure::new(FailureCode::Interrupted, "lease lost")),
                    interrupted: true,
                },
                first,
                nak(0),
            ),
            (
                Ending::LeaseHeld {
                    holder: "r2".into(),
                },
                first,
                nak(60),
            ),
            (
                Ending::Unavailable {
                    reason: "pg down".into(),
                },
                first,
                nak(10),
            ),
        ];
        for (ending, attempt, want) in rows {
            assert_eq!(settle(&ending, attempt, D), want, "{ending:?} {attempt:?}");
        }
        for ending in [
            run(RunStatus::FailedResumable, Some(FailureCode::SandboxLost)),
            Ending::LeaseHeld {
                holder: "r2".into(),
            },
            Ending::Unavailable {
                reason: "pg down".into(),
            },
            Ending::Poison {
                reason: "bad".into(),
            },
        ] {
            assert!(
                matches!(settle(&ending, last, D), Action::DeadLetter { .. }),
                "{ending:?} on the last delivery"
            );
        }
        assert!(matches!(
            settle(
                &Ending::Poison {
                    reason: "bad".into()
                },
                first,
                D
            ),
            Action::DeadLetter { .. }
        ));
    }

    #[test]
    fn every_failure_code_has_an_action() {
        // The table reads the core's disposition of every code: none is
        // left without an answer, and only infrastructure is retried.
        for code in [
            FailureCode::SandboxDriverUnavailable,
            FailureCode::SandboxSetupTimeout,
            FailureCode::SandboxCapacity,
            FailureCode::LaunchFailed,
            FailureCode::ScratchNotPortable,
            FailureCode::Interrupted,
            FailureCode::Cancelled,
            FailureCode::SandboxImageUnavailable,
            FailureCode::SandboxBuildFailed,
            FailureCode::SandboxStartFailed,
            FailureCode::SandboxLost,
            FailureCode::SandboxSpecRefused,
            FailureCode::NodeFailed,
            FailureCode::WorkflowFailed,
            FailureCode::NoOutgoingEdge,
            FailureCode::LoopLimitExceeded,
            FailureCode::StoreError,
            FailureCode::Timeout,
            FailureCode::BudgetExceeded,
        ] {
            let action = settle(
                &run(code.status(), Some(code)),
                Attempt {
                    delivered: 1,
                    max_deliver: 3,
                },
                D,
            );
            let retried = matches!(action, Action::Nak { .. });
            assert_eq!(
                retried,
                code.disposition() == Disposition::Infrastructure,
                "{code}"
            );
        }
    }
}
