//! Events: the audit surface of a run.
//!
//! The runtime emits typed [`EventKind`]s; stores persist the generic
//! [`EventRecord`] envelope `{seq, timestamp, type, run_id, node_id, data}`
//! of `docs/reference/SPEC.md` §3, so a store never needs to know every event.
//! Readers get the typed value back with [`EventRecord::payload`], which
//! never fails: a kind this build does not know, or a known kind whose data
//! has another shape, comes back whole as [`Payload::Unknown`] or
//! [`Payload::Malformed`]. Names and payload fields follow facts §8; where
//! the sources leave a payload open, `docs/reference/SPEC.md` §3 fixes it.
//! This module only gathers them: the envelope and the draft are
//! `record`'s, the variants [`kind`]'s, the reading back [`decode`]'s.

pub mod decode;
pub mod kind;
mod record;
#[cfg(any(test, feature = "test-samples"))]
pub mod samples;
#[cfg(test)]
mod tests;
mod wire;

pub use decode::Payload;
pub use kind::{DroppedBind, EventKind, FailedBranch};
pub use record::{BRANCH_ID, EventDraft, EventRecord};
