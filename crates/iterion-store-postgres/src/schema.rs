//! Versioned migrations of the PostgreSQL store, applied under an advisory
//! lock so several runners starting at once migrate exactly once.
//!
//! Everything lives in one schema (default `iterion`), so tests and tenants
//! can be isolated by schema name. A schema that holds tables but no
//! `schema_version` is someone else's and is refused; a version above
//! [`SUPPORTED_VERSION`] means a newer iterion wrote it.

use deadpool_postgres::Client;

use iterion_core::StoreError;

use crate::rows::{classify, ident};

/// Migrations, in order; index + 1 is the version each one produces.
const MIGRATIONS: &[&str] = &[
    // v1. `event_seq`/`log_seq` are the per-run counters: an append locks
    // the run row, so seq allocation and insert commit together (gapless
    // under concurrent writers in any number of processes). Log lines and
    // failure messages are BYTEA: process output (and errors quoting it)
    // may hold NUL, which PostgreSQL TEXT cannot.
    r#"
    CREATE TABLE runs (
        ord                 BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
        id                  TEXT PRIMARY KEY,
        workflow            TEXT NOT NULL,
        file                TEXT NOT NULL,
        trust               TEXT NOT NULL,
        status              TEXT NOT NULL,
        failure_code        TEXT,
        failure_disposition TEXT,
        failure_message     BYTEA,
        admission           TEXT,
        owner               TEXT,
        revision            BIGINT NOT NULL,
        created_at          TIMESTAMPTZ NOT NULL,
        updated_at          TIMESTAMPTZ NOT NULL,
        event_seq           BIGINT NOT NULL DEFAULT 0,
        log_seq             BIGINT NOT NULL DEFAULT 0
    );
    CREATE TABLE events (
        run_id  TEXT NOT NULL REFERENCES runs(id),
        seq     BIGINT NOT NULL,
        ts      TIMESTAMPTZ NOT NULL,
        kind    TEXT NOT NULL,
        node_id TEXT,
        data    TEXT NOT NULL,
        PRIMARY KEY (run_id, seq)
    );
    CREATE TABLE logs (
        run_id  TEXT NOT NULL REFERENCES runs(id),
        seq     BIGINT NOT NULL,
        ts      TIMESTAMPTZ NOT NULL,
        stream  TEXT NOT NULL,
        node_id TEXT,
        line    BYTEA NOT NULL,
        PRIMARY KEY (run_id, seq)
    );
    CREATE TABLE file_blobs (
        id     BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        run_id TEXT NOT NULL REFERENCES runs(id)
    );
    CREATE TABLE file_chunks (
        blob_id BIGINT NOT NULL REFERENCES file_blobs(id) ON DELETE CASCADE,
        idx     INTEGER NOT NULL,
        data    BYTEA NOT NULL,
        PRIMARY KEY (blob_id, idx)
    );
    CREATE TABLE run_files (
        run_id    TEXT NOT NULL REFERENCES runs(id),
        path      TEXT NOT NULL,
        size      BIGINT NOT NULL,
        sha256    TEXT NOT NULL,
        stored_at TIMESTAMPTZ NOT NULL,
        blob_id   BIGINT NOT NULL REFERENCES file_blobs(id),
        PRIMARY KEY (run_id, path)
    );
    CREATE TABLE drains (
        run_id TEXT PRIMARY KEY REFERENCES runs(id),
        record TEXT NOT NULL
    );
    "#,
    // v2 (issue 13, cloud mode): what `iterion submit` recorded with a
    // queued run, one JSON document per run (`iterion_core::store::Submission`).
    r#"
    CREATE TABLE run_submissions (
        run_id TEXT PRIMARY KEY REFERENCES runs(id),
        record TEXT NOT NULL
    );
    "#,
    // v3 (issue 14 item 5): a run's attachments, their bytes in a blob
    // like a run file's.
    r#"
    CREATE TABLE run_attachments (
        run_id    TEXT NOT NULL REFERENCES runs(id),
        name      TEXT NOT NULL,
        file      TEXT NOT NULL,
        size      BIGINT NOT NULL,
        sha256    TEXT NOT NULL,
        stored_at TIMESTAMPTZ NOT NULL,
        blob_id   BIGINT NOT NULL REFERENCES file_blobs(id),
        PRIMARY KEY (run_id, name)
    );
    "#,
];

/// The highest schema version this binary knows.
pub const SUPPORTED_VERSION: i64 = MIGRATIONS.len() as i64;

/// Create the schema if needed, refuse a foreign or too-new one, migrate.
pub async fn prepare(client: &mut Client, schema: &str, location: &str) -> Result<(), StoreError> {
    let map = |e| classify(e, "migrate");
    let tx = client.transaction().await.map_err(map)?;
    match migrate(&tx, schema, location).await {
        Ok(()) => tx.commit().await.map_err(map),
        Err(e) => {
            // Roll back now, not on drop: a refused store must not leave a
            // transaction (and its locks) open until the pool goes away.
            let _ = tx.rollback().await;
            Err(e)
        }
    }
}

async fn migrate(
    tx: &deadpool_postgres::Transaction<'_>,
    schema: &str,
    location: &str,
) -> Result<(), StoreError> {
    let map = |e| classify(e, "migrate");
    // One migrator per schema at a time, across processes.
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended($1, 1))",
        &[&format!("iterion-migrate:{schema}")],
    )
    .await
    .map_err(map)?;
    tx.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {}", ident(schema)))
        .await
        .map_err(map)?;
    let has_version: bool = tx
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM information_schema.tables \
             WHERE table_schema = $1 AND table_name = 'schema_version')",
            &[&schema],
        )
        .await
        .map_err(map)?
        .try_get(0)
        .map_err(map)?;
    let current: i64 = if has_version {
        tx.query_one(
            &format!(
                "SELECT COALESCE(MAX(version), 0)::BIGINT FROM {}.schema_version",
                ident(schema)
            ),
            &[],
        )
        .await
        .map_err(map)?
        .try_get(0)
        .map_err(map)?
    } else {
        let tables: i64 = tx
            .query_one(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = $1",
                &[&schema],
            )
            .await
            .map_err(map)?
            .try_get(0)
            .map_err(map)?;
        if tables > 0 {
            return Err(StoreError::Corrupt {
                location: location.to_owned(),
                reason: format!("schema {schema} holds tables but is not an iterion store"),
            });
        }
        tx.batch_execute(&format!(
            "CREATE TABLE {}.schema_version (version BIGINT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
            ident(schema)
        ))
        .await
        .map_err(map)?;
        0
    };
    if current > SUPPORTED_VERSION {
        return Err(StoreError::SchemaTooNew {
            found: current,
            supported: SUPPORTED_VERSION,
        });
    }
    tx.batch_execute(&format!("SET LOCAL search_path TO {}", ident(schema)))
        .await
        .map_err(map)?;
    for (idx, sql) in MIGRATIONS.iter().enumerate().skip(current as usize) {
        let v = idx as i64 + 1;
        tx.batch_execute(sql).await.map_err(map)?;
        tx.execute("INSERT INTO schema_version (version) VALUES ($1)", &[&v])
            .await
            .map_err(map)?;
    }
    Ok(())
}
