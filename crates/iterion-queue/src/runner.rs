//! `iterion runner`: the loop that drains the queue (upstream
//! `pkg/runner/loop.go`, with its defects #703, #770 and #669 fixed).
//!
//! Per delivery: decode the message (a malformed one is dead-lettered with
//! its reason, never retried), load the run and its submission (an unknown
//! run is dead-lettered; one already settled is acked), listen on the
//! run's cancel subject, take the run's lease (held by a live sibling: a
//! delayed nak, upstream #770), record `run_claimed`, and hand the run to
//! the [`RunExecutor`] — fresh from `queued`, resumed from its checkpoint
//! when it is `failed_resumable`, or taken over (marked interrupted, then
//! resumed) when it still says `running` while nobody holds its lease. On
//! every heartbeat the lease is refreshed by compare-and-swap **and** the
//! message gets an in-progress ack, so a run longer than the ack wait is
//! never redelivered while its runner lives (upstream #703). A lost lease
//! interrupts the run (its sandbox is torn down) and naks. The ending is
//! settled by the one table ([`crate::disposition::settle`]):
//! `run_released` is recorded, the lease let go, then the message acked,
//! nakked or dead-lettered and termed.
//!
//! Liveness is the lease, not the ack wait (issue 31 item 8): the lease
//! names the delivery's ack subject, and every runner keeps the values of
//! the leases it sees ([`watch_leases`], every half heartbeat). When one
//! of them expires while its run still says `running` (its runner died),
//! a live runner adopts the delivery in a slot of its own (one adopted run
//! beyond `--concurrency`, so it never waits for a run to end): it takes
//! the lease (one wins), keeps the message with in-progress acks on that
//! subject, takes the run over (interrupted, resumed) and settles the
//! message there. A dead holder's run is thus claimed again within one
//! lease TTL plus half a heartbeat, whatever `ITERION_RUNNER_ACK_WAIT`
//! says; a lease no live runner saw (every runner restarted) still falls
//! back to the ack wait's redelivery.
//!
//! Each runner pulls one message per free slot (`--concurrency`, default
//! 1). On shutdown it stops pulling, lets the runs under way finish for
//! the drain grace, then interrupts what is left (handed back with a nak)
//! and returns. A reaper pass runs on a ticker, lease-first.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::message::{AckKind, Acker};
use async_nats::jetstream::{Message, kv};
use futures_util::StreamExt;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use iterion_core::store::{RunRecord, Submission};
use iterion_core::{EventDraft, EventKind, RunId, RunStatus, RunStore, StoreError};
use iterion_runtime::reap::LeaseProbe;
use iterion_runtime::{Interrupt, RunOutcome};

use crate::config::CloudSettings;
use crate::disposition::{Action, Attempt, Delays, Ending, settle};
use crate::lease::{self, Acquired, KvLeaseProbe, Lease, LeaseValue, RefreshError};
use crate::message::RunMessage;
use crate::topology::DeadLetter;
use crate::{Queue, QueueError};

/// Where a claimed run starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// From the entry (the run is `queued`).
    Fresh,
    /// From its stored progress (`failed_resumable`, or taken over).
    Resume,
}

/// One claimed run, handed to the executor.
#[derive(Debug)]
pub struct Job {
    /// The run as loaded after its lease was taken.
    pub record: RunRecord,
    /// What `iterion submit` recorded.
    pub submission: Submission,
    /// Fresh or resumed.
    pub start: Start,
    /// Cancelled by `iterion cancel` (a user's cancel), or by the runner
    /// with a reason in [`Job::interrupt`] (lease lost, drain).
    pub cancel: CancellationToken,
    /// The platform's reasons to stop the run.
    pub interrupt: Interrupt,
}

/// Why a job did not run to an outcome.
#[derive(Debug, thiserror::Error)]
pub enum ExecuteError {
    /// The store failed (infrastructure: retried).
    #[error("run store: {0}")]
    Store(#[from] StoreError),
    /// This run cannot run on any runner (its source no longer compiles,
    /// its progress cannot be resumed): dead-lettered with the reason.
    #[error("{reason}")]
    Refused {
        /// Why.
        reason: String,
    },
}

/// Executes claimed runs with the engine and sandbox path of `iterion run`
/// (the CLI implements it), and reaps.
#[async_trait::async_trait]
pub trait RunExecutor: Send + Sync + 'static {
    /// Run the job to an outcome (a terminal status, or a pause).
    async fn execute(&self, job: Job) -> Result<RunOutcome, ExecuteError>;
    /// One reaper pass over this host's drivers, lease-first with `probe`.
    async fn reap(&self, probe: &dyn LeaseProbe);
}

/// The runner.
pub struct Runner {
    queue: Queue,
    kv: async_nats::jetstream::kv::Store,
    store: Arc<dyn RunStore>,
    executor: Arc<dyn RunExecutor>,
    runner_id: String,
    concurrency: usize,
    /// Runs under way, by stream sequence: what a drain interrupts.
    in_flight: Arc<Mutex<HashMap<u64, (Interrupt, CancellationToken)>>>,
}

/// `ITERION_RUNNER_ID`, else `<host>-<pid>`.
pub fn runner_id() -> String {
    std::env::var("ITERION_RUNNER_ID")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| {
            let host = iterion_runtime::owner::hostname().unwrap_or_else(|_| "runner".into());
            format!("{host}-{}", std::process::id())
        })
}

/// What a delivery left to settle.
struct Worked {
    run: Option<RunId>,
    ending: Ending,
    /// The lease, when this runner took it (released after `run_released`).
    held: Option<Held>,
}

struct Held {
    lease: Box<Lease>,
    lost: bool,
    /// `run_claimed` was attempted under it (else no `run_released`: an
    /// adopted lease let go before its run was claimed).
    claimed: bool,
}

impl Held {
    fn unclaimed(lease: Option<Box<Lease>>) -> Option<Held> {
        lease.map(|lease| Held {
            lease,
            lost: false,
            claimed: false,
        })
    }
}

fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

impl Runner {
    /// A runner over `queue` (opened with [`crate::topology::Role::Runner`])
    /// and `store`.
    pub fn new(
        queue: Queue,
        store: Arc<dyn RunStore>,
        executor: Arc<dyn RunExecutor>,
        runner_id: String,
        concurrency: usize,
    ) -> Result<Self, QueueError> {
        let kv = queue.kv.clone().ok_or_else(|| QueueError::Config {
            variable: "ITERION_NATS_KV_BUCKET",
            reason: "a runner needs the lease bucket (open the queue as a runner)".to_owned(),
        })?;
        Ok(Self {
            queue,
            kv,
            store,
            executor,
            runner_id,
            concurrency: concurrency.max(1),
            in_flight: Arc::new(Mutex::new(HashMap::new())),
        })
    }

    fn settings(&self) -> &CloudSettings {
        &self.queue.settings
    }

    /// Drain the queue until `shutdown`, then hand back what is left after
    /// the drain grace. Errors only when the consumer cannot be opened.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), QueueError> {
        let consumer = self.queue.consumer().await?;
        let this = Arc::new(self);
        let slots = Arc::new(Semaphore::new(this.concurrency));
        let tasks = TaskTracker::new();
        let reaper = tokio::spawn(reap_on_a_ticker(Arc::clone(&this), shutdown.clone()));
        let (adopt_tx, adoptions) = mpsc::unbounded_channel();
        let watcher = tokio::spawn(watch_leases(Arc::clone(&this), adopt_tx, shutdown.clone()));
        let adopter = tokio::spawn(adopt_in_turn(
            Arc::clone(&this),
            adoptions,
            tasks.clone(),
            shutdown.clone(),
        ));
        tracing::info!(runner = %this.runner_id, concurrency = this.concurrency, "runner started");
        loop {
            let permit = tokio::select! {
                p = Arc::clone(&slots).acquire_owned() => match p {
                    Ok(p) => p,
                    Err(_) => break,
                },
                () = shutdown.cancelled() => break,
            };
            let batch = consumer
                .batch()
                .max_messages(1)
                .expires(Duration::from_secs(5))
                .messages()
                .await;
            let mut batch = match batch {
                Ok(b) => b,
                Err(e) => {
                    // NATS away (restarting): the client reconnects; wait.
                    tracing::warn!(error = %e, "pull request failed; retrying");
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                        () = shutdown.cancelled() => break,
                    }
                }
            };
            let next = tokio::select! {
                m = batch.next() => m,
                () = shutdown.cancelled() => break,
            };
            match next {
                None => {}
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "pull ended without a message");
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_millis(200)) => {}
                        () = shutdown.cancelled() => break,
                    }
                }
                Some(Ok(msg)) => {
                    let this = Arc::clone(&this);
                    tasks.spawn(async move {
                        this.handle(msg).await;
                        drop(permit);
                    });
                }
            }
        }
        tasks.close();
        let grace = this.settings().drain_grace;
        tracing::info!(runs = tasks.len(), ?grace, "runner draining");
        if tokio::time::timeout(grace, tasks.wait()).await.is_err() {
            let left: Vec<_> = this
                .in_flight
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .values()
                .cloned()
                .collect();
            tracing::warn!(
                runs = left.len(),
                "drain grace expired: handing the runs back"
            );
            for (interrupt, cancel) in left {
                interrupt.interrupt("the runner is shutting down (drain grace expired)", &cancel);
            }
            tasks.wait().await;
        }
        reaper.abort();
        watcher.abort();
        adopter.abort();
        tracing::info!(runner = %this.runner_id, "runner stopped");
        Ok(())
    }

    /// One delivery, start to settled.
    async fn handle(&self, msg: Message) {
        let (seq, delivered) = match msg.info() {
            Ok(i) => (i.stream_sequence, u64::try_from(i.delivered).unwrap_or(1)),
            Err(_) => (0, 1),
        };
        let attempt = Attempt {
            delivered,
            max_deliver: self.settings().max_deliver,
        };
        let payload = msg.message.payload.clone();
        let reply = msg.message.reply.as_ref().map(ToString::to_string);
        let (_, acker) = msg.split();
        let worked = self.work(&payload, seq, attempt, &acker, reply, None).await;
        self.finish(worked, &payload, seq, attempt, &acker).await;
    }

    /// Adopt the delivery of a runner whose lease expired (see the module
    /// docs). Losing the race for the lease leaves it alone; once held, the
    /// delivery is worked as any other: a run the reaper already marked
    /// interrupted is resumed, one that ended before its runner died is
    /// only acked.
    async fn adopt(&self, run: RunId, dead: LeaseValue) {
        let Some(reply) = dead.reply.clone() else {
            return;
        };
        let attempt = Attempt {
            delivered: dead.attempt.saturating_add(1),
            max_deliver: self.settings().max_deliver,
        };
        let value = LeaseValue {
            runner_id: self.runner_id.clone(),
            delivery: dead.delivery,
            attempt: attempt.delivered,
            acquired_at: now_rfc3339(),
            reply: Some(reply.clone()),
        };
        let lease = match lease::acquire(&self.kv, &run, &value).await {
            Ok(Acquired::Held(l)) => l,
            // Someone else adopted it, or JetStream redelivered it.
            Ok(Acquired::Busy(_)) | Err(_) => return,
        };
        tracing::info!(run = %run, delivery = dead.delivery, from = %dead.runner_id,
            "adopting the delivery of a runner whose lease expired");
        let acker = Acker::new(self.queue.js.clone(), Some(reply.clone().into()));
        // Keep the message from a redelivery while the run is taken over.
        if let Err(e) = acker.ack_with(AckKind::Progress).await {
            tracing::warn!(run = %run, error = %e, "in-progress ack of the adopted delivery failed");
        }
        let payload: bytes::Bytes = RunMessage::new(run, time::OffsetDateTime::now_utc())
            .encode()
            .into();
        let worked = self
            .work(
                &payload,
                dead.delivery,
                attempt,
                &acker,
                Some(reply),
                Some(lease),
            )
            .await;
        self.finish(worked, &payload, dead.delivery, attempt, &acker)
            .await;
    }

    /// Record the release, let the lease go and settle the message.
    async fn finish(
        &self,
        worked: Worked,
        payload: &[u8],
        seq: u64,
        attempt: Attempt,
        acker: &Acker,
    ) {
        let delivered = attempt.delivered;
        let delays = Delays {
            infrastructure: self.settings().nak_delay,
            lease_ttl: self.settings().lease_ttl,
        };
        let action = settle(&worked.ending, attempt, delays);
        let reason = match &worked.ending {
            Ending::Run {
                status, failure, ..
            } => match failure {
                Some(f) => format!("{status} ({})", f.code),
                None => status.to_string(),
            },
            Ending::LeaseHeld { holder } => format!("lease held by {holder}"),
            Ending::Unavailable { reason } | Ending::Poison { reason } => reason.clone(),
        };
        tracing::info!(run = ?worked.run, delivery = seq, attempt = delivered,
            action = action.word(), %reason, "delivery settled");
        if let Some(held) = worked.held {
            if let Some(run) = worked.run.as_ref().filter(|_| held.claimed) {
                let draft: EventDraft = EventKind::RunReleased {
                    runner_id: self.runner_id.clone(),
                    delivery: seq,
                    attempt: delivered,
                    action: action.word().to_owned(),
                    reason: reason.clone(),
                }
                .into();
                if let Err(e) = self.store.append_event(run, draft, None).await {
                    tracing::warn!(run = %run, error = %e, "run_released event failed");
                }
            }
            if !held.lost
                && let Err(e) = held.lease.release().await
            {
                // It expires by itself within the TTL.
                tracing::warn!(run = ?worked.run, error = %e, "lease release failed");
            }
        }
        self.perform(action, &worked.run, payload, seq, delivered, acker)
            .await;
    }

    async fn perform(
        &self,
        action: Action,
        run: &Option<RunId>,
        payload: &[u8],
        seq: u64,
        delivered: u64,
        acker: &Acker,
    ) {
        let result = match action {
            Action::Ack => acker.double_ack_with(AckKind::Ack).await,
            Action::Nak { delay } => {
                let delay = (!delay.is_zero()).then_some(delay);
                acker.ack_with(AckKind::Nak(delay)).await
            }
            Action::DeadLetter { reason } => {
                let head = &payload[..payload.len().min(4096)];
                let letter = DeadLetter {
                    run_id: run.as_ref().map(ToString::to_string),
                    reason,
                    stream_sequence: seq,
                    deliveries: delivered,
                    runner_id: self.runner_id.clone(),
                    payload: String::from_utf8_lossy(head).into_owned(),
                };
                match self.queue.publish_dead_letter(&letter).await {
                    // Termed only once the DLQ holds it.
                    Ok(()) => acker.double_ack_with(AckKind::Term).await,
                    Err(e) => {
                        tracing::error!(run = ?run, error = %e,
                            "dead letter not stored; the message stays for redelivery");
                        acker
                            .ack_with(AckKind::Nak(Some(self.settings().nak_delay)))
                            .await
                    }
                }
            }
        };
        if let Err(e) = result {
            // Unsettled: JetStream redelivers it after the ack wait, and the
            // next runner settles it from what the store then says.
            tracing::warn!(run = ?run, delivery = seq, error = %e, "settling the delivery failed");
        }
    }

    /// Everything up to the ending of a delivery. `reply`: the delivery's
    /// ack subject (kept in the lease); `adopted`: the lease already taken
    /// when the delivery is adopted from a dead runner (let go unclaimed
    /// when the run turns out to need nothing).
    #[allow(clippy::too_many_arguments)] // one delivery's whole context
    async fn work(
        &self,
        payload: &[u8],
        seq: u64,
        attempt: Attempt,
        acker: &Acker,
        reply: Option<String>,
        adopted: Option<Box<Lease>>,
    ) -> Worked {
        let unavailable = |run: Option<RunId>, reason: String, held: Option<Held>| Worked {
            run,
            ending: Ending::Unavailable { reason },
            held,
        };
        let message = match RunMessage::decode(payload) {
            Ok(m) => m,
            Err(e) => {
                return Worked {
                    run: None,
                    ending: Ending::Poison {
                        reason: format!("malformed message: {}", e.reason),
                    },
                    held: Held::unclaimed(adopted),
                };
            }
        };
        let id = message.run_id.clone();
        let record = match self.store.load_run(&id).await {
            Err(e) => {
                return unavailable(
                    Some(id),
                    format!("run store: {e} ({})", e.code()),
                    Held::unclaimed(adopted),
                );
            }
            Ok(None) => {
                return Worked {
                    run: Some(id.clone()),
                    ending: Ending::Poison {
                        reason: format!("unknown run: {id} is not in the store"),
                    },
                    held: Held::unclaimed(adopted),
                };
            }
            Ok(Some(r)) => r,
        };
        if !matches!(
            record.status,
            RunStatus::Queued | RunStatus::Running | RunStatus::FailedResumable
        ) {
            // Settled already (a duplicate or late delivery): nothing to do.
            return Worked {
                run: Some(id),
                ending: Ending::Run {
                    status: record.status,
                    failure: record.failure,
                    interrupted: false,
                },
                held: Held::unclaimed(adopted),
            };
        }
        let submission = match self.store.load_submission(&id).await {
            Err(e) => {
                return unavailable(
                    Some(id),
                    format!("run store: {e} ({})", e.code()),
                    Held::unclaimed(adopted),
                );
            }
            Ok(None) => {
                return Worked {
                    run: Some(id.clone()),
                    ending: Ending::Poison {
                        reason: format!(
                            "run {id} was not submitted (no submission in the store): a local run is not the queue's"
                        ),
                    },
                    held: Held::unclaimed(adopted),
                };
            }
            Ok(Some(s)) => s,
        };
        // Listen for `iterion cancel` before taking the lease: a cancel
        // published once the run is claimed is never missed.
        let cancel = CancellationToken::new();
        let listener = match self
            .queue
            .client
            .subscribe(CloudSettings::cancel_subject(&id))
            .await
        {
            Ok(sub) => tokio::spawn(answer_cancels(
                sub,
                self.queue.client.clone(),
                cancel.clone(),
            )),
            Err(e) => {
                return unavailable(
                    Some(id),
                    format!("cannot listen for cancels: {e}"),
                    Held::unclaimed(adopted),
                );
            }
        };
        let worked = self
            .claimed(id, submission, seq, attempt, acker, cancel, reply, adopted)
            .await;
        listener.abort();
        worked
    }

    #[allow(clippy::too_many_arguments)] // one delivery's whole context
    async fn claimed(
        &self,
        id: RunId,
        submission: Submission,
        seq: u64,
        attempt: Attempt,
        acker: &Acker,
        cancel: CancellationToken,
        reply: Option<String>,
        adopted: Option<Box<Lease>>,
    ) -> Worked {
        let lease = match adopted {
            Some(lease) => lease,
            None => {
                let value = LeaseValue {
                    runner_id: self.runner_id.clone(),
                    delivery: seq,
                    attempt: attempt.delivered,
                    acquired_at: now_rfc3339(),
                    reply,
                };
                match lease::acquire(&self.kv, &id, &value).await {
                    Err(e) => {
                        return Worked {
                            run: Some(id),
                            ending: Ending::Unavailable {
                                reason: e.to_string(),
                            },
                            held: None,
                        };
                    }
                    Ok(Acquired::Busy(holder)) => {
                        return Worked {
                            run: Some(id),
                            ending: Ending::LeaseHeld {
                                holder: holder.map_or_else(
                                    || "another runner".to_owned(),
                                    |h| format!("{} (delivery {})", h.runner_id, h.delivery),
                                ),
                            },
                            held: None,
                        };
                    }
                    Ok(Acquired::Held(l)) => l,
                }
            }
        };
        let mut held = Held {
            lease,
            lost: false,
            claimed: true,
        };
        let ending = self
            .execute_held(&id, &mut held, submission, seq, attempt, acker, cancel)
            .await;
        Worked {
            run: Some(id),
            ending,
            held: Some(held),
        }
    }

    #[allow(clippy::too_many_arguments)] // one delivery's whole context
    async fn execute_held(
        &self,
        id: &RunId,
        held: &mut Held,
        submission: Submission,
        seq: u64,
        attempt: Attempt,
        acker: &Acker,
        cancel: CancellationToken,
    ) -> Ending {
        let store_down = |e: StoreError| Ending::Unavailable {
            reason: format!("run store: {e} ({})", e.code()),
        };
        // What the previous holder left, read under the lease.
        let record = match self.store.load_run(id).await {
            Ok(Some(r)) => r,
            Ok(None) => {
                return Ending::Poison {
                    reason: format!("unknown run: {id} is not in the store"),
                };
            }
            Err(e) => return store_down(e),
        };
        let claimed: EventDraft = EventKind::RunClaimed {
            runner_id: self.runner_id.clone(),
            delivery: seq,
            attempt: attempt.delivered,
            lease_revision: held.lease.created_revision,
        }
        .into();
        if let Err(e) = self.store.append_event(id, claimed, None).await {
            return store_down(e);
        }
        tracing::info!(run = %id, delivery = seq, attempt = attempt.delivered, "run claimed");
        let (start, record) = match record.status {
            RunStatus::Queued => (Start::Fresh, record),
            RunStatus::FailedResumable => (Start::Resume, record),
            RunStatus::Running => {
                // Its runner is gone: the lease it held expired (we hold it).
                let reason = "taken over: the runner that held the run's lease is gone";
                match iterion_runtime::reap::mark_interrupted(self.store.as_ref(), &record, reason)
                    .await
                {
                    Ok(RunStatus::FailedResumable) => match self.store.load_run(id).await {
                        Ok(Some(r)) => (Start::Resume, r),
                        Ok(None) => {
                            return Ending::Poison {
                                reason: format!("unknown run: {id} is not in the store"),
                            };
                        }
                        Err(e) => return store_down(e),
                    },
                    Ok(status) => {
                        return Ending::Run {
                            status,
                            failure: None,
                            interrupted: false,
                        };
                    }
                    Err(reason) => return Ending::Unavailable { reason },
                }
            }
            status => {
                return Ending::Run {
                    status,
                    failure: record.failure,
                    interrupted: false,
                };
            }
        };
        let interrupt = Interrupt::new();
        self.in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(seq, (interrupt.clone(), cancel.clone()));
        let job = Job {
            record,
            submission,
            start,
            cancel: cancel.clone(),
            interrupt: interrupt.clone(),
        };
        let outcome = self
            .with_heartbeat(held, acker, &interrupt, &cancel, self.executor.execute(job))
            .await;
        self.in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&seq);
        match outcome {
            Ok(o) => Ending::Run {
                status: o.status,
                failure: o.failure,
                interrupted: interrupt.reason().is_some(),
            },
            Err(ExecuteError::Store(e)) => store_down(e),
            Err(ExecuteError::Refused { reason }) => Ending::Poison { reason },
        }
    }

    /// Drive `work` while refreshing the lease and the message's ack wait
    /// on every heartbeat; a lost lease interrupts the run.
    async fn with_heartbeat<F: std::future::Future<Output = T>, T>(
        &self,
        held: &mut Held,
        acker: &Acker,
        interrupt: &Interrupt,
        cancel: &CancellationToken,
        work: F,
    ) -> T {
        let s = self.settings();
        let mut tick = tokio::time::interval(s.heartbeat);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        tokio::pin!(work);
        loop {
            tokio::select! {
                out = &mut work => return out,
                _ = tick.tick() => {
                    if held.lost {
                        continue;
                    }
                    match held.lease.refresh().await {
                        Ok(()) => {}
                        Err(RefreshError::Lost) => {
                            held.lost = true;
                            tracing::warn!("lease lost: interrupting the run");
                            interrupt.interrupt("the run's lease was lost", cancel);
                        }
                        Err(RefreshError::Unreachable(e)) => {
                            // Ours until its TTL; give up before a sibling
                            // could take it.
                            if held.lease.since_refresh() + s.heartbeat >= s.lease_ttl {
                                held.lost = true;
                                tracing::warn!(error = %e, "lease not refreshed in time: interrupting the run");
                                interrupt.interrupt(
                                    format!("the run's lease could not be refreshed: {e}"),
                                    cancel,
                                );
                            } else {
                                tracing::warn!(error = %e, "lease refresh failed; retrying");
                            }
                        }
                    }
                    // The in-progress ack (upstream #703: without it a run
                    // longer than the ack wait is redelivered while alive).
                    if let Err(e) = acker.ack_with(AckKind::Progress).await {
                        tracing::warn!(error = %e, "in-progress ack failed");
                    }
                }
            }
        }
    }
}

/// Answer `iterion cancel` on the run's subject: cancel the run's token and
/// reply, so the canceller knows a runner heard it.
async fn answer_cancels(
    mut sub: async_nats::Subscriber,
    client: async_nats::Client,
    cancel: CancellationToken,
) {
    while let Some(m) = sub.next().await {
        cancel.cancel();
        if let Some(reply) = m.reply {
            let _ = client.publish(reply, "cancelling".into()).await;
        }
    }
}

/// Adopt the deliveries [`watch_leases`] hands over, one at a time, in a
/// slot of their own: a dead holder's run does not wait for this runner's
/// runs to end (that wait is unbounded), so a runner may run one adopted
/// run beyond `--concurrency`. Stops taking new ones on shutdown (the
/// adopted run under way drains with the others).
async fn adopt_in_turn(
    runner: Arc<Runner>,
    mut adoptions: mpsc::UnboundedReceiver<(RunId, LeaseValue)>,
    tasks: TaskTracker,
    shutdown: CancellationToken,
) {
    let slot = Arc::new(Semaphore::new(1));
    loop {
        let permit = tokio::select! {
            p = Arc::clone(&slot).acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return,
            },
            () = shutdown.cancelled() => return,
        };
        let next = tokio::select! {
            n = adoptions.recv() => n,
            () = shutdown.cancelled() => return,
        };
        let Some((run, dead)) = next else {
            return;
        };
        let runner = Arc::clone(&runner);
        tasks.spawn(async move {
            runner.adopt(run, dead).await;
            drop(permit);
        });
    }
}

/// Keep the value of every lease this runner sees, and hand the run of
/// one that expired (not let go: its holder died) to the runner loop for
/// adoption. Every half heartbeat: list the bucket's keys, read each new
/// or changed one, and check the remembered ones that vanished. A delete
/// marker is a release (forgotten); a key gone without one expired. A
/// lease this process holds itself is never handed over; NATS away skips
/// the pass (nothing is decided on a failed read).
async fn watch_leases(
    runner: Arc<Runner>,
    adopt: mpsc::UnboundedSender<(RunId, LeaseValue)>,
    shutdown: CancellationToken,
) {
    let period = (runner.settings().heartbeat / 2).max(Duration::from_millis(200));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut known: HashMap<String, (u64, LeaseValue)> = HashMap::new();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = shutdown.cancelled() => return,
        }
        let Ok(keys) = runner.kv.keys().await else {
            continue;
        };
        let Ok(present) = keys
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<HashSet<String>, _>>()
        else {
            continue;
        };
        let mine: HashSet<u64> = runner
            .in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .copied()
            .collect();
        for key in present
            .iter()
            .chain(known.keys().cloned().collect::<Vec<_>>().iter())
        {
            let entry = match runner.kv.entry(key.as_str()).await {
                Ok(e) => e,
                Err(_) => continue,
            };
            match entry {
                Some(e) if e.operation == kv::Operation::Put => {
                    if known.get(key).is_none_or(|(rev, _)| *rev != e.revision)
                        && let Ok(v) = serde_json::from_slice::<LeaseValue>(&e.value)
                    {
                        known.insert(key.clone(), (e.revision, v));
                    }
                }
                // Let go: a release, never an adoption.
                Some(_) => {
                    known.remove(key);
                }
                None => {
                    let Some((_, value)) = known.remove(key) else {
                        continue;
                    };
                    if mine.contains(&value.delivery) || value.reply.is_none() {
                        continue;
                    }
                    if let Ok(run) = RunId::parse(key) {
                        tracing::info!(run = %run, holder = %value.runner_id,
                            "a run's lease expired: adopting its delivery");
                        let _ = adopt.send((run, value));
                    }
                }
            }
        }
    }
}

async fn reap_on_a_ticker(runner: Arc<Runner>, shutdown: CancellationToken) {
    let probe = KvLeaseProbe {
        kv: runner.kv.clone(),
    };
    let mut tick = tokio::time::interval(runner.settings().reap_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = shutdown.cancelled() => return,
        }
        // Bounded: a pass never delays the next tick forever.
        let pass = runner.executor.reap(&probe);
        if tokio::time::timeout(Duration::from_secs(60), pass)
            .await
            .is_err()
        {
            tracing::warn!("reaper pass took over 60s; abandoned");
        }
    }
}
