//! Reading a stored event back as its typed value. The envelope stays
//! generic on the wire and in every store (`docs/reference/SPEC.md` §3);
//! this is the one place that turns its `{type, data}` into an
//! [`EventKind`], through the enum's own serde, so a reader matches on
//! variants instead of looking fields up by name (where a typo reads as an
//! empty string).
//!
//! Decoding never fails and never drops anything: events outlive the
//! build that wrote them (an older or newer iterion, upstream, a store
//! edited by hand), so a name this build does not know and a known name
//! whose data has another shape both come back whole, for a generic
//! rendering. Extra keys in `data` beyond a variant's fields (the
//! [`BRANCH_ID`](super::record::BRANCH_ID) tag every event in a parallel branch
//! carries) are ignored by the variant and stay readable on the record.

use serde::Deserialize;
use serde_json::{Map, Value};

use super::kind::EventKind;
use super::record::{BRANCH_ID, EventRecord};

/// An event's payload as this build reads it.
#[derive(Debug, Clone, PartialEq)]
pub enum Payload {
    /// A kind this build knows, decoded.
    Known(Box<EventKind>),
    /// A name this build does not know: the data as stored.
    Unknown {
        /// The event's `type`.
        kind: String,
        /// Its `data`, untouched.
        data: Value,
    },
    /// A name this build knows whose data does not have its shape (a
    /// field missing or of another type): the data as stored, and why.
    Malformed {
        /// The event's `type`.
        kind: String,
        /// Its `data`, untouched.
        data: Value,
        /// What the decoder said.
        error: String,
    },
}

impl Payload {
    /// Decode `data` as the payload of an event named `kind`.
    pub fn decode(kind: &str, data: &Value) -> Self {
        // The enum's serde is adjacently tagged (`{type, data}`): hand it
        // exactly that, so this reader and the writer share one format.
        let mut tagged = Map::new();
        tagged.insert("type".into(), Value::String(kind.to_owned()));
        tagged.insert("data".into(), data.clone());
        match EventKind::deserialize(Value::Object(tagged)) {
            Ok(known) => Self::Known(Box::new(known)),
            Err(e) if EventKind::NAMES.contains(&kind) => Self::Malformed {
                kind: kind.to_owned(),
                data: data.clone(),
                error: e.to_string(),
            },
            Err(_) => Self::Unknown {
                kind: kind.to_owned(),
                data: data.clone(),
            },
        }
    }

    /// The event's `type`, whatever this build made of it.
    pub fn name(&self) -> &str {
        match self {
            Self::Known(kind) => kind.name(),
            Self::Unknown { kind, .. } | Self::Malformed { kind, .. } => kind,
        }
    }

    /// The typed value, when this build could read one.
    pub fn known(&self) -> Option<&EventKind> {
        match self {
            Self::Known(kind) => Some(kind),
            Self::Unknown { .. } | Self::Malformed { .. } => None,
        }
    }
}

impl EventRecord {
    /// The typed payload of this event ([`Payload`]).
    pub fn payload(&self) -> Payload {
        Payload::decode(&self.kind, &self.data)
    }

    /// The parallel branch the event happened in, when it did.
    pub fn branch_id(&self) -> Option<&str> {
        self.data.get(BRANCH_ID).and_then(Value::as_str)
    }
}
