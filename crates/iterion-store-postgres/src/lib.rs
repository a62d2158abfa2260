//! The cloud twin [`RunStore`] on PostgreSQL, selected by a `postgres://`
//! URL in `ITERION_STORE`: runs, events, logs, drain records and run file
//! contents (in 1 MiB chunks) all live in one schema, so a cloud deployment
//! needs nothing but PostgreSQL.
//!
//! The schema is [`DEFAULT_SCHEMA`] unless the URL names one with its own
//! `schema=NAME` query parameter (`postgres://u:pw@db/app?schema=team_a`):
//! two schemas in one database are two independent stores. The name must
//! be `[a-z_][a-z0-9_]{0,62}` (refused otherwise, before any SQL) and is
//! taken out of the URL before tokio-postgres reads it ([`url`]).
//!
//! It owns its schema and migrations ([`schema`]); it does not decide
//! drains or caps, nor interpret events. Concurrency is the database's: an
//! event or log append locks its run row (`SELECT … FOR UPDATE`), allocates
//! the next seq from the per-run counter and inserts in the same
//! transaction, so seqs stay gapless with any number of writers in any
//! number of processes; status transitions are a single conditional
//! `UPDATE … WHERE status = $from AND revision = $rev`.

mod attachments;
mod blobs;
mod db;
mod queued;
mod rows;
pub mod schema;
pub mod url;

pub use db::PostgresStore;
pub use url::{DEFAULT_SCHEMA, StoreUrl, UrlError};

use async_trait::async_trait;

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

use crate::rows::{RUN_COLS, classify, decode_event, decode_run, get};

#[async_trait]
impl RunStore for PostgresStore {
    fn describe(&self) -> String {
        self.describe.clone()
    }

    async fn create_run(&self, run: NewRun) -> Result<RunRecord, StoreError> {
        let c = self.client().await?;
        queued::insert_run(&c, &run).await
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
        let c = self.client().await?;
        c.query_opt(
            &format!("SELECT {RUN_COLS} FROM runs WHERE id = $1"),
            &[&id.as_str()],
        )
        .await
        .map_err(|e| classify(e, "load run"))?
        .as_ref()
        .map(decode_run)
        .transpose()
    }

    async fn list_runs(&self, page: PageRequest) -> Result<Page<RunRecord>, StoreError> {
        let window = Window::of(&page)?;
        let c = self.client().await?;
        let rows = c
            .query(
                &format!("SELECT {RUN_COLS} FROM runs WHERE ord < $1 ORDER BY ord DESC LIMIT $2"),
                &[&window.before, &window.fetch()],
            )
            .await
            .map_err(|e| classify(e, "list runs"))?;
        let rows = rows
            .iter()
            .map(|row| Ok((get::<i64>(row, 13)?, decode_run(row)?)))
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(window.finish(rows))
    }

    async fn transition(&self, id: &RunId, t: Transition) -> Result<RunRecord, StoreError> {
        if !t.from.can_transition_to(t.to) {
            return Err(StoreError::IllegalTransition {
                run: id.clone(),
                from: t.from,
                to: t.to,
            });
        }
        let c = self.client().await?;
        let (code, disp, msg) = match &t.failure {
            Some(f) => (
                Some(f.code.as_str().to_owned()),
                Some(f.disposition.as_str().to_owned()),
                Some(f.message.as_bytes().to_vec()),
            ),
            None => (None, None, None),
        };
        // Re-queued or resumed: the old failure no longer describes the run.
        let clear = t.failure.is_none() && matches!(t.to, RunStatus::Queued | RunStatus::Running);
        let expected = t.expected_revision.map(|r| r as i64);
        let row = c
            .query_opt(
                &format!(
                    "UPDATE runs SET status = $1, \
                     failure_code = CASE WHEN $2::TEXT IS NOT NULL THEN $2 WHEN $5 THEN NULL ELSE failure_code END, \
                     failure_disposition = CASE WHEN $2::TEXT IS NOT NULL THEN $3 WHEN $5 THEN NULL ELSE failure_disposition END, \
                     failure_message = CASE WHEN $2::TEXT IS NOT NULL THEN $4 WHEN $5 THEN NULL ELSE failure_message END, \
                     revision = revision + 1, updated_at = $6 \
                     WHERE id = $7 AND status = $8 AND ($9::BIGINT IS NULL OR revision = $9) \
                     RETURNING {RUN_COLS}"
                ),
                &[
                    &t.to.as_str(),
                    &code,
                    &disp,
                    &msg,
                    &clear,
                    &now(),
                    &id.as_str(),
                    &t.from.as_str(),
                    &expected,
                ],
            )
            .await
            .map_err(|e| classify(e, "transition run"))?;
        if let Some(row) = row {
            return decode_run(&row);
        }
        drop(c);
        Err(self.stale(id, t.from, t.expected_revision).await)
    }

    async fn reopen_run(&self, id: &RunId, r: Reopen) -> Result<RunRecord, StoreError> {
        if r.from == RunStatus::Running || !r.from.can_transition_to(RunStatus::Running) {
            return Err(StoreError::IllegalTransition {
                run: id.clone(),
                from: r.from,
                to: RunStatus::Running,
            });
        }
        let c = self.client().await?;
        let owner = r
            .owner
            .as_ref()
            .map(|o| to_json("encode owner", o))
            .transpose()?;
        let expected = r.expected_revision.map(|x| x as i64);
        let row = c
            .query_opt(
                &format!(
                    "UPDATE runs SET status = 'running', failure_code = NULL, \
                     failure_disposition = NULL, failure_message = NULL, owner = $1, \
                     revision = revision + 1, updated_at = $2 \
                     WHERE id = $3 AND status = $4 AND ($5::BIGINT IS NULL OR revision = $5) \
                     RETURNING {RUN_COLS}"
                ),
                &[&owner, &now(), &id.as_str(), &r.from.as_str(), &expected],
            )
            .await
            .map_err(|e| classify(e, "reopen run"))?;
        if let Some(row) = row {
            return decode_run(&row);
        }
        drop(c);
        Err(self.stale(id, r.from, r.expected_revision).await)
    }

    async fn record_admission(
        &self,
        id: &RunId,
        admission: Admission,
        expected_revision: Option<u64>,
    ) -> Result<RunRecord, StoreError> {
        let c = self.client().await?;
        let expected = expected_revision.map(|r| r as i64);
        let row = c
            .query_opt(
                &format!(
                    "UPDATE runs SET admission = $1, revision = revision + 1, updated_at = $2 \
                     WHERE id = $3 AND ($4::BIGINT IS NULL OR revision = $4) RETURNING {RUN_COLS}"
                ),
                &[
                    &to_json("encode admission", &admission)?,
                    &now(),
                    &id.as_str(),
                    &expected,
                ],
            )
            .await
            .map_err(|e| classify(e, "record admission"))?;
        if let Some(row) = row {
            return decode_run(&row);
        }
        drop(c);
        let current = self
            .load_run(id)
            .await?
            .ok_or_else(|| StoreError::RunNotFound(id.clone()))?;
        Err(StoreError::StaleTransition {
            run: id.clone(),
            expected_status: current.status,
            expected_revision,
            actual_status: current.status,
            actual_revision: current.revision,
        })
    }

    async fn append_event(
        &self,
        run: &RunId,
        event: EventDraft,
        at_seq: Option<u64>,
    ) -> Result<EventRecord, StoreError> {
        let map = |e| classify(e, "append event");
        check_depth(run, &event.data)?;
        let data = to_json("encode event data", &event.data)?;
        let node = event.node_id.as_ref().map(|n| n.as_str().to_owned());
        let mut c = self.client().await?;
        if at_seq.is_none() {
            // The common path in one statement (one round trip, one
            // commit): the UPDATE row-locks the run and bumps its counter,
            // the INSERT uses the new value, both commit or neither does.
            let ts = now();
            let stmt = c
                .prepare_cached(
                    "WITH r AS (UPDATE runs SET event_seq = event_seq + 1 WHERE id = $1 RETURNING event_seq) \
                     INSERT INTO events (run_id, seq, ts, kind, node_id, data) \
                     SELECT $1, event_seq, $2, $3, $4, $5 FROM r RETURNING seq",
                )
                .await
                .map_err(map)?;
            let row = c
                .query_opt(&stmt, &[&run.as_str(), &ts, &event.kind, &node, &data])
                .await
                .map_err(map)?;
            let Some(row) = row else {
                return Err(StoreError::RunNotFound(run.clone()));
            };
            self.bump();
            return Ok(EventRecord {
                seq: get::<i64>(&row, 0)? as u64,
                timestamp: ts,
                kind: event.kind,
                run_id: run.clone(),
                node_id: event.node_id,
                data: event.data,
            });
        }
        let tx = c.transaction().await.map_err(map)?;
        let Some(row) = tx
            .query_opt(
                "SELECT event_seq FROM runs WHERE id = $1 FOR UPDATE",
                &[&run.as_str()],
            )
            .await
            .map_err(map)?
        else {
            return Err(StoreError::RunNotFound(run.clone()));
        };
        let next = get::<i64>(&row, 0)? as u64 + 1;
        let seq = match at_seq {
            None => next,
            Some(s) if s == next => s,
            Some(s) if s == 0 || s > next => {
                return Err(StoreError::SeqGap {
                    run: run.clone(),
                    seq: s,
                    next,
                });
            }
            Some(s) => {
                let row = tx
                    .query_one(
                        "SELECT seq, ts, kind, node_id, data FROM events WHERE run_id = $1 AND seq = $2",
                        &[&run.as_str(), &(s as i64)],
                    )
                    .await
                    .map_err(map)?;
                let existing = decode_event(run, &row)?;
                if existing.kind == event.kind
                    && existing.node_id == event.node_id
                    && existing.data == event.data
                {
                    return Ok(existing);
                }
                return Err(StoreError::SeqConflict {
                    run: run.clone(),
                    seq: s,
                });
            }
        };
        let ts = now();
        tx.execute(
            "INSERT INTO events (run_id, seq, ts, kind, node_id, data) VALUES ($1, $2, $3, $4, $5, $6)",
            &[&run.as_str(), &(seq as i64), &ts, &event.kind, &node, &data],
        )
        .await
        .map_err(map)?;
        tx.execute(
            "UPDATE runs SET event_seq = $2 WHERE id = $1",
            &[&run.as_str(), &(seq as i64)],
        )
        .await
        .map_err(map)?;
        tx.commit().await.map_err(map)?;
        self.bump();
        Ok(EventRecord {
            seq,
            timestamp: ts,
            kind: event.kind,
            run_id: run.clone(),
            node_id: event.node_id,
            data: event.data,
        })
    }

    async fn events_after(
        &self,
        run: &RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let limit: Option<i64> = if limit == 0 { None } else { Some(limit as i64) };
        let rows = {
            let c = self.client().await?;
            c.query(
                "SELECT seq, ts, kind, node_id, data FROM events \
                 WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
                &[&run.as_str(), &(after as i64), &limit],
            )
            .await
            .map_err(|e| classify(e, "read events"))?
        };
        if rows.is_empty() && !self.run_exists(run).await? {
            return Err(StoreError::RunNotFound(run.clone()));
        }
        rows.iter().map(|r| decode_event(run, r)).collect()
    }

    fn follow_events(&self, run: &RunId, after: u64) -> StoreStream<EventRecord> {
        let store = self.clone();
        let status_store = self.clone();
        let run2 = run.clone();
        let run3 = run.clone();
        iterion_storekit::follow::follow(
            after,
            self.changed.subscribe(),
            move |after| {
                let store = store.clone();
                let run = run2.clone();
                async move { store.events_after(&run, after, 512).await }
            },
            |e: &EventRecord| e.seq,
            move || {
                let store = status_store.clone();
                let run = run3.clone();
                async move { store.load_run(&run).await.map(|r| r.map(|r| r.status)) }
            },
            run.clone(),
        )
    }

    async fn append_logs(&self, run: &RunId, lines: Vec<NewLogLine>) -> Result<u64, StoreError> {
        let map = |e| classify(e, "append logs");
        let mut c = self.client().await?;
        let tx = c.transaction().await.map_err(map)?;
        let Some(row) = tx
            .query_opt(
                "SELECT log_seq FROM runs WHERE id = $1 FOR UPDATE",
                &[&run.as_str()],
            )
            .await
            .map_err(map)?
        else {
            return Err(StoreError::RunNotFound(run.clone()));
        };
        let mut seq = get::<i64>(&row, 0)?;
        if lines.is_empty() {
            return Ok(seq as u64);
        }
        let ts = now();
        let stmt = tx
            .prepare(
                "INSERT INTO logs (run_id, seq, ts, stream, node_id, line) VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .await
            .map_err(map)?;
        for l in &lines {
            seq += 1;
            tx.execute(
                &stmt,
                &[
                    &run.as_str(),
                    &seq,
                    &ts,
                    &l.stream,
                    &l.node_id,
                    &l.line.as_bytes(),
                ],
            )
            .await
            .map_err(map)?;
        }
        tx.execute(
            "UPDATE runs SET log_seq = $2 WHERE id = $1",
            &[&run.as_str(), &seq],
        )
        .await
        .map_err(map)?;
        tx.commit().await.map_err(map)?;
        self.bump();
        Ok(seq as u64)
    }

    async fn logs_after(
        &self,
        run: &RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<LogLine>, StoreError> {
        let limit: Option<i64> = if limit == 0 { None } else { Some(limit as i64) };
        let rows = {
            let c = self.client().await?;
            c.query(
                "SELECT seq, ts, stream, node_id, line FROM logs \
                 WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
                &[&run.as_str(), &(after as i64), &limit],
            )
            .await
            .map_err(|e| classify(e, "read logs"))?
        };
        if rows.is_empty() && !self.run_exists(run).await? {
            return Err(StoreError::RunNotFound(run.clone()));
        }
        rows.iter()
            .map(|r| {
                Ok(LogLine {
                    seq: get::<i64>(r, 0)? as u64,
                    timestamp: get(r, 1)?,
                    stream: get(r, 2)?,
                    node_id: get(r, 3)?,
                    line: String::from_utf8(get::<Vec<u8>>(r, 4)?)
                        .map_err(|e| decode_err("decode log line", e.to_string()))?,
                })
            })
            .collect()
    }

    fn follow_logs(&self, run: &RunId, after: u64) -> StoreStream<LogLine> {
        let store = self.clone();
        let status_store = self.clone();
        let run2 = run.clone();
        let run3 = run.clone();
        iterion_storekit::follow::follow(
            after,
            self.changed.subscribe(),
            move |after| {
                let store = store.clone();
                let run = run2.clone();
                async move { store.logs_after(&run, after, 512).await }
            },
            |l: &LogLine| l.seq,
            move || {
                let store = status_store.clone();
                let run = run3.clone();
                async move { store.load_run(&run).await.map(|r| r.map(|r| r.status)) }
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
        let map = |e| classify(e, "put file");
        let mut c = self.client().await?;
        // One transaction for the whole put: over the cap, on a stream error
        // or a lost connection it rolls back and nothing is kept.
        let tx = c.transaction().await.map_err(map)?;
        let (blob_id, read, sha256) = match blobs::write(&tx, run, content, cap).await? {
            blobs::Written::Over { read } => return Ok(PutOutcome::CapExceeded { read, cap }),
            blobs::Written::Blob { id, size, sha256 } => (id, size, sha256),
        };
        // Serialize puts of one run for the path checks and the swap.
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended($1, 7))",
            &[&run.as_str()],
        )
        .await
        .map_err(map)?;
        // Same shape as a file system: a path is a file or a directory,
        // never both, so the CLI can write any listed set to disk.
        let parents: Vec<String> = {
            let parts: Vec<&str> = path.as_str().split('/').collect();
            (1..parts.len()).map(|n| parts[..n].join("/")).collect()
        };
        let clash = tx
            .query_opt(
                "SELECT path FROM run_files WHERE run_id = $1 \
                 AND (path = ANY($2) OR starts_with(path, $3)) LIMIT 1",
                &[&run.as_str(), &parents, &format!("{}/", path.as_str())],
            )
            .await
            .map_err(map)?;
        if clash.is_some() {
            return Err(StoreError::UnsafePath {
                path: path.to_string(),
                reason: "a file cannot also be a directory in the run file area",
            });
        }
        let stored_at = now();
        let old = tx
            .query_opt(
                "SELECT blob_id FROM run_files WHERE run_id = $1 AND path = $2",
                &[&run.as_str(), &path.as_str()],
            )
            .await
            .map_err(map)?;
        tx.execute(
            "INSERT INTO run_files (run_id, path, size, sha256, stored_at, blob_id) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (run_id, path) DO UPDATE SET \
             size = excluded.size, sha256 = excluded.sha256, stored_at = excluded.stored_at, \
             blob_id = excluded.blob_id",
            &[
                &run.as_str(),
                &path.as_str(),
                &(read as i64),
                &sha256,
                &stored_at,
                &blob_id,
            ],
        )
        .await
        .map_err(map)?;
        blobs::drop_replaced(&tx, old).await?;
        tx.commit().await.map_err(map)?;
        Ok(PutOutcome::Stored(RunFileRecord {
            path: path.clone(),
            size: read,
            sha256,
            stored_at,
        }))
    }

    async fn list_files(&self, run: &RunId) -> Result<Vec<RunFileRecord>, StoreError> {
        let rows = {
            let c = self.client().await?;
            c.query(
                "SELECT path, size, sha256, stored_at FROM run_files WHERE run_id = $1 ORDER BY path COLLATE \"C\"",
                &[&run.as_str()],
            )
            .await
            .map_err(|e| classify(e, "list files"))?
        };
        if rows.is_empty() && !self.run_exists(run).await? {
            return Err(StoreError::RunNotFound(run.clone()));
        }
        rows.iter()
            .map(|r| {
                Ok(RunFileRecord {
                    path: RunFilePath::parse(&get::<String>(r, 0)?)?,
                    size: get::<i64>(r, 1)? as u64,
                    sha256: get(r, 2)?,
                    stored_at: get(r, 3)?,
                })
            })
            .collect()
    }

    async fn get_file(&self, run: &RunId, path: &RunFilePath) -> Result<ByteStream, StoreError> {
        let row = {
            let c = self.client().await?;
            c.query_opt(
                "SELECT blob_id, size FROM run_files WHERE run_id = $1 AND path = $2",
                &[&run.as_str(), &path.as_str()],
            )
            .await
            .map_err(|e| classify(e, "get file"))?
        };
        let Some(row) = row else {
            if !self.run_exists(run).await? {
                return Err(StoreError::RunNotFound(run.clone()));
            }
            return Err(StoreError::FileNotFound(path.to_string()));
        };
        let blob_id: i64 = get(&row, 0)?;
        let size = get::<i64>(&row, 1)? as u64;
        Ok(blobs::read(self.pool().clone(), blob_id, size))
    }

    async fn set_drain(&self, run: &RunId, drain: DrainRecord) -> Result<(), StoreError> {
        let c = self.client().await?;
        let n = c
            .execute(
                "INSERT INTO drains (run_id, record) SELECT id, $2 FROM runs WHERE id = $1 \
                 ON CONFLICT (run_id) DO UPDATE SET record = excluded.record",
                &[&run.as_str(), &to_json("encode drain", &drain)?],
            )
            .await
            .map_err(|e| classify(e, "set drain"))?;
        if n == 0 {
            return Err(StoreError::RunNotFound(run.clone()));
        }
        Ok(())
    }

    async fn get_drain(&self, run: &RunId) -> Result<Option<DrainRecord>, StoreError> {
        let row = {
            let c = self.client().await?;
            c.query_opt(
                "SELECT d.record FROM runs r LEFT JOIN drains d ON d.run_id = r.id WHERE r.id = $1",
                &[&run.as_str()],
            )
            .await
            .map_err(|e| classify(e, "get drain"))?
        };
        let Some(row) = row else {
            return Err(StoreError::RunNotFound(run.clone()));
        };
        json_field("decode drain", get(&row, 0)?)
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
        attachments::get_bytes(self, run, name).await
    }
}
