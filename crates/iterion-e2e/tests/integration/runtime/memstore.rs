//! A minimal in-memory `RunStore` (runs, events, logs) used until the
//! SQLite store is on main; file methods are unsupported.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use iterion_core::store::*;
use iterion_core::{ByteStream, EventDraft, EventRecord, RunId, RunStore, StoreError};
use time::OffsetDateTime;

#[derive(Default)]
pub struct MemStore {
    runs: Mutex<HashMap<RunId, RunRecord>>,
    events: Mutex<HashMap<RunId, Vec<EventRecord>>>,
    logs: Mutex<HashMap<RunId, Vec<LogLine>>>,
    submissions: Mutex<HashMap<RunId, Submission>>,
    /// Make every event and log append fail (emission must not break runs).
    pub fail_appends: AtomicBool,
}

fn unsupported() -> StoreError {
    StoreError::Io {
        operation: "memstore files".into(),
        source: std::io::Error::from(std::io::ErrorKind::Unsupported),
    }
}

#[async_trait]
impl RunStore for MemStore {
    fn describe(&self) -> String {
        "memory".into()
    }
    async fn create_run(&self, run: NewRun) -> Result<RunRecord, StoreError> {
        let mut runs = self.runs.lock().unwrap();
        if runs.contains_key(&run.id) {
            return Err(StoreError::RunExists(run.id));
        }
        let now = OffsetDateTime::now_utc();
        let rec = RunRecord {
            id: run.id.clone(),
            workflow: run.workflow,
            file: run.file,
            trust: run.trust,
            status: iterion_core::RunStatus::Queued,
            failure: None,
            admission: None,
            owner: run.owner,
            revision: 1,
            created_at: now,
            updated_at: now,
        };
        runs.insert(run.id, rec.clone());
        Ok(rec)
    }
    async fn load_run(&self, id: &RunId) -> Result<Option<RunRecord>, StoreError> {
        Ok(self.runs.lock().unwrap().get(id).cloned())
    }
    async fn submit_run(&self, run: NewRun, s: Submission) -> Result<RunRecord, StoreError> {
        let id = run.id.clone();
        let rec = self.create_run(run).await?;
        self.submissions.lock().unwrap().insert(id, s);
        Ok(rec)
    }
    async fn load_submission(&self, id: &RunId) -> Result<Option<Submission>, StoreError> {
        Ok(self.submissions.lock().unwrap().get(id).cloned())
    }
    async fn claim_run(&self, id: &RunId, c: Claim) -> Result<RunRecord, StoreError> {
        let mut runs = self.runs.lock().unwrap();
        let rec = runs
            .get_mut(id)
            .ok_or_else(|| StoreError::RunNotFound(id.clone()))?;
        if rec.status != iterion_core::RunStatus::Queued
            || c.expected_revision.is_some_and(|r| r != rec.revision)
        {
            return Err(StoreError::StaleTransition {
                run: id.clone(),
                expected_status: iterion_core::RunStatus::Queued,
                expected_revision: c.expected_revision,
                actual_status: rec.status,
                actual_revision: rec.revision,
            });
        }
        rec.owner = Some(c.owner);
        rec.revision += 1;
        Ok(rec.clone())
    }
    async fn list_runs(&self, _page: PageRequest) -> Result<Page<RunRecord>, StoreError> {
        Ok(Page {
            items: self.runs.lock().unwrap().values().cloned().collect(),
            next_cursor: None,
        })
    }
    async fn transition(&self, id: &RunId, t: Transition) -> Result<RunRecord, StoreError> {
        let mut runs = self.runs.lock().unwrap();
        let rec = runs
            .get_mut(id)
            .ok_or_else(|| StoreError::RunNotFound(id.clone()))?;
        if rec.status != t.from || t.expected_revision.is_some_and(|r| r != rec.revision) {
            return Err(StoreError::StaleTransition {
                run: id.clone(),
                expected_status: t.from,
                expected_revision: t.expected_revision,
                actual_status: rec.status,
                actual_revision: rec.revision,
            });
        }
        if !rec.status.can_transition_to(t.to) {
            return Err(StoreError::IllegalTransition {
                run: id.clone(),
                from: rec.status,
                to: t.to,
            });
        }
        rec.status = t.to;
        rec.failure = t.failure;
        rec.revision += 1;
        Ok(rec.clone())
    }
    async fn reopen_run(&self, id: &RunId, r: Reopen) -> Result<RunRecord, StoreError> {
        let mut runs = self.runs.lock().unwrap();
        let rec = runs
            .get_mut(id)
            .ok_or_else(|| StoreError::RunNotFound(id.clone()))?;
        if rec.status != r.from || r.expected_revision.is_some_and(|x| x != rec.revision) {
            return Err(StoreError::StaleTransition {
                run: id.clone(),
                expected_status: r.from,
                expected_revision: r.expected_revision,
                actual_status: rec.status,
                actual_revision: rec.revision,
            });
        }
        if r.from == iterion_core::RunStatus::Running
            || !r.from.can_transition_to(iterion_core::RunStatus::Running)
        {
            return Err(StoreError::IllegalTransition {
                run: id.clone(),
                from: r.from,
                to: iterion_core::RunStatus::Running,
            });
        }
        rec.status = iterion_core::RunStatus::Running;
        rec.failure = None;
        rec.owner = r.owner;
        rec.revision += 1;
        Ok(rec.clone())
    }
    async fn record_admission(
        &self,
        id: &RunId,
        admission: Admission,
        expected_revision: Option<u64>,
    ) -> Result<RunRecord, StoreError> {
        let mut runs = self.runs.lock().unwrap();
        let rec = runs
            .get_mut(id)
            .ok_or_else(|| StoreError::RunNotFound(id.clone()))?;
        if expected_revision.is_some_and(|r| r != rec.revision) {
            return Err(StoreError::StaleTransition {
                run: id.clone(),
                expected_status: rec.status,
                expected_revision,
                actual_status: rec.status,
                actual_revision: rec.revision,
            });
        }
        rec.admission = Some(admission);
        rec.revision += 1;
        Ok(rec.clone())
    }
    async fn append_event(
        &self,
        run: &RunId,
        event: EventDraft,
        _at_seq: Option<u64>,
    ) -> Result<EventRecord, StoreError> {
        if self.fail_appends.load(Ordering::SeqCst) {
            return Err(unsupported());
        }
        let mut all = self.events.lock().unwrap();
        let list = all.entry(run.clone()).or_default();
        let rec = EventRecord {
            seq: list.len() as u64 + 1,
            timestamp: OffsetDateTime::now_utc(),
            kind: event.kind,
            run_id: run.clone(),
            node_id: event.node_id,
            data: event.data,
        };
        list.push(rec.clone());
        Ok(rec)
    }
    async fn events_after(
        &self,
        run: &RunId,
        after: u64,
        _limit: usize,
    ) -> Result<Vec<EventRecord>, StoreError> {
        Ok(self
            .events
            .lock()
            .unwrap()
            .get(run)
            .map(|l| l.iter().filter(|e| e.seq > after).cloned().collect())
            .unwrap_or_default())
    }
    fn follow_events(&self, _run: &RunId, _after: u64) -> StoreStream<EventRecord> {
        Box::pin(futures_util::stream::empty())
    }
    async fn append_logs(&self, run: &RunId, lines: Vec<NewLogLine>) -> Result<u64, StoreError> {
        if self.fail_appends.load(Ordering::SeqCst) {
            return Err(unsupported());
        }
        let mut all = self.logs.lock().unwrap();
        let list = all.entry(run.clone()).or_default();
        for l in lines {
            list.push(LogLine {
                seq: list.len() as u64 + 1,
                timestamp: OffsetDateTime::now_utc(),
                stream: l.stream,
                node_id: l.node_id,
                line: l.line,
            });
        }
        Ok(list.len() as u64)
    }
    async fn logs_after(
        &self,
        run: &RunId,
        after: u64,
        _limit: usize,
    ) -> Result<Vec<LogLine>, StoreError> {
        Ok(self
            .logs
            .lock()
            .unwrap()
            .get(run)
            .map(|l| l.iter().filter(|e| e.seq > after).cloned().collect())
            .unwrap_or_default())
    }
    fn follow_logs(&self, _run: &RunId, _after: u64) -> StoreStream<LogLine> {
        Box::pin(futures_util::stream::empty())
    }
    async fn put_file(
        &self,
        _run: &RunId,
        _path: &RunFilePath,
        _content: ByteStream,
        _cap: u64,
    ) -> Result<PutOutcome, StoreError> {
        Err(unsupported())
    }
    async fn list_files(&self, _run: &RunId) -> Result<Vec<RunFileRecord>, StoreError> {
        Ok(Vec::new())
    }
    async fn get_file(&self, _run: &RunId, _path: &RunFilePath) -> Result<ByteStream, StoreError> {
        Err(unsupported())
    }
    async fn set_drain(&self, _run: &RunId, _drain: DrainRecord) -> Result<(), StoreError> {
        Err(unsupported())
    }
    async fn get_drain(&self, _run: &RunId) -> Result<Option<DrainRecord>, StoreError> {
        Ok(None)
    }
    async fn put_attachment(
        &self,
        _run: &RunId,
        _name: &iterion_core::attachment::AttachmentName,
        _file: &iterion_core::attachment::AttachmentFile,
        _content: ByteStream,
        _cap: u64,
    ) -> Result<iterion_core::attachment::AttachmentPut, StoreError> {
        Err(unsupported())
    }
    async fn list_attachments(
        &self,
        _run: &RunId,
    ) -> Result<Vec<iterion_core::attachment::AttachmentRecord>, StoreError> {
        Ok(Vec::new())
    }
    async fn get_attachment(
        &self,
        _run: &RunId,
        _name: &iterion_core::attachment::AttachmentName,
    ) -> Result<ByteStream, StoreError> {
        Err(unsupported())
    }
}
