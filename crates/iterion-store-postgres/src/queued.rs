//! What cloud mode adds to the store (issue 13): a run created `queued`
//! with its submission in one transaction, the submission read back by a
//! runner, and a runner's claim on a queued run (compare-and-set on the
//! revision). Decides nothing about queues or leases.

use deadpool_postgres::GenericClient;

use iterion_core::id::RunId;
use iterion_core::store::{Claim, NewRun, RunRecord, Submission};
use iterion_core::{RunStatus, StoreError};
use iterion_storekit::clock::now;
use iterion_storekit::json::{json_field, to_json};

use crate::db::PostgresStore;
use crate::rows::{RUN_COLS, classify, decode_run, enum_str};

/// Insert a `queued` run row (also `create_run`'s body).
pub(crate) async fn insert_run(
    c: &impl GenericClient,
    run: &NewRun,
) -> Result<RunRecord, StoreError> {
    let owner = run
        .owner
        .as_ref()
        .map(|o| to_json("encode owner", o))
        .transpose()?;
    let now = now();
    let res = c
        .query_one(
            &format!(
                "INSERT INTO runs (id, workflow, file, trust, status, owner, revision, created_at, updated_at) \
                 VALUES ($1, $2, $3, $4, 'queued', $5, 1, $6, $6) RETURNING {RUN_COLS}"
            ),
            &[
                &run.id.as_str(),
                &run.workflow,
                &run.file,
                &enum_str("encode trust", &run.trust)?,
                &owner,
                &now,
            ],
        )
        .await;
    match res {
        Ok(row) => decode_run(&row),
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) => {
            Err(StoreError::RunExists(run.id.clone()))
        }
        Err(e) => Err(classify(e, "create run")),
    }
}

impl PostgresStore {
    pub(crate) async fn submit(
        &self,
        run: NewRun,
        submission: Submission,
    ) -> Result<RunRecord, StoreError> {
        let record = to_json("encode submission", &submission)?;
        let mut c = self.client().await?;
        let tx = c
            .transaction()
            .await
            .map_err(|e| classify(e, "submit run"))?;
        let rec = insert_run(&tx, &run).await?;
        tx.execute(
            "INSERT INTO run_submissions (run_id, record) VALUES ($1, $2)",
            &[&run.id.as_str(), &record],
        )
        .await
        .map_err(|e| classify(e, "submit run"))?;
        tx.commit().await.map_err(|e| classify(e, "submit run"))?;
        self.bump();
        Ok(rec)
    }

    pub(crate) async fn submission(&self, id: &RunId) -> Result<Option<Submission>, StoreError> {
        let c = self.client().await?;
        let row = c
            .query_opt(
                "SELECT record FROM run_submissions WHERE run_id = $1",
                &[&id.as_str()],
            )
            .await
            .map_err(|e| classify(e, "load submission"))?;
        match row {
            None => Ok(None),
            Some(row) => json_field(
                "decode submission",
                row.try_get(0).map_err(|e| classify(e, "load submission"))?,
            ),
        }
    }

    pub(crate) async fn claim(&self, id: &RunId, claim: Claim) -> Result<RunRecord, StoreError> {
        let owner = to_json("encode owner", &claim.owner)?;
        let expected = claim.expected_revision.map(|r| r as i64);
        let row = {
            let c = self.client().await?;
            c.query_opt(
                &format!(
                    "UPDATE runs SET owner = $1, revision = revision + 1, updated_at = $2 \
                     WHERE id = $3 AND status = 'queued' AND ($4::BIGINT IS NULL OR revision = $4) \
                     RETURNING {RUN_COLS}"
                ),
                &[&owner, &now(), &id.as_str(), &expected],
            )
            .await
            .map_err(|e| classify(e, "claim run"))?
        };
        match row {
            Some(row) => {
                self.bump();
                decode_run(&row)
            }
            None => Err(self
                .stale(id, RunStatus::Queued, claim.expected_revision)
                .await),
        }
    }
}
