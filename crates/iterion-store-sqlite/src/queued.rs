//! What cloud mode adds to the store (issue 13): a run created `queued`
//! with its submission in one transaction, the submission read back by a
//! runner, and a runner's claim on a queued run (compare-and-set on the
//! revision). The embedded store implements them too, so the seam has one
//! contract (`store_conformance!`), though only PostgreSQL is a cloud store.

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use iterion_core::id::RunId;
use iterion_core::store::{Claim, NewRun, RunRecord, Submission};
use iterion_core::{RunStatus, StoreError};
use iterion_storekit::clock::now;
use iterion_storekit::json::{decode_err, json_field, to_json};

use crate::clock::micros;
use crate::db::SqliteStore;
use crate::rows::{RawRun, load, trust_str};
use crate::schema;

/// Insert a `queued` run row (also `create_run`'s body).
pub(crate) fn insert_run(conn: &Connection, run: &NewRun, loc: &str) -> Result<(), StoreError> {
    let owner = run
        .owner
        .as_ref()
        .map(|o| to_json("encode owner", o))
        .transpose()?;
    let res = conn.execute(
        "INSERT INTO runs (id, workflow, file, trust, status, owner, revision, created_at, updated_at) \
         VALUES (?1, ?2, ?3, ?4, 'queued', ?5, 1, ?6, ?6)",
        params![
            run.id.as_str(),
            run.workflow,
            run.file,
            trust_str(run.trust)?,
            owner,
            micros(now())
        ],
    );
    match res {
        Ok(_) => Ok(()),
        Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::ConstraintViolation) => {
            Err(StoreError::RunExists(run.id.clone()))
        }
        Err(e) => Err(schema::classify(e, loc)),
    }
}

/// The compare-and-set check every status change makes inside its
/// transaction: the run still has the status and revision the caller read.
pub(crate) fn check_current(
    raw: &RawRun,
    id: &RunId,
    expected_status: RunStatus,
    expected_revision: Option<u64>,
) -> Result<RunStatus, StoreError> {
    let current: RunStatus = raw
        .status
        .parse()
        .map_err(|e: String| decode_err("decode status", e))?;
    let revision = raw.revision as u64;
    if current != expected_status || expected_revision.is_some_and(|r| r != revision) {
        return Err(StoreError::StaleTransition {
            run: id.clone(),
            expected_status,
            expected_revision,
            actual_status: current,
            actual_revision: revision,
        });
    }
    Ok(current)
}

impl SqliteStore {
    pub(crate) async fn submit(
        &self,
        run: NewRun,
        submission: Submission,
    ) -> Result<RunRecord, StoreError> {
        let record = to_json("encode submission", &submission)?;
        let rec = self
            .with_conn("submit run", move |conn, loc| {
                let map = |e| schema::classify(e, loc);
                let tx = conn
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .map_err(map)?;
                insert_run(&tx, &run, loc)?;
                tx.execute(
                    "INSERT INTO run_submissions (run_id, record) VALUES (?1, ?2)",
                    params![run.id.as_str(), record],
                )
                .map_err(map)?;
                let rec = load(&tx, run.id.as_str(), loc)?
                    .ok_or_else(|| StoreError::RunNotFound(run.id.clone()))?;
                tx.commit().map_err(map)?;
                rec.decode()
            })
            .await?;
        self.bump();
        Ok(rec)
    }

    pub(crate) async fn submission(&self, id: &RunId) -> Result<Option<Submission>, StoreError> {
        let id = id.clone();
        self.with_conn("load submission", move |conn, loc| {
            let raw: Option<String> = conn
                .query_row(
                    "SELECT record FROM run_submissions WHERE run_id = ?1",
                    [id.as_str()],
                    |r| r.get(0),
                )
                .optional()
                .map_err(|e| schema::classify(e, loc))?;
            json_field("decode submission", raw)
        })
        .await
    }

    pub(crate) async fn claim(&self, id: &RunId, claim: Claim) -> Result<RunRecord, StoreError> {
        let id = id.clone();
        let rec = self
            .with_conn("claim run", move |conn, loc| {
                let map = |e| schema::classify(e, loc);
                let owner = to_json("encode owner", &claim.owner)?;
                let tx = conn
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .map_err(map)?;
                let raw = load(&tx, id.as_str(), loc)?
                    .ok_or_else(|| StoreError::RunNotFound(id.clone()))?;
                check_current(&raw, &id, RunStatus::Queued, claim.expected_revision)?;
                tx.execute(
                    "UPDATE runs SET owner = ?1, revision = revision + 1, updated_at = ?2 WHERE id = ?3",
                    params![owner, micros(now()), id.as_str()],
                )
                .map_err(map)?;
                let rec = load(&tx, id.as_str(), loc)?
                    .ok_or_else(|| StoreError::RunNotFound(id.clone()))?;
                tx.commit().map_err(map)?;
                rec.decode()
            })
            .await?;
        self.bump();
        Ok(rec)
    }
}
