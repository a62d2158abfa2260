//! The embedded default [`RunStore`]: one directory (`ITERION_STORE`,
//! default `.iterion/`) holding `iterion.db` — SQLite in WAL mode for runs,
//! events, logs, file records and drain records — and `runs/<RUN_ID>/files/`,
//! the run file area, where drained file contents live as plain files.
//! Everything it creates is private to its owner (directories 0700, files
//! 0600): a store holds every run's outputs and the digests that vouch for
//! them.
//!
//! It owns the on-disk layout and its migrations ([`schema`]); it does not
//! decide what is drained or capped (the read-back layer does) nor interpret
//! events. Every SQLite call runs on the blocking pool behind one
//! connection; cross-process writers are serialized by SQLite's own lock
//! (`BEGIN IMMEDIATE` + a busy timeout), which is what keeps event `seq`
//! gapless when two processes append to the same store.

mod attachments;
mod clock;
mod db;
mod files;
mod queued;
mod rows;

pub mod schema;

use async_trait::async_trait;
use rusqlite::{OptionalExtension, TransactionBehavior, params};

use iterion_core::attachment::{AttachmentFile, AttachmentName, AttachmentPut, AttachmentRecord};
use iterion_core::event::{EventDraft, EventRecord};
use iterion_core::failure::RunStatus;
use iterion_core::id::RunId;
use iterion_core::store::{
    Admission, Claim, DrainRecord, LogLine, NewLogLine, NewRun, Page, PageRequest, PutOutcome,
    Reopen, RunFilePath, RunFileRecord, RunRecord, StoreStream, Submission, Transition,
};
use iterion_core::{ByteStream, RunStore, StoreError};
use iterion_storekit::clock::now;
use iterion_storekit::json::{decode_err, json_field, to_json};
use iterion_storekit::page::Window;
use iterion_storekit::payload::check_depth;

use crate::clock::{from_micros, micros};
pub use crate::db::{DB_FILE, SqliteStore};
use crate::rows::{
    RUN_COLS, RawRun, decode_event, entry_known, event_row, load, node_str, raw_run, run_exists,
};

#[async_trait]
impl RunStore for SqliteStore {
    fn describe(&self) -> String {
        format!("sqlite store at {}", self.inner.location)
    }

    async fn create_run(&self, run: NewRun) -> Result<RunRecord, StoreError> {
        self.with_conn("create run", move |conn, loc| {
            queued::insert_run(conn, &run, loc)?;
            load(conn, run.id.as_str(), loc)?
                .ok_or_else(|| StoreError::RunNotFound(run.id.clone()))?
                .decode()
        })
        .await
    }

    async fn submit_run(
        &self,
        run: NewRun,
        submission: Submission,
    ) -> Result<RunRecord, StoreError> {
        self.submit(run, submission).await
    }

    async fn load_submission(&self, id: &RunId) -> Result<Option<Submission>, StoreError> {
        self.submission(id).await
    }

    async fn claim_run(&self, id: &RunId, claim: Claim) -> Result<RunRecord, StoreError> {
        self.claim(id, claim).await
    }

    async fn load_run(&self, id: &RunId) -> Result<Option<RunRecord>, StoreError> {
        let id = id.clone();
        self.with_conn("load run", move |conn, loc| {
            load(conn, id.as_str(), loc)?
                .map(RawRun::decode)
                .transpose()
        })
        .await
    }

    async fn list_runs(&self, page: PageRequest) -> Result<Page<RunRecord>, StoreError> {
        let window = Window::of(&page)?;
        self.with_conn("list runs", move |conn, loc| {
            let map = |e| schema::classify(e, loc);
            let mut stmt = conn
                .prepare_cached(&format!(
                    "SELECT {RUN_COLS} FROM runs WHERE ord < ?1 ORDER BY ord DESC LIMIT ?2"
                ))
                .map_err(map)?;
            let raws = stmt
                .query_map(params![window.before, window.fetch()], raw_run)
                .map_err(map)?
                .collect::<Result<Vec<_>, _>>()
                .map_err(map)?;
            let rows = raws
                .into_iter()
                .map(|raw| Ok((raw.ord, raw.decode()?)))
                .collect::<Result<Vec<_>, StoreError>>()?;
            Ok(window.finish(rows))
        })
        .await
    }

    async fn transition(&self, id: &RunId, t: Transition) -> Result<RunRecord, StoreError> {
        let id = id.clone();
        self.with_conn("transition run", move |conn, loc| {
            let map = |e| schema::classify(e, loc);
            if !t.from.can_transition_to(t.to) {
                return Err(StoreError::IllegalTransition {
                    run: id,
                    from: t.from,
                    to: t.to,
                });
            }
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(map)?;
            let raw =
                load(&tx, id.as_str(), loc)?.ok_or_else(|| StoreError::RunNotFound(id.clone()))?;
            queued::check_current(&raw, &id, t.from, t.expected_revision)?;
            let (code, disp, msg) = match (&t.failure, t.to) {
                (Some(f), _) => (
                    Some(f.code.as_str().to_owned()),
                    Some(f.disposition.as_str().to_owned()),
                    Some(f.message.clone()),
                ),
                // Re-queued or resumed: the old failure no longer describes the run.
                (None, RunStatus::Queued | RunStatus::Running) => (None, None, None),
                (None, _) => (
                    raw.failure_code,
                    raw.failure_disposition,
                    raw.failure_message,
                ),
            };
            tx.execute(
                "UPDATE runs SET status = ?1, failure_code = ?2, failure_disposition = ?3, \
                 failure_message = ?4, revision = revision + 1, updated_at = ?5 WHERE id = ?6",
                params![t.to.as_str(), code, disp, msg, micros(now()), id.as_str()],
            )
            .map_err(map)?;
            let rec =
                load(&tx, id.as_str(), loc)?.ok_or_else(|| StoreError::RunNotFound(id.clone()))?;
            tx.commit().map_err(map)?;
            rec.decode()
        })
        .await
    }

    async fn reopen_run(&self, id: &RunId, r: Reopen) -> Result<RunRecord, StoreError> {
        let id = id.clone();
        self.with_conn("reopen run", move |conn, loc| {
            let map = |e| schema::classify(e, loc);
            if r.from == RunStatus::Running || !r.from.can_transition_to(RunStatus::Running) {
                return Err(StoreError::IllegalTransition {
                    run: id,
                    from: r.from,
                    to: RunStatus::Running,
                });
            }
            let owner = r.owner.as_ref().map(|o| to_json("encode owner", o)).transpose()?;
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(map)?;
            let raw =
                load(&tx, id.as_str(), loc)?.ok_or_else(|| StoreError::RunNotFound(id.clone()))?;
            queued::check_current(&raw, &id, r.from, r.expected_revision)?;
            tx.execute(
                "UPDATE runs SET status = 'running', failure_code = NULL, failure_disposition = NULL, \
                 failure_message = NULL, owner = ?1, revision = revision + 1, updated_at = ?2 WHERE id = ?3",
                params![owner, micros(now()), id.as_str()],
            )
            .map_err(map)?;
            let rec =
                load(&tx, id.as_str(), loc)?.ok_or_else(|| StoreError::RunNotFound(id.clone()))?;
            tx.commit().map_err(map)?;
            rec.decode()
        })
        .await
    }

    async fn record_admission(
        &self,
        id: &RunId,
        admission: Admission,
        expected_revision: Option<u64>,
    ) -> Result<RunRecord, StoreError> {
        let id = id.clone();
        self.with_conn("record admission", move |conn, loc| {
            let map = |e| schema::classify(e, loc);
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(map)?;
            let raw = load(&tx, id.as_str(), loc)?.ok_or_else(|| StoreError::RunNotFound(id.clone()))?;
            if expected_revision.is_some_and(|r| r != raw.revision as u64) {
                let status = raw
                    .status
                    .parse()
                    .map_err(|e: String| decode_err("decode status", e))?;
                return Err(StoreError::StaleTransition {
                    run: id,
                    expected_status: status,
                    expected_revision,
                    actual_status: status,
                    actual_revision: raw.revision as u64,
                });
            }
            tx.execute(
                "UPDATE runs SET admission = ?1, revision = revision + 1, updated_at = ?2 WHERE id = ?3",
                params![to_json("encode admission", &admission)?, micros(now()), id.as_str()],
            )
            .map_err(map)?;
            let rec = load(&tx, id.as_str(), loc)?
                .ok_or_else(|| StoreError::RunNotFound(id.clone()))?;
            tx.commit().map_err(map)?;
            rec.decode()
        })
        .await
    }

    async fn append_event(
        &self,
        run: &RunId,
        event: EventDraft,
        at_seq: Option<u64>,
    ) -> Result<EventRecord, StoreError> {
        let run = run.clone();
        let rec = self
            .with_conn("append event", move |conn, loc| {
                let map = |e| schema::classify(e, loc);
                check_depth(&run, &event.data)?;
                let data = to_json("encode event data", &event.data)?;
                let node = node_str(&event.node_id)?;
                let tx = conn
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .map_err(map)?;
                if !run_exists(&tx, run.as_str(), loc)? {
                    return Err(StoreError::RunNotFound(run));
                }
                let max: i64 = tx
                    .query_row(
                        "SELECT COALESCE(MAX(seq), 0) FROM events WHERE run_id = ?1",
                        [run.as_str()],
                        |r| r.get(0),
                    )
                    .map_err(map)?;
                let next = max as u64 + 1;
                let seq = match at_seq {
                    None => next,
                    Some(s) if s == next => s,
                    Some(s) if s == 0 || s > next => {
                        return Err(StoreError::SeqGap { run, seq: s, next });
                    }
                    Some(s) => {
                        let row = tx
                            .query_row(
                                "SELECT seq, ts, kind, node_id, data FROM events WHERE run_id = ?1 AND seq = ?2",
                                params![run.as_str(), s as i64],
                                event_row,
                            )
                            .map_err(map)?;
                        let existing = decode_event(&run, row)?;
                        if existing.kind == event.kind
                            && existing.node_id == event.node_id
                            && existing.data == event.data
                        {
                            return Ok((existing, false));
                        }
                        return Err(StoreError::SeqConflict { run, seq: s });
                    }
                };
                let ts = now();
                tx.execute(
                    "INSERT INTO events (run_id, seq, ts, kind, node_id, data) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    params![run.as_str(), seq as i64, micros(ts), event.kind, node, data],
                )
                .map_err(map)?;
                tx.commit().map_err(map)?;
                Ok((
                    EventRecord {
                        seq,
                        timestamp: ts,
                        kind: event.kind,
                        run_id: run,
                        node_id: event.node_id,
                        data: event.data,
                    },
                    true,
                ))
            })
            .await?;
        if rec.1 {
            self.bump();
        }
        Ok(rec.0)
    }

    async fn events_after(
        &self,
        run: &RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let run = run.clone();
        self.with_conn("read events", move |conn, loc| {
            let map = |e| schema::classify(e, loc);
            let limit = if limit == 0 { -1 } else { limit as i64 };
            let mut stmt = conn
                .prepare_cached(
                    "SELECT seq, ts, kind, node_id, data FROM events \
                     WHERE run_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
                )
                .map_err(map)?;
            let rows = stmt
                .query_map(params![run.as_str(), after as i64, limit], event_row)
                .map_err(map)?
                .collect::<Result<Vec<_>, _>>()
                .map_err(map)?;
            if rows.is_empty() && !run_exists(conn, run.as_str(), loc)? {
                return Err(StoreError::RunNotFound(run));
            }
            rows.into_iter().map(|r| decode_event(&run, r)).collect()
        })
        .await
    }

    fn follow_events(&self, run: &RunId, after: u64) -> StoreStream<EventRecord> {
        let store = self.clone();
        let status_store = self.clone();
        let run2 = run.clone();
        iterion_storekit::follow::follow(
            after,
            self.inner.changed.subscribe(),
            move |after| {
                let store = store.clone();
                let run = run2.clone();
                async move { store.events_after(&run, after, 512).await }
            },
            |e: &EventRecord| e.seq,
            {
                let run = run.clone();
                move || {
                    let store = status_store.clone();
                    let run = run.clone();
                    async move { store.load_run(&run).await.map(|r| r.map(|r| r.status)) }
                }
            },
            run.clone(),
        )
    }

    async fn append_logs(&self, run: &RunId, lines: Vec<NewLogLine>) -> Result<u64, StoreError> {
        let run = run.clone();
        let last = self
            .with_conn("append logs", move |conn, loc| {
                let map = |e| schema::classify(e, loc);
                let tx = conn
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .map_err(map)?;
                if !run_exists(&tx, run.as_str(), loc)? {
                    return Err(StoreError::RunNotFound(run));
                }
                let mut seq: i64 = tx
                    .query_row(
                        "SELECT COALESCE(MAX(seq), 0) FROM logs WHERE run_id = ?1",
                        [run.as_str()],
                        |r| r.get(0),
                    )
                    .map_err(map)?;
                let ts = micros(now());
                {
                    let mut stmt = tx
                        .prepare_cached(
                            "INSERT INTO logs (run_id, seq, ts, stream, node_id, line) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                        )
                        .map_err(map)?;
                    for l in &lines {
                        seq += 1;
                        stmt.execute(params![run.as_str(), seq, ts, l.stream, l.node_id, l.line])
                            .map_err(map)?;
                    }
                }
                tx.commit().map_err(map)?;
                Ok(seq as u64)
            })
            .await?;
        self.bump();
        Ok(last)
    }

    async fn logs_after(
        &self,
        run: &RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<LogLine>, StoreError> {
        let run = run.clone();
        self.with_conn("read logs", move |conn, loc| {
            let map = |e| schema::classify(e, loc);
            let limit = if limit == 0 { -1 } else { limit as i64 };
            let mut stmt = conn
                .prepare_cached(
                    "SELECT seq, ts, stream, node_id, line FROM logs \
                     WHERE run_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
                )
                .map_err(map)?;
            let rows = stmt
                .query_map(params![run.as_str(), after as i64, limit], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, i64>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, Option<String>>(3)?,
                        r.get::<_, String>(4)?,
                    ))
                })
                .map_err(map)?
                .collect::<Result<Vec<_>, _>>()
                .map_err(map)?;
            if rows.is_empty() && !run_exists(conn, run.as_str(), loc)? {
                return Err(StoreError::RunNotFound(run));
            }
            rows.into_iter()
                .map(|(seq, ts, stream, node_id, line)| {
                    Ok(LogLine {
                        seq: seq as u64,
                        timestamp: from_micros(ts)?,
                        stream,
                        node_id,
                        line,
                    })
                })
                .collect()
        })
        .await
    }

    fn follow_logs(&self, run: &RunId, after: u64) -> StoreStream<LogLine> {
        let store = self.clone();
        let status_store = self.clone();
        let run2 = run.clone();
        iterion_storekit::follow::follow(
            after,
            self.inner.changed.subscribe(),
            move |after| {
                let store = store.clone();
                let run = run2.clone();
                async move { store.logs_after(&run, after, 512).await }
            },
            |l: &LogLine| l.seq,
            {
                let run = run.clone();
                move || {
                    let store = status_store.clone();
                    let run = run.clone();
                    async move { store.load_run(&run).await.map(|r| r.map(|r| r.status)) }
                }
            },
            run.clone(),
        )
    }

    async fn put_file(
        &self,
        run: &RunId,
        path: &RunFilePath,
        content: ByteStream,
        cap: u64,
    ) -> Result<PutOutcome, StoreError> {
        let id = run.clone();
        if !self
            .with_conn("put file", move |conn, loc| {
                run_exists(conn, id.as_str(), loc)
            })
            .await?
        {
            return Err(StoreError::RunNotFound(run.clone()));
        }
        let area = files::RunArea::new(&self.inner.dir, run);
        let staged = match area.stage(content, cap).await? {
            files::Staged::Over { read } => return Ok(PutOutcome::CapExceeded { read, cap }),
            files::Staged::Ready(staged) => staged,
        };
        let _guard = self.inner.files_lock.lock().await;
        let (size, sha256) = (staged.size, staged.sha256.clone());
        area.commit(staged, path).await?;
        let record = RunFileRecord {
            path: path.clone(),
            size,
            sha256,
            stored_at: now(),
        };
        let rec = record.clone();
        let id = run.clone();
        self.with_conn("put file", move |conn, loc| {
            conn.execute(
                "INSERT INTO run_files (run_id, path, size, sha256, stored_at) VALUES (?1, ?2, ?3, ?4, ?5) \
                 ON CONFLICT (run_id, path) DO UPDATE SET size = excluded.size, sha256 = excluded.sha256, \
                 stored_at = excluded.stored_at",
                params![id.as_str(), rec.path.as_str(), rec.size as i64, rec.sha256, micros(rec.stored_at)],
            )
            .map_err(|e| schema::classify(e, loc))
        })
        .await?;
        Ok(PutOutcome::Stored(record))
    }

    async fn list_files(&self, run: &RunId) -> Result<Vec<RunFileRecord>, StoreError> {
        let run = run.clone();
        self.with_conn("list files", move |conn, loc| {
            let map = |e| schema::classify(e, loc);
            if !run_exists(conn, run.as_str(), loc)? {
                return Err(StoreError::RunNotFound(run));
            }
            let mut stmt = conn
                .prepare_cached(
                    "SELECT path, size, sha256, stored_at FROM run_files WHERE run_id = ?1 ORDER BY path",
                )
                .map_err(map)?;
            let rows = stmt
                .query_map([run.as_str()], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, i64>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, i64>(3)?,
                    ))
                })
                .map_err(map)?
                .collect::<Result<Vec<_>, _>>()
                .map_err(map)?;
            rows.into_iter()
                .map(|(path, size, sha256, at)| {
                    Ok(RunFileRecord {
                        path: RunFilePath::parse(&path)?,
                        size: size as u64,
                        sha256,
                        stored_at: from_micros(at)?,
                    })
                })
                .collect()
        })
        .await
    }

    async fn get_file(&self, run: &RunId, path: &RunFilePath) -> Result<ByteStream, StoreError> {
        let id = run.clone();
        let p = path.clone();
        let known = self
            .with_conn("get file", move |conn, loc| {
                entry_known(
                    conn,
                    &id,
                    "SELECT 1 FROM run_files WHERE run_id = ?1 AND path = ?2",
                    p.as_str(),
                    loc,
                )
            })
            .await?;
        if !known {
            return Err(StoreError::FileNotFound(path.to_string()));
        }
        files::RunArea::new(&self.inner.dir, run).open(path).await
    }

    async fn set_drain(&self, run: &RunId, drain: DrainRecord) -> Result<(), StoreError> {
        let run = run.clone();
        self.with_conn("set drain", move |conn, loc| {
            if !run_exists(conn, run.as_str(), loc)? {
                return Err(StoreError::RunNotFound(run));
            }
            conn.execute(
                "INSERT INTO drains (run_id, record) VALUES (?1, ?2) \
                 ON CONFLICT (run_id) DO UPDATE SET record = excluded.record",
                params![run.as_str(), to_json("encode drain", &drain)?],
            )
            .map_err(|e| schema::classify(e, loc))?;
            Ok(())
        })
        .await
    }

    async fn get_drain(&self, run: &RunId) -> Result<Option<DrainRecord>, StoreError> {
        let run = run.clone();
        self.with_conn("get drain", move |conn, loc| {
            if !run_exists(conn, run.as_str(), loc)? {
                return Err(StoreError::RunNotFound(run));
            }
            let rec: Option<String> = conn
                .query_row(
                    "SELECT record FROM drains WHERE run_id = ?1",
                    [run.as_str()],
                    |r| r.get(0),
                )
                .optional()
                .map_err(|e| schema::classify(e, loc))?;
            json_field("decode drain", rec)
        })
        .await
    }

    async fn put_attachment(
        &self,
        run: &RunId,
        name: &AttachmentName,
        file: &AttachmentFile,
        content: ByteStream,
        cap: u64,
    ) -> Result<AttachmentPut, StoreError> {
        attachments::put(self, run, name, file, content, cap).await
    }

    async fn list_attachments(&self, run: &RunId) -> Result<Vec<AttachmentRecord>, StoreError> {
        attachments::list(self, run).await
    }

    async fn get_attachment(
        &self,
        run: &RunId,
        name: &AttachmentName,
    ) -> Result<ByteStream, StoreError> {
        attachments::get(self, run, name).await
    }
}
