//! The envelope a store persists ([`EventRecord`]) and the draft the runtime
//! appends ([`EventDraft`], made from a typed [`EventKind`]). Knows the
//! variants only to serialise one; reading one back is `decode`'s.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;

use super::kind::EventKind;
use crate::id::{NodeId, RunId};

/// One persisted event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    /// Per-run sequence number, from 1, gapless.
    pub seq: u64,
    /// When the event was appended (RFC 3339).
    #[serde(with = "time::serde::rfc3339")]
    pub timestamp: OffsetDateTime,
    /// Event name (`sandbox_started`, `network_blocked`, …).
    #[serde(rename = "type")]
    pub kind: String,
    /// The run.
    pub run_id: RunId,
    /// The node the event is about, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<NodeId>,
    /// Payload.
    pub data: Value,
}

/// The key of `data` that names the parallel branch an event happened in
/// (facts §8's `branch_id`): written by [`EventDraft::in_branch`], read by
/// [`EventRecord::branch_id`], and carried beside the variant's own fields.
pub const BRANCH_ID: &str = "branch_id";

/// An event before the store assigns its sequence number and timestamp.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventDraft {
    /// Event name.
    pub kind: String,
    /// The node the event is about.
    pub node_id: Option<NodeId>,
    /// Payload.
    pub data: Value,
}

impl EventDraft {
    /// Attach a node.
    pub fn for_node(mut self, node: NodeId) -> Self {
        self.node_id = Some(node);
        self
    }

    /// Mark the event as happening inside a parallel branch (facts §8's
    /// `branch_id`, carried in `data` so every store keeps it as is).
    pub fn in_branch(mut self, branch: Option<&str>) -> Self {
        if let (Some(branch), Value::Object(data)) = (branch, &mut self.data) {
            data.insert(BRANCH_ID.into(), Value::String(branch.to_owned()));
        }
        self
    }
}

impl From<EventKind> for EventDraft {
    fn from(kind: EventKind) -> Self {
        // Serializing a closed enum of plain data cannot fail; the fallback
        // keeps the name so nothing is silently dropped if it ever did.
        match serde_json::to_value(&kind) {
            Ok(Value::Object(mut obj)) => {
                let name = match obj.remove("type") {
                    Some(Value::String(s)) => s,
                    _ => kind.name().to_owned(),
                };
                let data = obj
                    .remove("data")
                    .unwrap_or(Value::Object(Default::default()));
                EventDraft {
                    kind: name,
                    node_id: None,
                    data,
                }
            }
            _ => EventDraft {
                kind: kind.name().to_owned(),
                node_id: None,
                data: Value::Null,
            },
        }
    }
}
