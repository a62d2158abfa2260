//! What a runner lets a queued run ask for (issue 31 item 5). The
//! submitter is not the runner's operator: whatever `iterion submit` or the
//! workflow's `sandbox:` block says, the runner decides.
//!
//! - `ITERION_RUNNER_MAX_TRUST` (`untrusted` by default, or `trusted`)
//!   caps every queued run's trust: a run submitted `--trust trusted` runs
//!   `untrusted` on a default runner, so it must run in a container and
//!   its declared `mounts:` may not leave its workspace.
//! - `ITERION_RUNNER_ALLOW_HOST_RUNS` (`0` by default, `1` to opt in): a
//!   run asking for no sandbox (`--sandbox none`, `sandbox: none`) or for
//!   the runner's host state (`--sandbox-host-state auto`, `host_state:
//!   auto`) is refused before anything starts, with a typed admission
//!   refusal ([`QUEUE_HOST_RUN_REFUSED`], [`QUEUE_HOST_STATE_REFUSED`]); a
//!   run that asks for neither binds none of the runner's host state (the
//!   runner pins `host_state` to `none`).
//!
//! A bad value of either is an error naming its variable, never a default.

use iterion_core::{HostState, Mode, Trust};

use crate::QueueError;

/// Admission code of a queued run asking to run on the runner's host.
pub const QUEUE_HOST_RUN_REFUSED: &str = "queue_host_run_refused";
/// Admission code of a queued run asking for the runner's host state.
pub const QUEUE_HOST_STATE_REFUSED: &str = "queue_host_state_refused";
/// The admission phase of the runner's refusals.
pub const QUEUE_PHASE: &str = "queue";

/// The runner operator's limits on queued runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunnerPolicy {
    /// `ITERION_RUNNER_MAX_TRUST`.
    pub max_trust: Trust,
    /// `ITERION_RUNNER_ALLOW_HOST_RUNS`.
    pub allow_host_runs: bool,
}

impl Default for RunnerPolicy {
    fn default() -> Self {
        Self {
            max_trust: Trust::Untrusted,
            allow_host_runs: false,
        }
    }
}

/// What a queued run asks for, from its submission and its workflow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueuedAsk {
    /// The submission's `--sandbox`.
    pub sandbox_flag: Option<Mode>,
    /// The workflow's `sandbox:` mode, when the block is written.
    pub workflow_sandbox: Option<Mode>,
    /// The submission's `--sandbox-host-state`.
    pub host_state_flag: Option<HostState>,
    /// The workflow's `sandbox.host_state`.
    pub workflow_host_state: Option<HostState>,
}

/// A queued run the runner will not execute.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason} ({code})")]
pub struct Refusal {
    /// [`QUEUE_HOST_RUN_REFUSED`] or [`QUEUE_HOST_STATE_REFUSED`].
    pub code: &'static str,
    /// Why, naming what asked and the variable that would allow it.
    pub reason: String,
}

impl RunnerPolicy {
    /// Read the policy; a bad value names its variable.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, QueueError> {
        let max_trust = match get("ITERION_RUNNER_MAX_TRUST")
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
        {
            None => Trust::Untrusted,
            Some(v) => match v.as_str() {
                "untrusted" => Trust::Untrusted,
                "trusted" => Trust::Trusted,
                _ => {
                    return Err(QueueError::Config {
                        variable: "ITERION_RUNNER_MAX_TRUST",
                        reason: format!("{v:?} is not a trust level (untrusted or trusted)"),
                    });
                }
            },
        };
        let allow_host_runs = match get("ITERION_RUNNER_ALLOW_HOST_RUNS")
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
        {
            None => false,
            Some(v) => match v.as_str() {
                "1" | "true" => true,
                "0" | "false" => false,
                _ => {
                    return Err(QueueError::Config {
                        variable: "ITERION_RUNNER_ALLOW_HOST_RUNS",
                        reason: format!("{v:?} is not 1 or 0"),
                    });
                }
            },
        };
        Ok(Self {
            max_trust,
            allow_host_runs,
        })
    }

    /// Read the policy from the process environment.
    pub fn from_env() -> Result<Self, QueueError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// The trust a queued run gets: what it asked, at most the cap.
    pub fn cap(&self, asked: Trust) -> Trust {
        match (asked, self.max_trust) {
            (Trust::Trusted, Trust::Trusted) => Trust::Trusted,
            _ => Trust::Untrusted,
        }
    }

    /// Whether a queued run asking for `ask` may run here.
    pub fn judge(&self, ask: &QueuedAsk) -> Result<(), Refusal> {
        if self.allow_host_runs {
            return Ok(());
        }
        let no_sandbox = [
            (ask.sandbox_flag, "the submission's --sandbox"),
            (ask.workflow_sandbox, "the workflow's sandbox: block"),
        ];
        for (mode, what) in no_sandbox {
            if mode == Some(Mode::None) {
                return Err(Refusal {
                    code: QUEUE_HOST_RUN_REFUSED,
                    reason: format!(
                        "{what} asks for no sandbox: a queued run never runs on the runner's \
                         host unless its operator sets ITERION_RUNNER_ALLOW_HOST_RUNS=1"
                    ),
                });
            }
        }
        let host_state = [
            (ask.host_state_flag, "the submission's --sandbox-host-state"),
            (ask.workflow_host_state, "the workflow's sandbox.host_state"),
        ];
        for (state, what) in host_state {
            if state == Some(HostState::Auto) {
                return Err(Refusal {
                    code: QUEUE_HOST_STATE_REFUSED,
                    reason: format!(
                        "{what} asks for host_state auto: a queued run never gets the runner's \
                         host state unless its operator sets ITERION_RUNNER_ALLOW_HOST_RUNS=1"
                    ),
                });
            }
        }
        Ok(())
    }

    /// The `host_state` a queued run that passed [`Self::judge`] is pinned
    /// to (`None`: what it asked, the runner allows host runs).
    pub fn pinned_host_state(&self) -> Option<HostState> {
        (!self.allow_host_runs).then_some(HostState::None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn policy(pairs: &[(&str, &str)]) -> Result<RunnerPolicy, QueueError> {
        let m: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        RunnerPolicy::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn defaults_cap_everything_and_allow_no_host_run() {
        let p = policy(&[]).expect("defaults");
        assert_eq!(p, RunnerPolicy::default());
        assert_eq!(p.cap(Trust::Trusted), Trust::Untrusted);
        assert_eq!(p.cap(Trust::Untrusted), Trust::Untrusted);
        assert_eq!(p.pinned_host_state(), Some(HostState::None));
        let trusted = policy(&[("ITERION_RUNNER_MAX_TRUST", "trusted")]).expect("trusted");
        assert_eq!(trusted.cap(Trust::Trusted), Trust::Trusted);
        assert_eq!(trusted.cap(Trust::Untrusted), Trust::Untrusted);
        let open = policy(&[("ITERION_RUNNER_ALLOW_HOST_RUNS", "1")]).expect("open");
        assert!(open.allow_host_runs);
        assert_eq!(open.pinned_host_state(), None);
    }

    #[test]
    fn every_host_ask_is_refused_with_its_code() {
        let p = RunnerPolicy::default();
        let rows = [
            (
                QueuedAsk {
                    sandbox_flag: Some(Mode::None),
                    ..QueuedAsk::default()
                },
                QUEUE_HOST_RUN_REFUSED,
            ),
            (
                QueuedAsk {
                    workflow_sandbox: Some(Mode::None),
                    ..QueuedAsk::default()
                },
                QUEUE_HOST_RUN_REFUSED,
            ),
            (
                QueuedAsk {
                    host_state_flag: Some(HostState::Auto),
                    ..QueuedAsk::default()
                },
                QUEUE_HOST_STATE_REFUSED,
            ),
            (
                QueuedAsk {
                    workflow_host_state: Some(HostState::Auto),
                    ..QueuedAsk::default()
                },
                QUEUE_HOST_STATE_REFUSED,
            ),
        ];
        for (ask, code) in rows {
            let r = p.judge(&ask).expect_err("refused");
            assert_eq!(r.code, code, "{ask:?}");
            assert!(r.reason.contains("ITERION_RUNNER_ALLOW_HOST_RUNS=1"));
            let open = RunnerPolicy {
                allow_host_runs: true,
                ..p
            };
            assert!(open.judge(&ask).is_ok(), "{ask:?}");
        }
        let fine = QueuedAsk {
            sandbox_flag: Some(Mode::Auto),
            workflow_sandbox: Some(Mode::Inline),
            host_state_flag: Some(HostState::None),
            workflow_host_state: None,
        };
        assert!(p.judge(&fine).is_ok());
    }

    #[test]
    fn bad_values_name_their_variable() {
        for (k, v) in [
            ("ITERION_RUNNER_MAX_TRUST", "root"),
            ("ITERION_RUNNER_MAX_TRUST", "Trusted"),
            ("ITERION_RUNNER_ALLOW_HOST_RUNS", "yes"),
            ("ITERION_RUNNER_ALLOW_HOST_RUNS", "2"),
        ] {
            let e = policy(&[(k, v)]).expect_err(v);
            assert!(
                matches!(&e, QueueError::Config { variable, .. } if *variable == k),
                "{e}"
            );
            assert!(e.is_user_input());
        }
    }
}
