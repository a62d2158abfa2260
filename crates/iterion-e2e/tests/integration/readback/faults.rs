//! Fault injection around the real store: a decorator that delegates every
//! call to it and fails the ones a test names.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use iterion_core::event::{EventDraft, EventRecord};
use iterion_core::store::*;
use iterion_core::{ByteStream, RunId, RunStore};

pub struct Faulty {
    pub inner: Arc<dyn RunStore>,
    pub fail_put: AtomicBool,
    pub fail_get_drain: AtomicBool,
    /// Paths whose put is refused (one member's problem, not the store's).
    pub refuse: std::sync::Mutex<Vec<String>>,
}

impl Faulty {
    pub fn new(inner: Arc<dyn RunStore>) -> Self {
        Self {
            inner,
            fail_put: AtomicBool::new(false),
            fail_get_drain: AtomicBool::new(false),
            refuse: std::sync::Mutex::new(Vec::new()),
        }
    }
}

fn injected(operation: &'static str) -> StoreError {
    StoreError::Unavailable {
        reason: format!("injected {operation} failure"),
        source: None,
    }
}

#[async_trait]
impl RunStore for Faulty {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    async fn create_run(&self, run: NewRun) -> Result<RunRecord, StoreError> {
        self.inner.create_run(run).await
    }
    async fn load_run(&self, id: &RunId) -> Result<Option<RunRecord>, StoreError> {
        self.inner.load_run(id).await
    }
    async fn list_runs(&self, page: PageRequest) -> Result<Page<RunRecord>, StoreError> {
        self.inner.list_runs(page).await
    }
    async fn transition(&self, id: &RunId, t: Transition) -> Result<RunRecord, StoreError> {
        self.inner.transition(id, t).await
    }
    async fn reopen_run(&self, id: &RunId, r: Reopen) -> Result<RunRecord, StoreError> {
        self.inner.reopen_run(id, r).await
    }
    async fn submit_run(&self, run: NewRun, s: Submission) -> Result<RunRecord, StoreError> {
        self.inner.submit_run(run, s).await
    }
    async fn load_submission(&self, id: &RunId) -> Result<Option<Submission>, StoreError> {
        self.inner.load_submission(id).await
    }
    async fn claim_run(&self, id: &RunId, c: Claim) -> Result<RunRecord, StoreError> {
        self.inner.claim_run(id, c).await
    }
    async fn record_admission(
        &self,
        id: &RunId,
        a: Admission,
        r: Option<u64>,
    ) -> Result<RunRecord, StoreError> {
        self.inner.record_admission(id, a, r).await
    }
    async fn append_event(
        &self,
        run: &RunId,
        event: EventDraft,
        at: Option<u64>,
    ) -> Result<EventRecord, StoreError> {
        self.inner.append_event(run, event, at).await
    }
    async fn events_after(
        &self,
        run: &RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<EventRecord>, StoreError> {
        self.inner.events_after(run, after, limit).await
    }
    fn follow_events(&self, run: &RunId, after: u64) -> StoreStream<EventRecord> {
        self.inner.follow_events(run, after)
    }
    async fn append_logs(&self, run: &RunId, l: Vec<NewLogLine>) -> Result<u64, StoreError> {
        self.inner.append_logs(run, l).await
    }
    async fn logs_after(
        &self,
        run: &RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<LogLine>, StoreError> {
        self.inner.logs_after(run, after, limit).await
    }
    fn follow_logs(&self, run: &RunId, after: u64) -> StoreStream<LogLine> {
        self.inner.follow_logs(run, after)
    }
    async fn put_file(
        &self,
        run: &RunId,
        path: &RunFilePath,
        content: ByteStream,
        cap: u64,
    ) -> Result<PutOutcome, StoreError> {
        let refused = self
            .refuse
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|p| p == path.as_str());
        if refused || self.fail_put.load(Ordering::SeqCst) {
            return Err(injected("put_file"));
        }
        self.inner.put_file(run, path, content, cap).await
    }
    async fn list_files(&self, run: &RunId) -> Result<Vec<RunFileRecord>, StoreError> {
        self.inner.list_files(run).await
    }
    async fn get_file(&self, run: &RunId, path: &RunFilePath) -> Result<ByteStream, StoreError> {
        self.inner.get_file(run, path).await
    }
    async fn set_drain(&self, run: &RunId, drain: DrainRecord) -> Result<(), StoreError> {
        self.inner.set_drain(run, drain).await
    }
    async fn get_drain(&self, run: &RunId) -> Result<Option<DrainRecord>, StoreError> {
        if self.fail_get_drain.load(Ordering::SeqCst) {
            return Err(injected("get_drain"));
        }
        self.inner.get_drain(run).await
    }
    async fn put_attachment(
        &self,
        run: &RunId,
        name: &iterion_core::attachment::AttachmentName,
        file: &iterion_core::attachment::AttachmentFile,
        content: ByteStream,
        cap: u64,
    ) -> Result<iterion_core::attachment::AttachmentPut, StoreError> {
        self.inner
            .put_attachment(run, name, file, content, cap)
            .await
    }
    async fn list_attachments(
        &self,
        run: &RunId,
    ) -> Result<Vec<iterion_core::attachment::AttachmentRecord>, StoreError> {
        self.inner.list_attachments(run).await
    }
    async fn get_attachment(
        &self,
        run: &RunId,
        name: &iterion_core::attachment::AttachmentName,
    ) -> Result<ByteStream, StoreError> {
        self.inner.get_attachment(run, name).await
    }
}
