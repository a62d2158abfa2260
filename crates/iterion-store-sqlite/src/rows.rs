//! Rows to records and back: the run row's columns and decoding, event
//! rows, and the existence checks the file and attachment reads ask first
//! (JSON columns and the payload depth are storekit's). Knows the schema's
//! columns, not the store's connection.

use rusqlite::{Connection, OptionalExtension, Row, params};

use iterion_core::StoreError;
use iterion_core::event::EventRecord;
use iterion_core::id::{NodeId, RunId};
use iterion_core::store::{Failure, RunRecord};
use iterion_storekit::json::{decode_err, json_field};

use crate::clock::from_micros;
use crate::schema;

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

pub(crate) const RUN_COLS: &str = "id, workflow, file, trust, status, failure_code, failure_disposition, \
     failure_message, admission, owner, revision, created_at, updated_at, ord";

pub(crate) struct RawRun {
    pub(crate) id: String,
    pub(crate) workflow: String,
    pub(crate) file: String,
    pub(crate) trust: String,
    pub(crate) status: String,
    pub(crate) failure_code: Option<String>,
    pub(crate) failure_disposition: Option<String>,
    pub(crate) failure_message: Option<String>,
    pub(crate) admission: Option<String>,
    pub(crate) owner: Option<String>,
    pub(crate) revision: i64,
    pub(crate) created_at: i64,
    pub(crate) updated_at: i64,
    pub(crate) ord: i64,
}

pub(crate) fn raw_run(r: &Row<'_>) -> rusqlite::Result<RawRun> {
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

impl RawRun {
    pub(crate) fn decode(self) -> Result<RunRecord, StoreError> {
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

pub(crate) fn load(conn: &Connection, id: &str, loc: &str) -> Result<Option<RawRun>, StoreError> {
    conn.query_row(
        &format!("SELECT {RUN_COLS} FROM runs WHERE id = ?1"),
        [id],
        raw_run,
    )
    .optional()
    .map_err(|e| schema::classify(e, loc))
}

pub(crate) fn trust_str(t: iterion_core::Trust) -> Result<String, StoreError> {
    match serde_json::to_value(t) {
        Ok(serde_json::Value::String(s)) => Ok(s),
        other => Err(decode_err("encode trust", format!("{other:?}"))),
    }
}

pub(crate) fn event_row(
    r: &Row<'_>,
) -> rusqlite::Result<(i64, i64, String, Option<String>, String)> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
}

pub(crate) fn decode_event(
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

pub(crate) fn node_str(n: &Option<NodeId>) -> Result<Option<String>, StoreError> {
    Ok(n.as_ref().map(|n| n.as_str().to_owned()))
}
