//! The store every test drains into.
//!
//! TEMPORARY: a minimal sink until `iterion-store-sqlite` lands on main; it
//! is replaced by the real `SqliteStore` in a temp dir before the branch is
//! handed over.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures_util::StreamExt;
use iterion_core::event::{EventDraft, EventRecord};
use iterion_core::store::*;
use iterion_core::{ByteStream, RunId, RunStore};

pub struct TestStore {
    #[allow(dead_code)] // keeps the store's directory alive
    pub dir: tempfile::TempDir,
    pub store: Arc<dyn RunStore>,
}

/// Which store backend a test drains into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The embedded store, in a temp dir.
    Sqlite,
    /// The cloud twin (`ITERION_TEST_POSTGRES_URL`).
    #[allow(dead_code)] // mounted once the PostgreSQL store lands on main
    Postgres,
}

/// A fresh store on the default (embedded) backend.
pub async fn new_store() -> TestStore {
    new_store_on(Backend::Sqlite).await
}

/// A fresh store on `backend`.
pub async fn new_store_on(backend: Backend) -> TestStore {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    match backend {
        Backend::Sqlite => TestStore {
            dir,
            store: Arc::new(Sink::default()),
        },
        Backend::Postgres => panic!("the PostgreSQL store is not on main yet"),
    }
}

pub async fn new_run(store: &dyn RunStore) -> RunId {
    let _ = store;
    RunId::generate()
}

#[derive(Default)]
struct Sink {
    files: Mutex<BTreeMap<(String, String), Vec<u8>>>,
    drains: Mutex<BTreeMap<String, DrainRecord>>,
}

fn nope(op: &'static str) -> StoreError {
    StoreError::Backend {
        operation: op,
        source: "not in the sink".into(),
    }
}

#[async_trait]
impl RunStore for Sink {
    fn describe(&self) -> String {
        "sink".into()
    }
    async fn create_run(&self, _run: NewRun) -> Result<RunRecord, StoreError> {
        Err(nope("create_run"))
    }
    async fn load_run(&self, _id: &RunId) -> Result<Option<RunRecord>, StoreError> {
        Err(nope("load_run"))
    }
    async fn list_runs(&self, _page: PageRequest) -> Result<Page<RunRecord>, StoreError> {
        Err(nope("list_runs"))
    }
    async fn transition(&self, _id: &RunId, _t: Transition) -> Result<RunRecord, StoreError> {
        Err(nope("transition"))
    }
    async fn record_admission(
        &self,
        _id: &RunId,
        _a: Admission,
        _r: Option<u64>,
    ) -> Result<RunRecord, StoreError> {
        Err(nope("record_admission"))
    }
    async fn append_event(
        &self,
        _run: &RunId,
        _event: EventDraft,
        _at: Option<u64>,
    ) -> Result<EventRecord, StoreError> {
        Err(nope("append_event"))
    }
    async fn events_after(
        &self,
        _run: &RunId,
        _after: u64,
        _limit: usize,
    ) -> Result<Vec<EventRecord>, StoreError> {
        Err(nope("events_after"))
    }
    fn follow_events(&self, _run: &RunId, _after: u64) -> StoreStream<EventRecord> {
        Box::pin(futures_util::stream::empty())
    }
    async fn append_logs(&self, _run: &RunId, _l: Vec<NewLogLine>) -> Result<u64, StoreError> {
        Err(nope("append_logs"))
    }
    async fn logs_after(
        &self,
        _run: &RunId,
        _after: u64,
        _limit: usize,
    ) -> Result<Vec<LogLine>, StoreError> {
        Err(nope("logs_after"))
    }
    fn follow_logs(&self, _run: &RunId, _after: u64) -> StoreStream<LogLine> {
        Box::pin(futures_util::stream::empty())
    }
    async fn put_file(
        &self,
        run: &RunId,
        path: &RunFilePath,
        mut content: ByteStream,
        cap: u64,
    ) -> Result<PutOutcome, StoreError> {
        let mut data = Vec::new();
        while let Some(chunk) = content.next().await {
            let chunk = chunk.map_err(|source| StoreError::Io {
                operation: "read".into(),
                source,
            })?;
            data.extend_from_slice(&chunk);
            if data.len() as u64 > cap {
                return Ok(PutOutcome::CapExceeded {
                    read: data.len() as u64,
                    cap,
                });
            }
        }
        let record = RunFileRecord {
            path: path.clone(),
            size: data.len() as u64,
            sha256: String::new(),
            stored_at: time::OffsetDateTime::now_utc(),
        };
        self.files
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((run.to_string(), path.to_string()), data);
        Ok(PutOutcome::Stored(record))
    }
    async fn list_files(&self, run: &RunId) -> Result<Vec<RunFileRecord>, StoreError> {
        let files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        Ok(files
            .iter()
            .filter(|((r, _), _)| r == run.as_str())
            .map(|((_, p), d)| RunFileRecord {
                path: RunFilePath::parse(p).unwrap_or_else(|e| panic!("{e}")),
                size: d.len() as u64,
                sha256: String::new(),
                stored_at: time::OffsetDateTime::now_utc(),
            })
            .collect())
    }
    async fn get_file(&self, run: &RunId, path: &RunFilePath) -> Result<ByteStream, StoreError> {
        let files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        let data = files
            .get(&(run.to_string(), path.to_string()))
            .cloned()
            .ok_or_else(|| StoreError::FileNotFound(path.to_string()))?;
        Ok(Box::pin(futures_util::stream::iter([Ok(
            bytes::Bytes::from(data),
        )])))
    }
    async fn set_drain(&self, run: &RunId, drain: DrainRecord) -> Result<(), StoreError> {
        self.drains
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(run.to_string(), drain);
        Ok(())
    }
    async fn get_drain(&self, run: &RunId) -> Result<Option<DrainRecord>, StoreError> {
        Ok(self
            .drains
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(run.as_str())
            .cloned())
    }
}
