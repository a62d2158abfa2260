//! Cloud settings from the environment, upstream's names first
//! (`pkg/config/env.go`): `ITERION_MODE=cloud`, `ITERION_NATS_URL`,
//! `ITERION_NATS_STREAM` (default `ITERION_RUNS`), `ITERION_NATS_KV_BUCKET`
//! (default `iterion-run-locks`), `ITERION_NATS_DLQ_STREAM` (default
//! `ITERION_RUNS_DLQ`), `ITERION_LOCK_TTL` (60s), `ITERION_HEARTBEAT_INTERVAL`
//! (20s), `ITERION_RUNNER_CONCURRENCY`, `ITERION_RUNNER_WORKDIR`; ours for
//! what upstream hard-codes: `ITERION_RUNNER_ACK_WAIT` (5m),
//! `ITERION_RUNNER_MAX_DELIVER` (3), `ITERION_RUNNER_NAK_DELAY` (10s),
//! `ITERION_RUNNER_DRAIN_GRACE` (60s), `ITERION_RUNNER_REAP_INTERVAL` (5m),
//! `ITERION_RUNNER_ID`. Cloud mode needs a `postgres://` `ITERION_STORE`.
//! A bad value is an error naming its variable, never a default.

use std::time::Duration;

use iterion_core::duration::parse_go_duration;

use crate::QueueError;

/// Upstream's default stream of queued runs.
pub const DEFAULT_STREAM: &str = "ITERION_RUNS";
/// Upstream's default dead-letter stream.
pub const DEFAULT_DLQ_STREAM: &str = "ITERION_RUNS_DLQ";
/// Upstream's default lease bucket.
pub const DEFAULT_KV_BUCKET: &str = "iterion-run-locks";
/// Upstream's durable consumer, shared by every runner.
pub const CONSUMER: &str = "iterion-runners";
/// Upstream's subject of queued runs (for the default stream).
pub const DEFAULT_SUBJECT: &str = "iterion.queue.runs";
/// Upstream's dead-letter subject (for the default DLQ stream).
pub const DEFAULT_DLQ_SUBJECT: &str = "iterion.queue.runs.dlq";

/// Everything cloud mode reads from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudSettings {
    /// `ITERION_NATS_URL`.
    pub nats_url: String,
    /// `ITERION_NATS_STREAM`.
    pub stream: String,
    /// Subject of that stream.
    pub subject: String,
    /// `ITERION_NATS_DLQ_STREAM`.
    pub dlq_stream: String,
    /// Subject of the DLQ stream.
    pub dlq_subject: String,
    /// `ITERION_NATS_KV_BUCKET`.
    pub kv_bucket: String,
    /// `ITERION_LOCK_TTL`: a lease not refreshed for this long is gone.
    pub lease_ttl: Duration,
    /// `ITERION_HEARTBEAT_INTERVAL`: lease refresh and in-progress ack.
    pub heartbeat: Duration,
    /// `ITERION_RUNNER_ACK_WAIT`: the consumer's ack wait.
    pub ack_wait: Duration,
    /// `ITERION_RUNNER_MAX_DELIVER`: deliveries of one message.
    pub max_deliver: u64,
    /// `ITERION_RUNNER_NAK_DELAY`: delay of a retried infrastructure failure
    /// (times the attempt).
    pub nak_delay: Duration,
    /// `ITERION_RUNNER_DRAIN_GRACE`: how long SIGTERM lets the current runs
    /// finish before handing them back.
    pub drain_grace: Duration,
    /// `ITERION_RUNNER_REAP_INTERVAL`: period of the runner's reaper.
    pub reap_interval: Duration,
    /// Retention of queued messages (upstream: 24 h).
    pub max_age: Duration,
    /// Retention of dead letters (upstream: 7 days).
    pub dlq_max_age: Duration,
    /// JetStream's dedup window for `Nats-Msg-Id` (upstream: 5 min).
    pub duplicate_window: Duration,
}

/// The `ITERION_MODE` words.
fn is_cloud(mode: Option<&str>) -> bool {
    mode.is_some_and(|m| m.trim().eq_ignore_ascii_case("cloud"))
}

fn duration(
    get: &impl Fn(&str) -> Option<String>,
    variable: &'static str,
    default: Duration,
) -> Result<Duration, QueueError> {
    match get(variable).filter(|v| !v.trim().is_empty()) {
        None => Ok(default),
        Some(raw) => match parse_go_duration(&raw) {
            Some(d) if !d.is_zero() => Ok(d),
            _ => Err(QueueError::Config {
                variable,
                reason: format!("{raw:?} is not a positive duration (e.g. 30s, 5m)"),
            }),
        },
    }
}

fn name(
    get: &impl Fn(&str) -> Option<String>,
    variable: &'static str,
    default: &str,
    valid: fn(&str) -> bool,
) -> Result<String, QueueError> {
    let value = get(variable)
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| default.to_owned());
    if !valid(&value) {
        return Err(QueueError::Config {
            variable,
            reason: format!("{value:?} is not a valid name (letters, digits, '-' and '_')"),
        });
    }
    Ok(value)
}

/// Stream and bucket names: what is a single subject token too, so the
/// derived subjects stay literal.
fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// The subject of a stream: upstream's for the default name, one of its
/// own otherwise (two fleets on one server must not share subjects).
fn subject_of(stream: &str, default_stream: &str, default_subject: &str) -> String {
    if stream == default_stream {
        default_subject.to_owned()
    } else {
        format!("iterion.queue.{stream}")
    }
}

/// The endpoint of a NATS URL for messages: host and port, never the
/// credentials a `nats://user:pass@host` URL may carry.
pub fn endpoint(url: &str) -> String {
    url.split(',')
        .map(|one| {
            let rest = one.split_once("://").map_or(one, |(_, r)| r);
            let rest = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
            rest.split('/').next().unwrap_or(rest).to_owned()
        })
        .collect::<Vec<_>>()
        .join(",")
}

impl CloudSettings {
    /// Read the settings; `verb` names the command in the refusals.
    pub fn from_lookup(
        get: impl Fn(&str) -> Option<String>,
        verb: &str,
    ) -> Result<CloudSettings, QueueError> {
        if !is_cloud(get("ITERION_MODE").as_deref()) {
            return Err(QueueError::Config {
                variable: "ITERION_MODE",
                reason: format!(
                    "`iterion {verb}` is cloud mode: set ITERION_MODE=cloud (got {:?})",
                    get("ITERION_MODE").unwrap_or_default()
                ),
            });
        }
        let store = get("ITERION_STORE").unwrap_or_default();
        let store = store.trim();
        if !(store.starts_with("postgres://") || store.starts_with("postgresql://")) {
            return Err(QueueError::Config {
                variable: "ITERION_STORE",
                reason: "cloud mode needs the PostgreSQL store: a postgres:// URL (runners and \
                         submitters on other machines share it)"
                    .to_owned(),
            });
        }
        let nats_url = get("ITERION_NATS_URL")
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .ok_or_else(|| QueueError::Config {
                variable: "ITERION_NATS_URL",
                reason: "cloud mode needs the NATS server (e.g. nats://127.0.0.1:4222)".to_owned(),
            })?;
        let stream = name(&get, "ITERION_NATS_STREAM", DEFAULT_STREAM, valid_name)?;
        let dlq_stream = name(
            &get,
            "ITERION_NATS_DLQ_STREAM",
            DEFAULT_DLQ_STREAM,
            valid_name,
        )?;
        if dlq_stream == stream {
            return Err(QueueError::Config {
                variable: "ITERION_NATS_DLQ_STREAM",
                reason: format!("must differ from ITERION_NATS_STREAM ({stream})"),
            });
        }
        let kv_bucket = name(
            &get,
            "ITERION_NATS_KV_BUCKET",
            DEFAULT_KV_BUCKET,
            valid_name,
        )?;
        let lease_ttl = duration(&get, "ITERION_LOCK_TTL", Duration::from_secs(60))?;
        let heartbeat = duration(&get, "ITERION_HEARTBEAT_INTERVAL", Duration::from_secs(20))?;
        // Two heartbeats fit in one lease: one lost refresh never loses it.
        if heartbeat * 2 > lease_ttl {
            return Err(QueueError::Config {
                variable: "ITERION_HEARTBEAT_INTERVAL",
                reason: format!(
                    "{heartbeat:?} must be at most half of ITERION_LOCK_TTL ({lease_ttl:?})"
                ),
            });
        }
        let ack_wait = duration(&get, "ITERION_RUNNER_ACK_WAIT", Duration::from_secs(300))?;
        if ack_wait <= heartbeat * 2 {
            return Err(QueueError::Config {
                variable: "ITERION_RUNNER_ACK_WAIT",
                reason: format!(
                    "{ack_wait:?} must exceed two heartbeats ({heartbeat:?} each): the \
                     in-progress ack is sent on every heartbeat"
                ),
            });
        }
        let max_deliver = match get("ITERION_RUNNER_MAX_DELIVER").filter(|v| !v.trim().is_empty()) {
            None => 3,
            Some(raw) => raw
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|n| (1..=100).contains(n))
                .ok_or_else(|| QueueError::Config {
                    variable: "ITERION_RUNNER_MAX_DELIVER",
                    reason: format!("{raw:?} is not a count from 1 to 100"),
                })?,
        };
        Ok(CloudSettings {
            nats_url,
            subject: subject_of(&stream, DEFAULT_STREAM, DEFAULT_SUBJECT),
            stream,
            dlq_subject: subject_of(&dlq_stream, DEFAULT_DLQ_STREAM, DEFAULT_DLQ_SUBJECT),
            dlq_stream,
            kv_bucket,
            lease_ttl,
            heartbeat,
            ack_wait,
            max_deliver,
            nak_delay: duration(&get, "ITERION_RUNNER_NAK_DELAY", Duration::from_secs(10))?,
            drain_grace: duration(&get, "ITERION_RUNNER_DRAIN_GRACE", Duration::from_secs(60))?,
            reap_interval: duration(
                &get,
                "ITERION_RUNNER_REAP_INTERVAL",
                Duration::from_secs(300),
            )?,
            max_age: Duration::from_secs(24 * 3600),
            dlq_max_age: Duration::from_secs(7 * 24 * 3600),
            duplicate_window: Duration::from_secs(300),
        })
    }

    /// Read the settings from the process environment.
    pub fn from_env(verb: &str) -> Result<CloudSettings, QueueError> {
        Self::from_lookup(|k| std::env::var(k).ok(), verb)
    }

    /// Core NATS subject on which a run's cancel is requested (upstream's).
    pub fn cancel_subject(run: &iterion_core::RunId) -> String {
        format!("iterion.cancel.{run}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn settings(pairs: &[(&str, &str)]) -> Result<CloudSettings, QueueError> {
        let mut m: BTreeMap<String, String> = BTreeMap::from([
            ("ITERION_MODE".into(), "cloud".into()),
            ("ITERION_STORE".into(), "postgres://u:p@db/x".into()),
            ("ITERION_NATS_URL".into(), "nats://127.0.0.1:4222".into()),
        ]);
        for (k, v) in pairs {
            m.insert((*k).into(), (*v).into());
        }
        CloudSettings::from_lookup(|k| m.get(k).cloned(), "runner")
    }

    #[test]
    fn upstream_defaults() {
        let s = settings(&[]).expect("defaults");
        assert_eq!(s.stream, "ITERION_RUNS");
        assert_eq!(s.subject, "iterion.queue.runs");
        assert_eq!(s.dlq_stream, "ITERION_RUNS_DLQ");
        assert_eq!(s.dlq_subject, "iterion.queue.runs.dlq");
        assert_eq!(s.kv_bucket, "iterion-run-locks");
        assert_eq!(s.lease_ttl, Duration::from_secs(60));
        assert_eq!(s.heartbeat, Duration::from_secs(20));
        assert_eq!(s.ack_wait, Duration::from_secs(300));
        assert_eq!(s.max_deliver, 3);
        let other = settings(&[("ITERION_NATS_STREAM", "TEAM_A")]).expect("named");
        assert_eq!(other.subject, "iterion.queue.TEAM_A");
    }

    #[test]
    fn every_refusal_names_its_variable() {
        let rows: &[(&[(&str, &str)], &str)] = &[
            (&[("ITERION_MODE", "local")], "ITERION_MODE"),
            (&[("ITERION_MODE", "")], "ITERION_MODE"),
            (&[("ITERION_STORE", "/var/lib/iterion")], "ITERION_STORE"),
            (&[("ITERION_NATS_URL", " ")], "ITERION_NATS_URL"),
            (&[("ITERION_NATS_STREAM", "a.b")], "ITERION_NATS_STREAM"),
            (
                &[("ITERION_NATS_DLQ_STREAM", "ITERION_RUNS")],
                "ITERION_NATS_DLQ_STREAM",
            ),
            (
                &[("ITERION_NATS_KV_BUCKET", "a b")],
                "ITERION_NATS_KV_BUCKET",
            ),
            (&[("ITERION_LOCK_TTL", "soon")], "ITERION_LOCK_TTL"),
            (&[("ITERION_LOCK_TTL", "0s")], "ITERION_LOCK_TTL"),
            (
                &[("ITERION_HEARTBEAT_INTERVAL", "45s")],
                "ITERION_HEARTBEAT_INTERVAL",
            ),
            (
                &[("ITERION_RUNNER_ACK_WAIT", "30s")],
                "ITERION_RUNNER_ACK_WAIT",
            ),
            (
                &[("ITERION_RUNNER_MAX_DELIVER", "0")],
                "ITERION_RUNNER_MAX_DELIVER",
            ),
            (
                &[("ITERION_RUNNER_NAK_DELAY", "-1s")],
                "ITERION_RUNNER_NAK_DELAY",
            ),
        ];
        for (pairs, variable) in rows {
            let err = settings(pairs).expect_err(variable);
            assert!(
                matches!(&err, QueueError::Config { variable: v, .. } if v == variable),
                "{pairs:?}: {err}"
            );
            assert!(err.is_user_input());
        }
    }

    #[test]
    fn endpoints_never_show_credentials() {
        assert_eq!(endpoint("nats://u:secret@h:4222"), "h:4222");
        assert_eq!(endpoint("nats://a:1,nats://tok@b:2"), "a:1,b:2");
        assert_eq!(endpoint("127.0.0.1:4222"), "127.0.0.1:4222");
    }
}
