//! A run's lease in the KV bucket (upstream `pkg/queue/nats/lock.go`): the
//! key is the run id, taken by an atomic create, kept by compare-and-swap
//! updates on the revision the holder last wrote, and gone by itself when
//! not refreshed for the bucket's TTL (a SIGKILLed runner holds nothing
//! after it). A refresh that finds another revision means someone else
//! holds the run now: the lease is lost, never re-taken blindly.
//!
//! The lease is also what a live runner adopts: see
//! [`crate::runner`] (a run whose lease expired is taken over within one
//! TTL plus one heartbeat, whatever the consumer's ack wait).
//!
//! The lease is also the reaper's liveness signal ([`KvLeaseProbe`]): a
//! run whose key exists is held, whatever its recorded owner says.

use std::time::{Duration, Instant};

use async_nats::jetstream::kv;
use serde::{Deserialize, Serialize};

use iterion_core::RunId;
use iterion_runtime::reap::LeaseProbe;
use iterion_runtime::reap::LeaseState;

use crate::QueueError;

/// What a lease says about its holder (the KV value).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseValue {
    /// The runner (`ITERION_RUNNER_ID`, else host:pid).
    pub runner_id: String,
    /// Stream sequence of the message being executed.
    pub delivery: u64,
    /// Which delivery of it.
    pub attempt: u64,
    /// When this holder took it (RFC 3339).
    pub acquired_at: String,
    /// The delivery's ack subject: what a live runner settles the message
    /// through when it adopts the run of a holder whose lease expired
    /// (JetStream settles a delivery by its stream sequence, so the ack
    /// wait never decides how long a dead holder's run waits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<String>,
}

/// The outcome of a take.
#[derive(Debug)]
pub enum Acquired {
    /// This runner holds it now.
    Held(Box<Lease>),
    /// Someone holds it (`None`: the value could not be read).
    Busy(Option<LeaseValue>),
}

/// A held lease.
#[derive(Debug)]
pub struct Lease {
    kv: kv::Store,
    key: String,
    value: bytes::Bytes,
    revision: u64,
    /// The revision it was created at.
    pub created_revision: u64,
    last_refresh: Instant,
}

/// Why a refresh failed.
#[derive(Debug, thiserror::Error)]
pub enum RefreshError {
    /// Someone else wrote the key, or it expired: the lease is gone.
    #[error("the lease was lost (another revision holds the key, or it expired)")]
    Lost,
    /// NATS did not answer; the lease may still be ours until its TTL.
    #[error("the lease could not be refreshed: {0}")]
    Unreachable(String),
}

/// Take the lease of `run`.
pub async fn acquire(
    store: &kv::Store,
    run: &RunId,
    value: &LeaseValue,
) -> Result<Acquired, QueueError> {
    let body: bytes::Bytes = serde_json::to_vec(value)
        .map_err(|e| QueueError::nats("encode a lease", e))?
        .into();
    match store.create(run.as_str(), body.clone()).await {
        Ok(revision) => Ok(Acquired::Held(Box::new(Lease {
            kv: store.clone(),
            key: run.as_str().to_owned(),
            value: body,
            revision,
            created_revision: revision,
            last_refresh: Instant::now(),
        }))),
        Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {
            let holder = store
                .get(run.as_str())
                .await
                .ok()
                .flatten()
                .and_then(|b| serde_json::from_slice::<LeaseValue>(&b).ok());
            Ok(Acquired::Busy(holder))
        }
        Err(e) => Err(QueueError::nats("take a run's lease", e)),
    }
}

impl Lease {
    /// Compare-and-swap the lease on the revision this holder last wrote.
    pub async fn refresh(&mut self) -> Result<(), RefreshError> {
        match self
            .kv
            .update(self.key.as_str(), self.value.clone(), self.revision)
            .await
        {
            Ok(revision) => {
                self.revision = revision;
                self.last_refresh = Instant::now();
                Ok(())
            }
            Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => Err(RefreshError::Lost),
            Err(e) => Err(RefreshError::Unreachable(e.to_string())),
        }
    }

    /// Since the last successful write.
    pub fn since_refresh(&self) -> Duration {
        self.last_refresh.elapsed()
    }

    /// Let go, only if this holder's revision is still the key's (a lease
    /// lost meanwhile belongs to someone else and is left alone).
    pub async fn release(self) -> Result<(), QueueError> {
        self.kv
            .delete_expect_revision(self.key.as_str(), Some(self.revision))
            .await
            .map_err(|e| QueueError::nats("release a run's lease", e))
    }
}

/// The reaper's lease check in cloud mode: the KV key first.
#[derive(Debug, Clone)]
pub struct KvLeaseProbe {
    /// The bucket.
    pub kv: kv::Store,
}

#[async_trait::async_trait]
impl LeaseProbe for KvLeaseProbe {
    async fn lease(&self, run: &RunId) -> Option<LeaseState> {
        match self.kv.get(run.as_str()).await {
            Ok(Some(_)) => Some(LeaseState::Held),
            // No key: the owner record decides (a local run of this store).
            Ok(None) => None,
            Err(_) => Some(LeaseState::CheckFailed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_names_its_delivery_and_an_older_one_still_reads() {
        let v = LeaseValue {
            runner_id: "r1".into(),
            delivery: 7,
            attempt: 1,
            acquired_at: "2026-01-01T00:00:00Z".into(),
            reply: Some("$JS.ACK.ITERION_RUNS.iterion-runners.1.7.7.0.0".into()),
        };
        let text = serde_json::to_string(&v).expect("encode");
        assert_eq!(
            serde_json::from_str::<LeaseValue>(&text).expect("decode"),
            v
        );
        // Written by a runner before leases named their delivery: read,
        // never adopted (no subject to settle it through).
        let old: LeaseValue =
            serde_json::from_str(r#"{"runner_id":"r0","delivery":3,"attempt":2,"acquired_at":""}"#)
                .expect("old lease");
        assert_eq!(old.reply, None);
    }
}
