//! One reading of a PostgreSQL error (`classify`: transient or not), and
//! rows to records and back: the run row's columns, events and enum words
//! (JSON columns and the payload depth are storekit's). Knows the schema's
//! columns, not the store's pool.

use tokio_postgres::Row;

use iterion_core::StoreError;
use iterion_core::event::EventRecord;
use iterion_core::id::{NodeId, RunId};
use iterion_core::store::{Failure, RunRecord};
use iterion_storekit::json::{decode_err, json_field};

/// Quote an identifier we validated ourselves.
pub(crate) fn ident(name: &str) -> String {
    format!("\"{name}\"")
}

/// Map a PostgreSQL error: lost connection / server shutting down →
/// `Unavailable` (transient; retry), anything else → `Backend`.
pub(crate) fn classify(e: tokio_postgres::Error, operation: &'static str) -> StoreError {
    let unavailable = match e.code() {
        None => true,
        Some(code) => {
            let c = code.code();
            c.starts_with("08") || c.starts_with("57P") || c == "53300"
        }
    };
    if unavailable || e.is_closed() {
        StoreError::Unavailable {
            reason: format!("PostgreSQL connection lost during {operation}"),
            source: Some(Box::new(e)),
        }
    } else {
        StoreError::Backend {
            operation,
            source: Box::new(e),
        }
    }
}

pub(crate) fn pool_err(e: deadpool_postgres::PoolError) -> StoreError {
    StoreError::Unavailable {
        reason: "cannot get a PostgreSQL connection".to_owned(),
        source: Some(Box::new(e)),
    }
}

pub(crate) fn enum_str<T: serde::Serialize>(
    what: &'static str,
    v: &T,
) -> Result<String, StoreError> {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => Ok(s),
        other => Err(decode_err(what, format!("{other:?}"))),
    }
}

pub(crate) fn enum_from<T: serde::de::DeserializeOwned>(
    what: &'static str,
    s: &str,
) -> Result<T, StoreError> {
    serde_json::from_value(serde_json::Value::String(s.to_owned()))
        .map_err(|e| decode_err(what, e.to_string()))
}

pub(crate) const RUN_COLS: &str = "id, workflow, file, trust, status, failure_code, failure_disposition, \
     failure_message, admission, owner, revision, created_at, updated_at, ord";

pub(crate) fn get<'a, T: tokio_postgres::types::FromSql<'a>>(
    row: &'a Row,
    idx: usize,
) -> Result<T, StoreError> {
    row.try_get(idx).map_err(|e| classify(e, "decode row"))
}

pub(crate) fn decode_run(row: &Row) -> Result<RunRecord, StoreError> {
    let failure = match get::<Option<String>>(row, 5)? {
        Some(code) => Some(Failure {
            code: enum_from("decode failure code", &code)?,
            disposition: enum_from(
                "decode disposition",
                get::<Option<String>>(row, 6)?
                    .as_deref()
                    .unwrap_or("unknown"),
            )?,
            message: get::<Option<Vec<u8>>>(row, 7)?
                .map(String::from_utf8)
                .transpose()
                .map_err(|e| decode_err("decode failure message", e.to_string()))?
                .unwrap_or_default(),
        }),
        None => None,
    };
    Ok(RunRecord {
        id: RunId::parse(get::<String>(row, 0)?)
            .map_err(|e| decode_err("decode run id", e.to_string()))?,
        workflow: get(row, 1)?,
        file: get(row, 2)?,
        trust: enum_from("decode trust", &get::<String>(row, 3)?)?,
        status: get::<String>(row, 4)?
            .parse()
            .map_err(|e: String| decode_err("decode status", e))?,
        failure,
        admission: json_field("decode admission", get(row, 8)?)?,
        owner: json_field("decode owner", get(row, 9)?)?,
        revision: get::<i64>(row, 10)? as u64,
        created_at: get(row, 11)?,
        updated_at: get(row, 12)?,
    })
}

pub(crate) fn decode_event(run: &RunId, row: &Row) -> Result<EventRecord, StoreError> {
    Ok(EventRecord {
        seq: get::<i64>(row, 0)? as u64,
        timestamp: get(row, 1)?,
        kind: get(row, 2)?,
        run_id: run.clone(),
        node_id: get::<Option<String>>(row, 3)?.map(NodeId::new),
        data: serde_json::from_str(&get::<String>(row, 4)?)
            .map_err(|e| decode_err("decode event data", e.to_string()))?,
    })
}
