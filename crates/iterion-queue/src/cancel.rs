//! `iterion cancel` of a submitted run. A run some runner holds (its lease
//! exists) is asked on its core NATS subject `iterion.cancel.<run id>`, as
//! upstream; the runner answers, stops the run (its sandbox is removed) and
//! records `cancelled`. A run nobody holds (queued, waiting for a
//! redelivery, or left `running` by a runner that died) is cancelled in the
//! store by compare-and-set; a runner that delivers it later finds it
//! cancelled and acks. Every step re-reads the store, so a race with a
//! runner claiming the run ends in one of the two paths, never both.

use std::time::{Duration, Instant};

use iterion_core::store::{Failure, Transition};
use iterion_core::{EventDraft, EventKind, FailureCode, RunId, RunStatus, RunStore, StoreError};

use crate::config::CloudSettings;
use crate::{Queue, QueueError};

/// How a cancel ended.
#[derive(Debug, thiserror::Error)]
pub enum CancelError {
    /// No such run.
    #[error("no run {0} in this store")]
    UnknownRun(RunId),
    /// The run ended otherwise before it could be cancelled.
    #[error("run {run} is already {status}; nothing to cancel")]
    AlreadyOver {
        /// The run.
        run: RunId,
        /// Its status.
        status: RunStatus,
    },
    /// The runner holding the run never answered.
    #[error(
        "the runner holding run {run}'s lease did not answer the cancel within {waited:?}; the run is still {status}"
    )]
    NoAnswer {
        /// The run.
        run: RunId,
        /// Its status.
        status: RunStatus,
        /// How long it was asked.
        waited: Duration,
    },
    /// The queue or the store failed.
    #[error(transparent)]
    Queue(#[from] QueueError),
}

impl CancelError {
    /// Stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::UnknownRun(_) => "CANCEL_UNKNOWN_RUN",
            Self::AlreadyOver { .. } => "CANCEL_ALREADY_OVER",
            Self::NoAnswer { .. } => "CANCEL_NO_ANSWER",
            Self::Queue(e) => e.code(),
        }
    }
}

/// Cancel a run in the store when nobody executes it: compare-and-set from
/// `from`, then `run_cancelled`. `Ok(false)`: it moved meanwhile.
pub async fn cancel_in_store(
    store: &dyn RunStore,
    id: &RunId,
    from: RunStatus,
    revision: u64,
    reason: &str,
) -> Result<bool, StoreError> {
    let moved = store
        .transition(
            id,
            Transition {
                from,
                expected_revision: Some(revision),
                to: RunStatus::Cancelled,
                failure: Some(Failure::new(FailureCode::Cancelled, reason)),
            },
        )
        .await;
    match moved {
        Ok(_) => {
            let draft: EventDraft = EventKind::RunCancelled {
                reason: reason.to_owned(),
            }
            .into();
            if let Err(e) = store.append_event(id, draft, None).await {
                tracing::warn!(run = %id, error = %e, "run_cancelled event failed");
            }
            Ok(true)
        }
        Err(StoreError::StaleTransition { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Cancel submitted run `id`; returns its final status once terminal.
pub async fn cancel(
    queue: &Queue,
    store: &dyn RunStore,
    id: &RunId,
) -> Result<RunStatus, CancelError> {
    let s = &queue.settings;
    // Long enough for a holder's lease to lapse if its runner died.
    let waited = s.lease_ttl + s.heartbeat + Duration::from_secs(30);
    let deadline = Instant::now() + waited;
    let reason = "cancelled by iterion cancel";
    let mut asked = false;
    loop {
        let record = store
            .load_run(id)
            .await
            .map_err(QueueError::from)?
            .ok_or_else(|| CancelError::UnknownRun(id.clone()))?;
        if record.status.is_terminal() && record.status != RunStatus::FailedResumable {
            if record.status == RunStatus::Cancelled || asked {
                return Ok(record.status);
            }
            return Err(CancelError::AlreadyOver {
                run: id.clone(),
                status: record.status,
            });
        }
        // No bucket: no runner ever started, so nobody holds it.
        let held = match &queue.kv {
            None => false,
            Some(kv) => kv
                .get(id.as_str())
                .await
                .map_err(|e| QueueError::nats("read a run's lease", e))?
                .is_some(),
        };
        if held {
            // Ask the holder (again until it answers; its subscription is
            // made before it takes the lease).
            if !asked {
                let ask = queue
                    .client
                    .request(CloudSettings::cancel_subject(id), "".into());
                asked = matches!(
                    tokio::time::timeout(Duration::from_secs(3), ask).await,
                    Ok(Ok(_))
                );
            }
        } else if cancel_in_store(store, id, record.status, record.revision, reason)
            .await
            .map_err(QueueError::from)?
        {
            return Ok(RunStatus::Cancelled);
        }
        if Instant::now() >= deadline {
            return Err(CancelError::NoAnswer {
                run: id.clone(),
                status: record.status,
                waited,
            });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
