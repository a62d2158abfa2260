//! What every check of the suite is given and shares: the fixture a
//! backend builds, how a store is reopened, the writer child's variables,
//! and the small builders of runs, events, streams and transitions. A leaf
//! of `store`: the checks name it, it names none of them.

// Test code: a failed expectation is the assertion.
#![allow(clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
pub use futures_util::future::BoxFuture;

use iterion_core::ByteStream;
use iterion_core::event::EventDraft;
use iterion_core::failure::RunStatus;
use iterion_core::id::RunId;
use iterion_core::mode::Trust;
use iterion_core::store::{NewRun, RunFilePath, RunOwner, Transition};
use iterion_core::{RunStore, StoreError};

/// Env var that turns the test binary into the killed-writer child: its
/// value is the store locator.
pub const WRITER_ENV: &str = "ITERION_STORE_CONFORMANCE_WRITER";
/// Env var naming the run the child appends to.
pub const WRITER_RUN_ENV: &str = "ITERION_STORE_CONFORMANCE_RUN";

/// A fresh, isolated store under test.
pub struct StoreFixture {
    /// The store.
    pub store: Arc<dyn RunStore>,
    /// What `open` needs to reach the same store from another connection or
    /// process (a directory, or a URL + schema).
    pub locator: String,
    /// Keeps the backing resources (temp dir, schema) alive.
    pub guard: Box<dyn Keepalive>,
}

/// Anything a fixture keeps alive until it is dropped (a temp dir, a
/// schema guard); never looked into, only dropped.
pub trait Keepalive: Send + Sync {}

impl<T: Send + Sync> Keepalive for T {}

/// Reopens a store from its locator.
pub type OpenFn =
    Arc<dyn Fn(String) -> BoxFuture<'static, Result<Arc<dyn RunStore>, StoreError>> + Send + Sync>;

/// Guard against a hang, not a timing assertion: every awaited condition
/// here is expected within milliseconds.
pub(crate) const HANG_GUARD: Duration = Duration::from_secs(60);

pub(crate) fn new_run(id: &str) -> NewRun {
    NewRun {
        id: RunId::parse(id).expect("valid run id"),
        workflow: "review".into(),
        file: "flows/review.iter".into(),
        trust: Trust::Untrusted,
        owner: Some(RunOwner {
            host: "host-a".into(),
            pid: 4242,
            start_time: 987_654,
        }),
    }
}

pub(crate) fn draft(kind: &str, data: serde_json::Value) -> EventDraft {
    EventDraft {
        kind: kind.into(),
        node_id: None,
        data,
    }
}

pub(crate) fn bytes_stream(chunks: Vec<Vec<u8>>) -> ByteStream {
    Box::pin(futures_util::stream::iter(
        chunks.into_iter().map(|c| Ok(Bytes::from(c))),
    ))
}

pub(crate) async fn read_all(mut s: ByteStream) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(chunk) = s.next().await {
        out.extend_from_slice(&chunk.expect("file chunk"));
    }
    out
}

pub(crate) fn path(p: &str) -> RunFilePath {
    RunFilePath::parse(p).expect("valid run file path")
}

pub(crate) fn to(from: RunStatus, to: RunStatus) -> Transition {
    Transition {
        from,
        expected_revision: None,
        to,
        failure: None,
    }
}
