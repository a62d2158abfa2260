//! The queue's objects on the NATS server and the connection to it: the
//! work-queue stream of runs, the dead-letter stream, the lease bucket and
//! (for runners) the one durable pull consumer every runner shares.
//!
//! Each is created when absent. One that exists is compared with what this
//! binary needs, field by field, and refused with the differences when it
//! does not fit (upstream recreated or updated streams on every boot, which
//! silently changes what other runners rely on). A first connection that
//! fails is an error naming `ITERION_NATS_URL`; once connected, the client
//! reconnects on its own and every request is bounded.
//!
//! Unlike upstream, `max_ack_pending` is not 1: it is a limit of the whole
//! consumer, shared by every runner, so 1 would let one run execute at a
//! time in the entire fleet. Each runner bounds its own runs by pulling only
//! for a free slot (`--concurrency`).

use std::time::Duration;

use async_nats::jetstream::ErrorCode;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull};
use async_nats::jetstream::context::{GetStreamErrorKind, KeyValueErrorKind};
use async_nats::jetstream::stream::{self, RetentionPolicy, StorageType};
use async_nats::jetstream::{self, kv};

use crate::QueueError;
use crate::config::{CONSUMER, CloudSettings, endpoint};

/// Bound of the first connection and of every JetStream request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Fleet-wide bound of unacknowledged deliveries (see the module docs).
pub const MAX_ACK_PENDING: i64 = 10_000;

/// A connection with the queue's objects in place.
#[derive(Clone)]
pub struct Queue {
    /// The core NATS client (cancel subjects).
    pub client: async_nats::Client,
    /// JetStream.
    pub js: jetstream::Context,
    /// The lease bucket (`None` for a client when no runner made it yet).
    pub kv: Option<kv::Store>,
    /// The settings it was opened with.
    pub settings: CloudSettings,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("nats", &endpoint(&self.settings.nats_url))
            .field("stream", &self.settings.stream)
            .finish_non_exhaustive()
    }
}

/// Connect to `settings.nats_url`, bounded; the client reconnects by itself
/// after that (forever, as upstream's `MaxReconnects(-1)`).
pub async fn connect(settings: &CloudSettings) -> Result<async_nats::Client, QueueError> {
    let unreachable = |source: crate::error::BoxError| QueueError::Unreachable {
        variable: "ITERION_NATS_URL",
        endpoint: endpoint(&settings.nats_url),
        source,
    };
    let options = async_nats::ConnectOptions::new()
        .name("iterion")
        .connection_timeout(REQUEST_TIMEOUT)
        .request_timeout(Some(REQUEST_TIMEOUT))
        .max_reconnects(None);
    // The client's own timeout covers one address; the whole first attempt
    // is bounded here too (a black-holed address must not hang a verb).
    match tokio::time::timeout(
        REQUEST_TIMEOUT * 2,
        async_nats::connect_with_options(settings.nats_url.as_str(), options),
    )
    .await
    {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(unreachable(Box::new(e))),
        Err(_) => Err(unreachable("no answer within 10s".into())),
    }
}

fn runs_stream(s: &CloudSettings) -> stream::Config {
    stream::Config {
        name: s.stream.clone(),
        subjects: vec![s.subject.clone()],
        retention: RetentionPolicy::WorkQueue,
        storage: StorageType::File,
        max_age: s.max_age,
        duplicate_window: s.duplicate_window,
        ..Default::default()
    }
}

fn dlq_stream(s: &CloudSettings) -> stream::Config {
    stream::Config {
        name: s.dlq_stream.clone(),
        subjects: vec![s.dlq_subject.clone()],
        retention: RetentionPolicy::Limits,
        storage: StorageType::File,
        max_age: s.dlq_max_age,
        // The server's default, said explicitly so the comparison of an
        // existing stream is exact.
        duplicate_window: Duration::from_secs(120),
        ..Default::default()
    }
}

/// The durable pull consumer of the runs stream.
pub fn consumer_config(s: &CloudSettings) -> pull::Config {
    pull::Config {
        durable_name: Some(CONSUMER.to_owned()),
        ack_policy: AckPolicy::Explicit,
        ack_wait: s.ack_wait,
        max_deliver: i64::try_from(s.max_deliver).unwrap_or(i64::MAX),
        max_ack_pending: MAX_ACK_PENDING,
        deliver_policy: DeliverPolicy::All,
        filter_subject: s.subject.clone(),
        ..Default::default()
    }
}

fn differ<T: std::fmt::Debug + PartialEq>(
    out: &mut Vec<String>,
    field: &str,
    expected: &T,
    found: &T,
) {
    if expected != found {
        out.push(format!("{field}: expected {expected:?}, found {found:?}"));
    }
}

/// The differences that matter between what exists and what is needed.
fn stream_differences(want: &stream::Config, have: &stream::Config) -> Vec<String> {
    let mut d = Vec::new();
    differ(&mut d, "subjects", &want.subjects, &have.subjects);
    differ(&mut d, "retention", &want.retention, &have.retention);
    differ(&mut d, "storage", &want.storage, &have.storage);
    differ(&mut d, "max_age", &want.max_age, &have.max_age);
    differ(
        &mut d,
        "duplicate_window",
        &want.duplicate_window,
        &have.duplicate_window,
    );
    differ(&mut d, "no_ack", &want.no_ack, &have.no_ack);
    differ(&mut d, "sealed", &want.sealed, &have.sealed);
    if have.max_messages >= 0 || have.max_bytes >= 0 || have.max_messages_per_subject >= 0 {
        d.push(format!(
            "limits: expected none, found max_messages {} max_bytes {} max_messages_per_subject {}",
            have.max_messages, have.max_bytes, have.max_messages_per_subject
        ));
    }
    d
}

fn consumer_differences(
    want: &pull::Config,
    have: &async_nats::jetstream::consumer::Config,
) -> Vec<String> {
    let mut d = Vec::new();
    differ(&mut d, "ack_policy", &want.ack_policy, &have.ack_policy);
    differ(&mut d, "ack_wait", &want.ack_wait, &have.ack_wait);
    differ(&mut d, "max_deliver", &want.max_deliver, &have.max_deliver);
    differ(
        &mut d,
        "filter_subject",
        &want.filter_subject,
        &have.filter_subject,
    );
    differ(
        &mut d,
        "deliver_policy",
        &want.deliver_policy,
        &have.deliver_policy,
    );
    differ(
        &mut d,
        "max_ack_pending",
        &want.max_ack_pending,
        &have.max_ack_pending,
    );
    if have.deliver_subject.is_some() {
        d.push(
            "deliver_subject: expected none (a pull consumer), found a push consumer".to_owned(),
        );
    }
    d
}

/// Judge the stream that exists under `want`'s name.
async fn judge_stream(js: &jetstream::Context, want: &stream::Config) -> Result<(), QueueError> {
    let mut existing = js
        .get_stream(want.name.as_str())
        .await
        .map_err(|e| QueueError::nats("look up a stream", e))?;
    let info = existing
        .info()
        .await
        .map_err(|e| QueueError::nats("read a stream's config", e))?;
    let differences = stream_differences(want, &info.config);
    if differences.is_empty() {
        Ok(())
    } else {
        Err(QueueError::Incompatible {
            what: format!("stream {}", want.name),
            differences,
        })
    }
}

async fn ensure_stream(js: &jetstream::Context, want: stream::Config) -> Result<(), QueueError> {
    match js.get_stream(want.name.as_str()).await {
        Ok(_) => judge_stream(js, &want).await,
        Err(e) if matches!(e.kind(), GetStreamErrorKind::JetStream(j) if j.error_code() == ErrorCode::STREAM_NOT_FOUND) =>
        {
            match js.create_stream(want.clone()).await {
                Ok(_) => Ok(()),
                // Another runner created it in between: judge theirs.
                Err(create) => judge_stream(js, &want).await.map_err(|e| match e {
                    QueueError::Incompatible { .. } => e,
                    _ => QueueError::nats("create a stream", create),
                }),
            }
        }
        Err(e) => Err(QueueError::nats("look up a stream", e)),
    }
}

/// Judge the lease bucket that exists.
async fn judge_bucket(js: &jetstream::Context, s: &CloudSettings) -> Result<kv::Store, QueueError> {
    let store = js
        .get_key_value(s.kv_bucket.as_str())
        .await
        .map_err(|e| QueueError::nats("open the lease bucket", e))?;
    let mut stream = js
        .get_stream(format!("KV_{}", s.kv_bucket))
        .await
        .map_err(|e| QueueError::nats("look up the lease bucket", e))?;
    let info = stream
        .info()
        .await
        .map_err(|e| QueueError::nats("read the lease bucket's config", e))?;
    let mut d = Vec::new();
    differ(&mut d, "history", &1, &info.config.max_messages_per_subject);
    differ(&mut d, "ttl", &s.lease_ttl, &info.config.max_age);
    differ(&mut d, "storage", &StorageType::File, &info.config.storage);
    if d.is_empty() {
        Ok(store)
    } else {
        Err(QueueError::Incompatible {
            what: format!("lease bucket {}", s.kv_bucket),
            differences: d,
        })
    }
}

async fn ensure_bucket(
    js: &jetstream::Context,
    s: &CloudSettings,
) -> Result<kv::Store, QueueError> {
    match js.get_key_value(s.kv_bucket.as_str()).await {
        Ok(_) => judge_bucket(js, s).await,
        Err(e) if matches!(e.kind(), KeyValueErrorKind::GetBucket) => {
            // The bucket's stream is created as async-nats would, by hand:
            // its `create_key_value` first reads the account info, whose
            // reply from a 2.9 server lacks fields 0.51 requires
            // (`reserved_memory`, `reserved_storage`), so it always fails
            // there.
            let created = js
                .create_stream(stream::Config {
                    name: format!("KV_{}", s.kv_bucket),
                    subjects: vec![format!("$KV.{}.>", s.kv_bucket)],
                    max_messages_per_subject: 1,
                    max_age: s.lease_ttl,
                    storage: StorageType::File,
                    allow_rollup: true,
                    deny_delete: true,
                    allow_direct: true,
                    num_replicas: 1,
                    discard: stream::DiscardPolicy::New,
                    ..Default::default()
                })
                .await;
            match created {
                Ok(_) => judge_bucket(js, s).await,
                // Raced with another runner: judge theirs.
                Err(create) => judge_bucket(js, s).await.map_err(|e| match e {
                    QueueError::Incompatible { .. } => e,
                    _ => QueueError::nats("create the lease bucket", create),
                }),
            }
        }
        Err(e) => Err(QueueError::nats("look up the lease bucket", e)),
    }
}

/// Who opens the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A runner: the lease bucket is made when absent and judged (its TTL
    /// is the runners' `ITERION_LOCK_TTL`).
    Runner,
    /// `submit` or `cancel`: the bucket is only opened when it exists, so a
    /// client's settings never decide the runners' lease TTL.
    Client,
}

impl Queue {
    /// Connect and make sure the streams (and, for a runner, the bucket)
    /// exist and fit.
    pub async fn open(settings: &CloudSettings, role: Role) -> Result<Queue, QueueError> {
        let client = connect(settings).await?;
        let mut js = jetstream::new(client.clone());
        js.set_timeout(REQUEST_TIMEOUT);
        ensure_stream(&js, runs_stream(settings)).await?;
        ensure_stream(&js, dlq_stream(settings)).await?;
        let kv = match role {
            Role::Runner => Some(ensure_bucket(&js, settings).await?),
            Role::Client => js.get_key_value(settings.kv_bucket.as_str()).await.ok(),
        };
        Ok(Queue {
            client,
            js,
            kv,
            settings: settings.clone(),
        })
    }

    /// The runners' durable consumer, created when absent, refused when it
    /// exists with another config.
    pub async fn consumer(&self) -> Result<PullConsumer, QueueError> {
        let want = consumer_config(&self.settings);
        let stream = self
            .js
            .get_stream(self.settings.stream.as_str())
            .await
            .map_err(|e| QueueError::nats("look up the runs stream", e))?;
        match stream.consumer_info(CONSUMER).await {
            Ok(info) => {
                let differences = consumer_differences(&want, &info.config);
                if !differences.is_empty() {
                    return Err(QueueError::Incompatible {
                        what: format!("consumer {CONSUMER} of stream {}", self.settings.stream),
                        differences,
                    });
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    async_nats::jetstream::context::ConsumerInfoErrorKind::NotFound
                ) =>
            {
                stream
                    .create_consumer(want.clone())
                    .await
                    .map_err(|e| QueueError::nats("create the runners' consumer", e))?;
            }
            Err(e) => return Err(QueueError::nats("look up the runners' consumer", e)),
        }
        stream
            .get_consumer(CONSUMER)
            .await
            .map_err(|e| QueueError::Nats {
                operation: "open the runners' consumer",
                source: e,
            })
    }

    /// Publish a run with its id as the message id: JetStream drops a
    /// second publish of one run within the dedup window. Returns whether
    /// it was such a duplicate.
    pub async fn publish_run(&self, msg: &crate::message::RunMessage) -> Result<bool, QueueError> {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(
            crate::message::VERSION_HEADER,
            crate::message::MESSAGE_VERSION.to_string().as_str(),
        );
        let publish = jetstream::message::PublishMessage::build()
            .payload(msg.encode().into())
            .headers(headers)
            .message_id(msg.run_id.as_str());
        let ack = self
            .js
            .send_publish(self.settings.subject.clone(), publish)
            .await
            .map_err(|e| QueueError::nats("publish a run", e))?
            .await
            .map_err(|e| QueueError::nats("publish a run (acknowledgement)", e))?;
        Ok(ack.duplicate)
    }

    /// Publish a dead letter and wait until the DLQ stream holds it.
    pub async fn publish_dead_letter(&self, letter: &DeadLetter) -> Result<(), QueueError> {
        let payload =
            serde_json::to_vec(letter).map_err(|e| QueueError::nats("encode a dead letter", e))?;
        self.js
            .publish(self.settings.dlq_subject.clone(), payload.into())
            .await
            .map_err(|e| QueueError::nats("publish a dead letter", e))?
            .await
            .map_err(|e| QueueError::nats("publish a dead letter (acknowledgement)", e))?;
        Ok(())
    }
}

/// What the DLQ holds for one message that no runner will execute.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeadLetter {
    /// The run, when the message named one.
    pub run_id: Option<String>,
    /// Why it was dead-lettered.
    pub reason: String,
    /// Stream sequence of the original message.
    pub stream_sequence: u64,
    /// Its deliveries so far.
    pub deliveries: u64,
    /// The runner that dead-lettered it.
    pub runner_id: String,
    /// The original payload, lossy UTF-8, at most 4 KiB.
    pub payload: String,
}
