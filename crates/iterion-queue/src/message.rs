//! The queue message: it only names the run. Everything a runner needs
//! (the source, the variables, the launch settings) is in the store, put
//! there by `iterion submit` in the same transaction that created the run,
//! so a message can never carry a workflow the store does not vouch for,
//! and its size never depends on the workflow's.

use iterion_core::RunId;
use serde::{Deserialize, Serialize};

/// The version of the message's shape this binary writes and reads.
pub const MESSAGE_VERSION: u32 = 1;

/// Header naming the schema version (upstream's `iterion-schema-version`).
pub const VERSION_HEADER: &str = "iterion-schema-version";

/// One queued run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunMessage {
    /// [`MESSAGE_VERSION`].
    pub v: u32,
    /// The run.
    pub run_id: RunId,
    /// When it was submitted (RFC 3339; what the queue latency is measured
    /// from).
    pub submitted_at: String,
}

/// Why a message is not one of ours; it is dead-lettered with this reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct MalformedMessage {
    /// What is wrong (quotes at most the first bytes of the payload).
    pub reason: String,
}

impl MalformedMessage {
    /// Stable code.
    pub fn code(&self) -> &'static str {
        "QUEUE_MESSAGE_MALFORMED"
    }
}

impl RunMessage {
    /// A message for `run` submitted now.
    pub fn new(run: RunId, submitted_at: time::OffsetDateTime) -> Self {
        Self {
            v: MESSAGE_VERSION,
            run_id: run,
            submitted_at: submitted_at
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap_or_default(),
        }
    }

    /// The JSON payload.
    pub fn encode(&self) -> Vec<u8> {
        // A struct of strings and an integer always serializes.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Read a payload; anything but a message of this version is refused.
    pub fn decode(payload: &[u8]) -> Result<RunMessage, MalformedMessage> {
        let shown = || {
            let head = &payload[..payload.len().min(80)];
            iterion_core::display::printable(&String::from_utf8_lossy(head)).into_owned()
        };
        let msg: RunMessage = serde_json::from_slice(payload).map_err(|e| MalformedMessage {
            reason: format!("not a run message ({e}): {:?}", shown()),
        })?;
        if msg.v != MESSAGE_VERSION {
            return Err(MalformedMessage {
                reason: format!(
                    "run message version {} is not {MESSAGE_VERSION} (a newer or older iterion published it)",
                    msg.v
                ),
            });
        }
        Ok(msg)
    }

    /// When it was submitted, if readable.
    pub fn submitted(&self) -> Option<time::OffsetDateTime> {
        time::OffsetDateTime::parse(
            &self.submitted_at,
            &time::format_description::well_known::Rfc3339,
        )
        .ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_refusals() {
        let id = RunId::parse("r1").expect("id");
        let m = RunMessage::new(id, time::OffsetDateTime::UNIX_EPOCH);
        assert_eq!(RunMessage::decode(&m.encode()).expect("decode"), m);
        assert!(m.submitted().is_some());
        for bad in [
            &b"garbage"[..],
            br#"{"v":1}"#,
            br#"{"v":2,"run_id":"r1","submitted_at":""}"#,
            br#"{"v":1,"run_id":"../etc","submitted_at":""}"#,
            br#"{"v":1,"run_id":"r1","submitted_at":"","extra":1}"#,
        ] {
            let e = RunMessage::decode(bad).expect_err("refused");
            assert_eq!(e.code(), "QUEUE_MESSAGE_MALFORMED");
        }
    }
}
