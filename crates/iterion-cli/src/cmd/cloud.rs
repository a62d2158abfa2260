//! What the cloud verbs share (`submit`, `runner`, `cancel`): the cloud
//! settings, the PostgreSQL store and the queue, each opened with a
//! refusal that names its variable and the cause (exit 2) when it is
//! missing, wrong or unreachable at start.

use std::sync::Arc;

use iterion_core::RunStore;
use iterion_queue::topology::Role;
use iterion_queue::{CloudSettings, Queue, QueueError};

use crate::exit::UserInputError;
use crate::stores;

/// The settings, or bad input naming the variable.
pub fn settings(verb: &str) -> anyhow::Result<CloudSettings> {
    CloudSettings::from_env(verb).map_err(queue_error)
}

/// A queue error for the user: the operator's settings are bad input.
pub fn queue_error(e: QueueError) -> anyhow::Error {
    if e.is_user_input() {
        UserInputError::new(format!("{e} [{}]", e.code())).into()
    } else {
        anyhow::Error::new(e)
    }
}

/// The PostgreSQL store, reachable now, or bad input naming
/// `ITERION_STORE` and the cause.
pub async fn store() -> anyhow::Result<Arc<dyn RunStore>> {
    stores::open_from_env().await.map_err(|e| {
        let causes: Vec<String> = e.chain().map(ToString::to_string).collect();
        UserInputError::new(format!(
            "ITERION_STORE: cannot open the PostgreSQL store: {}",
            causes.join(": ")
        ))
        .into()
    })
}

/// The queue (streams and bucket in place), or bad input naming
/// `ITERION_NATS_URL` / the incompatible object.
pub async fn queue(settings: &CloudSettings, role: Role) -> anyhow::Result<Queue> {
    Queue::open(settings, role).await.map_err(queue_error)
}
