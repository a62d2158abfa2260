//! `iterion submit`: record the run `queued` with its submission (one
//! transaction), then publish it with the run id as the message id.
//!
//! Submitting is idempotent per run id: the same id with the same
//! submission is the same run (republished while it is still queued, so a
//! submit whose publish failed is finished by running it again; JetStream's
//! dedup window absorbs the copy), a different submission under a taken id
//! is refused and changes nothing.

use iterion_core::store::{NewRun, RunRecord, Submission};
use iterion_core::{RunStatus, RunStore, StoreError};

use crate::message::RunMessage;
use crate::{Queue, QueueError};

/// What a submit did.
#[derive(Debug, Clone)]
pub struct Submitted {
    /// The run as the store holds it.
    pub record: RunRecord,
    /// The run id was already submitted with this submission.
    pub existing: bool,
    /// A message was published for it by this call.
    pub published: bool,
}

/// Why a submit was refused.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The id names another run.
    #[error(
        "run {run} already exists with another workflow or other variables; nothing was queued"
    )]
    Conflict {
        /// The id.
        run: String,
    },
    /// The queue failed.
    #[error(transparent)]
    Queue(#[from] QueueError),
}

impl SubmitError {
    /// Stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Conflict { .. } => "QUEUE_SUBMIT_CONFLICT",
            Self::Queue(e) => e.code(),
        }
    }
}

/// Two submissions of one run: the same workflow, variables and settings
/// (the time of submission aside).
fn same(a: &Submission, b: &Submission) -> bool {
    a.source == b.source
        && a.vars == b.vars
        && a.settings == b.settings
        && a.timeout_ms == b.timeout_ms
}

/// Record and publish one run.
pub async fn submit(
    queue: &Queue,
    store: &dyn RunStore,
    run: NewRun,
    submission: Submission,
) -> Result<Submitted, SubmitError> {
    let id = run.id.clone();
    let (record, existing) = match store.submit_run(run, submission.clone()).await {
        Ok(r) => (r, false),
        Err(StoreError::RunExists(_)) => {
            let theirs = store.load_submission(&id).await.map_err(QueueError::from)?;
            let record = store
                .load_run(&id)
                .await
                .map_err(QueueError::from)?
                .ok_or_else(|| QueueError::from(StoreError::RunNotFound(id.clone())))?;
            match theirs {
                Some(t) if same(&t, &submission) => (record, true),
                _ => {
                    return Err(SubmitError::Conflict {
                        run: id.to_string(),
                    });
                }
            }
        }
        Err(e) => return Err(QueueError::from(e).into()),
    };
    if record.status != RunStatus::Queued {
        // Already taken (or settled): no second message.
        return Ok(Submitted {
            record,
            existing,
            published: false,
        });
    }
    let message = RunMessage::new(id, submission.submitted_at);
    queue.publish_run(&message).await?;
    Ok(Submitted {
        record,
        existing,
        published: true,
    })
}
