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
mod files;
mod queued;

pub mod schema;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, OpenFlags, OptionalExtension, Row, TransactionBehavior, params};
use time::OffsetDateTime;
use tokio::sync::watch;

use iterion_core::attachment::{AttachmentFile, AttachmentName, AttachmentPut, AttachmentRecord};
use iterion_core::event::{EventDraft, EventRecord};
use iterion_core::failure::RunStatus;
use iterion_core::id::{NodeId, RunId};
use iterion_core::store::{
    Admission, Claim, DrainRecord, Failure, LogLine, NewLogLine, NewRun, Page, PageRequest,
    PutOutcome, Reopen, RunFilePath, RunFileRecord, RunRecord, StoreStream, Submission, Transition,
};
use iterion_core::{ByteStream, RunStore, StoreError};
use iterion_storekit::page::Window;

/// Name of the database file inside the store directory.
pub const DB_FILE: &str = "iterion.db";

/// How long a writer waits for another process's lock before `Unavailable`.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The embedded run store. Cheap to clone.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    dir: PathBuf,
    location: String,
    conn: Mutex<Connection>,
    /// Bumped after every event/log append so in-process followers wake at
    /// once; followers also poll, for appends by other processes.
    changed: watch::Sender<u64>,
    /// Serializes the rename + record update of run files so the record
    /// always describes the file on disk.
    files_lock: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("dir", &self.inner.dir)
            .finish()
    }
}

/// Now, truncated to microseconds: both backends keep exactly what they
/// return (PostgreSQL timestamps have microsecond precision).
pub(crate) fn now() -> OffsetDateTime {
    let t = OffsetDateTime::now_utc();
    t.replace_nanosecond(t.nanosecond() / 1000 * 1000)
        .unwrap_or(t)
}

pub(crate) fn micros(t: OffsetDateTime) -> i64 {
    (t.unix_timestamp_nanos() / 1000) as i64
}

pub(crate) fn from_micros(us: i64) -> Result<OffsetDateTime, StoreError> {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(us) * 1000).map_err(|e| {
        StoreError::Backend {
            operation: "decode timestamp",
            source: Box::new(e),
        }
    })
}

fn decode_err(what: &'static str, msg: String) -> StoreError {
    StoreError::Backend {
        operation: what,
        source: msg.into(),
    }
}

impl SqliteStore {
    /// Open (creating if needed) the store in `dir`.
    ///
    /// Refuses a database file that is not an iterion store
    /// ([`StoreError::Corrupt`]) and one written by a newer iterion
    /// ([`StoreError::SchemaTooNew`]).
    pub fn open(dir: &Path) -> Result<SqliteStore, StoreError> {
        let location = dir.display().to_string();
        files::create_private_dir_all(dir).map_err(|source| StoreError::Io {
            operation: format!("create store directory {location}"),
            source,
        })?;
        let db = dir.join(DB_FILE);
        files::check_sqlite_header(&db, &location)?;
        files::ensure_private_file(&db).map_err(|source| StoreError::Io {
            operation: format!("create {}", db.display()),
            source,
        })?;
        let mut conn = Connection::open_with_flags(
            &db,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| schema::classify(e, &location))?;
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(|e| schema::classify(e, &location))?;
        // Two processes opening a brand-new store at once (a first run and
        // an `iterion runs` polling it) race on the switch to WAL, which
        // answers SQLITE_BUSY without waiting on the busy timeout: retry,
        // bounded by the same timeout (found by the CLI e2e tests).
        let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
        loop {
            match schema::prepare(&mut conn, &location) {
                Err(StoreError::Unavailable { .. }) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                other => break other?,
            }
        }
        let (changed, _) = watch::channel(0);
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                dir: dir.to_owned(),
                location,
                conn: Mutex::new(conn),
                changed,
                files_lock: tokio::sync::Mutex::new(()),
            }),
        })
    }

    /// The store directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Run `f` on the blocking pool with the connection.
    pub(crate) async fn with_conn<T, F>(
        &self,
        operation: &'static str,
        f: F,
    ) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection, &str) -> Result<T, StoreError> + Send + 'static,
    {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            let mut conn = inner.conn.lock().map_err(|_| StoreError::Backend {
                operation,
                source: "store connection poisoned by a panicked writer".into(),
            })?;
            f(&mut conn, &inner.location)
        })
        .await
        .map_err(|e| StoreError::Backend {
            operation,
            source: Box::new(e),
        })?
    }

    /// The lock that keeps a file's record describing the file on disk.
    pub(crate) fn files_lock(&self) -> &tokio::sync::Mutex<()> {
        &self.inner.files_lock
    }

    fn bump(&self) {
        self.inner.changed.send_modify(|v| *v = v.wrapping_add(1));
    }
}

pub(crate) fn run_exists(conn: &Connection, id: &str, loc: &str) -> Result<bool, StoreError> {
    conn.query_row("SELECT 1 FROM runs WHERE id = ?1", [id], |_| Ok(()))
        .optional()
        .map(|o| o.is_some())
        .map_err(|e| schema::classify(e, loc))
}

/// Whether the run holds an entry under `key` (`select`: `SELECT 1 FROM …
/// WHERE run_id = ?1 AND … = ?2`); an unknown run is
/// [`StoreError::RunNotFound`]. What `get_file` and `get_attachment` ask
/// before opening the bytes.
pub(crate) fn entry_known(
    conn: &Connection,
    run: &RunId,
    select: &str,
    key: &str,
    loc: &str,
) -> Result<bool, StoreError> {
    if !run_exists(conn, run.as_str(), loc)? {
        return Err(StoreError::RunNotFound(run.clone()));
    }
    conn.query_row(select, params![run.as_str(), key], |_| Ok(()))
        .optional()
        .map(|o| o.is_some())
        .map_err(|e| schema::classify(e, loc))
}

const RUN_COLS: &str = "id, workflow, file, trust, status, failure_code, failure_disposition, \
     failure_message, admission, owner, revision, created_at, updated_at, ord";

struct RawRun {
    id: String,
    workflow: String,
    file: String,
    trust: String,
    status: String,
    failure_code: Option<String>,
    failure_disposition: Option<String>,
    failure_message: Option<String>,
    admission: Option<String>,
    owner: Option<String>,
    revision: i64,
    created_at: i64,
    updated_at: i64,
    ord: i64,
}

fn raw_run(r: &Row<'_>) -> rusqlite::Result<RawRun> {
    Ok(RawRun {
        id: r.get(0)?,
        workflow: r.get(1)?,
        file: r.get(2)?,
        trust: r.get(3)?,
        status: r.get(4)?,
        failure_code: r.get(5)?,
        failure_disposition: r.get(6)?,
        failure_message: r.get(7)?,
        admission: r.get(8)?,
        owner: r.get(9)?,
        revision: r.get(10)?,
        created_at: r.get(11)?,
        updated_at: r.get(12)?,
        ord: r.get(13)?,
    })
}

fn json_field<T: serde::de::DeserializeOwned>(
    what: &'static str,
    v: Option<String>,
) -> Result<Option<T>, StoreError> {
    v.map(|s| serde_json::from_str(&s).map_err(|e| decode_err(what, e.to_string())))
        .transpose()
}

/// Deepest payload nesting accepted: serde_json refuses to read past 128,
/// so anything deeper would be stored and then never readable.
const MAX_PAYLOAD_DEPTH: usize = 100;

fn too_deep(v: &serde_json::Value, budget: usize) -> bool {
    match v {
        serde_json::Value::Array(a) => budget == 0 || a.iter().any(|x| too_deep(x, budget - 1)),
        serde_json::Value::Object(o) => budget == 0 || o.values().any(|x| too_deep(x, budget - 1)),
        _ => false,
    }
}

fn to_json<T: serde::Serialize>(what: &'static str, v: &T) -> Result<String, StoreError> {
    serde_json::to_string(v).map_err(|e| decode_err(what, e.to_string()))
}

impl RawRun {
    fn decode(self) -> Result<RunRecord, StoreError> {
        let quoted = |s: &str| serde_json::Value::String(s.to_owned());
        let failure = match self.failure_code {
            Some(code) => Some(Failure {
                code: serde_json::from_value(quoted(&code))
                    .map_err(|e| decode_err("decode failure code", e.to_string()))?,
                disposition: serde_json::from_value(quoted(
                    self.failure_disposition.as_deref().unwrap_or("unknown"),
                ))
                .map_err(|e| decode_err("decode disposition", e.to_string()))?,
                message: self.failure_message.unwrap_or_default(),
            }),
            None => None,
        };
        Ok(RunRecord {
            id: RunId::parse(self.id).map_err(|e| decode_err("decode run id", e.to_string()))?,
            workflow: self.workflow,
            file: self.file,
            trust: serde_json::from_value(quoted(&self.trust))
                .map_err(|e| decode_err("decode trust", e.to_string()))?,
            status: self
                .status
                .parse()
                .map_err(|e: String| decode_err("decode status", e))?,
            failure,
            admission: json_field("decode admission", self.admission)?,
            owner: json_field("decode owner", self.owner)?,
            revision: self.revision as u64,
            created_at: from_micros(self.created_at)?,
            updated_at: from_micros(self.updated_at)?,
        })
    }
}

fn load(conn: &Connection, id: &str, loc: &str) -> Result<Option<RawRun>, StoreError> {
    conn.query_row(
        &format!("SELECT {RUN_COLS} FROM runs WHERE id = ?1"),
        [id],
        raw_run,
    )
    .optional()
    .map_err(|e| schema::classify(e, loc))
}

fn trust_str(t: iterion_core::Trust) -> Result<String, StoreError> {
    match serde_json::to_value(t) {
        Ok(serde_json::Value::String(s)) => Ok(s),
        other => Err(decode_err("encode trust", format!("{other:?}"))),
    }
}

fn event_row(r: &Row<'_>) -> rusqlite::Result<(i64, i64, String, Option<String>, String)> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
}

fn decode_event(
    run: &RunId,
    (seq, ts, kind, node, data): (i64, i64, String, Option<String>, String),
) -> Result<EventRecord, StoreError> {
    Ok(EventRecord {
        seq: seq as u64,
        timestamp: from_micros(ts)?,
        kind,
        run_id: run.clone(),
        node_id: node.map(NodeId::new),
        data: serde_json::from_str(&data)
            .map_err(|e| decode_err("decode event data", e.to_string()))?,
    })
}

fn node_str(n: &Option<NodeId>) -> Result<Option<String>, StoreError> {
    Ok(n.as_ref().map(|n| n.as_str().to_owned()))
}

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
                if too_deep(&event.data, MAX_PAYLOAD_DEPTH) {
                    return Err(StoreError::InvalidPayload {
                        run: run.clone(),
                        reason: "nested deeper than 100 arrays/objects",
                    });
                }
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
