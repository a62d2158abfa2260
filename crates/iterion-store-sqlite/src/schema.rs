//! Versioned migrations of the embedded store and the checks that refuse a
//! file that is not ours (a text file, another application's database) or a
//! schema newer than this binary.
//!
//! The version lives in `PRAGMA user_version` (read without parsing any
//! table) and is mirrored, with the time it was applied, in
//! `schema_version` for humans. `PRAGMA application_id` marks the file as an
//! iterion store, so a foreign SQLite database is told apart from a fresh one.

use rusqlite::{Connection, TransactionBehavior};

use iterion_core::StoreError;

/// `'iter'` in ASCII: marks the database file as an iterion store.
pub const APPLICATION_ID: i64 = 0x6974_6572;

/// Migrations, in order; index + 1 is the version each one produces.
const MIGRATIONS: &[&str] = &[
    // v1: runs, events, logs, run files, drain records.
    r#"
    CREATE TABLE schema_version (
        version    INTEGER NOT NULL PRIMARY KEY,
        applied_at INTEGER NOT NULL
    );
    CREATE TABLE runs (
        ord                 INTEGER PRIMARY KEY AUTOINCREMENT,
        id                  TEXT NOT NULL UNIQUE,
        workflow            TEXT NOT NULL,
        file                TEXT NOT NULL,
        trust               TEXT NOT NULL,
        status              TEXT NOT NULL,
        failure_code        TEXT,
        failure_disposition TEXT,
        failure_message     TEXT,
        admission           TEXT,
        owner               TEXT,
        revision            INTEGER NOT NULL,
        created_at          INTEGER NOT NULL,
        updated_at          INTEGER NOT NULL
    );
    CREATE TABLE events (
        run_id  TEXT NOT NULL REFERENCES runs(id),
        seq     INTEGER NOT NULL,
        ts      INTEGER NOT NULL,
        kind    TEXT NOT NULL,
        node_id TEXT,
        data    TEXT NOT NULL,
        PRIMARY KEY (run_id, seq)
    ) WITHOUT ROWID;
    CREATE TABLE logs (
        run_id  TEXT NOT NULL REFERENCES runs(id),
        seq     INTEGER NOT NULL,
        ts      INTEGER NOT NULL,
        stream  TEXT NOT NULL,
        node_id TEXT,
        line    TEXT NOT NULL,
        PRIMARY KEY (run_id, seq)
    ) WITHOUT ROWID;
    CREATE TABLE run_files (
        run_id    TEXT NOT NULL REFERENCES runs(id),
        path      TEXT NOT NULL,
        size      INTEGER NOT NULL,
        sha256    TEXT NOT NULL,
        stored_at INTEGER NOT NULL,
        PRIMARY KEY (run_id, path)
    ) WITHOUT ROWID;
    CREATE TABLE drains (
        run_id TEXT NOT NULL PRIMARY KEY REFERENCES runs(id),
        record TEXT NOT NULL
    );
    "#,
    // v2 (issue 13, cloud mode): what `iterion submit` recorded with a
    // queued run, one JSON document per run (`iterion_core::store::Submission`).
    r#"
    CREATE TABLE run_submissions (
        run_id TEXT NOT NULL PRIMARY KEY REFERENCES runs(id),
        record TEXT NOT NULL
    );
    "#,
    // v3 (issue 14 item 5): a run's attachments, their bytes under
    // `runs/<RUN_ID>/attachments/<NAME>` like the run files.
    r#"
    CREATE TABLE run_attachments (
        run_id    TEXT NOT NULL REFERENCES runs(id),
        name      TEXT NOT NULL,
        file      TEXT NOT NULL,
        size      INTEGER NOT NULL,
        sha256    TEXT NOT NULL,
        stored_at INTEGER NOT NULL,
        PRIMARY KEY (run_id, name)
    ) WITHOUT ROWID;
    "#,
];

/// The highest schema version this binary knows.
pub const SUPPORTED_VERSION: i64 = MIGRATIONS.len() as i64;

/// Refuse a foreign or too-new database, then bring ours up to date.
pub fn prepare(conn: &mut Connection, location: &str) -> Result<(), StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt {
        location: location.to_owned(),
        reason,
    };
    let map = |e: rusqlite::Error| classify(e, location);

    // One read snapshot: read one by one, a concurrent first open that
    // commits between them shows tables without the application id yet
    // (seen as STORE_CORRUPT by the CLI e2e tests).
    let (app_id, version, objects) = {
        let tx = conn.transaction().map_err(map)?;
        let app_id: i64 = tx
            .query_row("PRAGMA application_id", [], |r| r.get(0))
            .map_err(map)?;
        let version: i64 = tx
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(map)?;
        let objects: i64 = tx
            .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
            .map_err(map)?;
        tx.commit().map_err(map)?;
        (app_id, version, objects)
    };
    if app_id != 0 && app_id != APPLICATION_ID {
        return Err(corrupt(format!(
            "the SQLite file belongs to another application (application_id {app_id:#x})"
        )));
    }
    if app_id == 0 && objects > 0 {
        return Err(corrupt(
            "the SQLite file holds tables but is not an iterion store".to_owned(),
        ));
    }
    if version > SUPPORTED_VERSION {
        return Err(StoreError::SchemaTooNew {
            found: version,
            supported: SUPPORTED_VERSION,
        });
    }

    // WAL: readers (`iterion events --follow`) never block the writer, and a
    // killed writer leaves the last committed transaction intact.
    let mode: String = conn
        .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
        .map_err(map)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(corrupt(format!("cannot enable WAL (journal_mode {mode})")));
    }
    // FULL: an acknowledged append survives power loss, not only a crash.
    conn.execute_batch("PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;")
        .map_err(map)?;

    if version == SUPPORTED_VERSION {
        return Ok(());
    }
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(map)?;
    // Another process may have migrated between our read and the lock.
    let current: i64 = tx
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(map)?;
    if current > SUPPORTED_VERSION {
        return Err(StoreError::SchemaTooNew {
            found: current,
            supported: SUPPORTED_VERSION,
        });
    }
    let now = crate::clock::micros(iterion_storekit::clock::now());
    for (idx, sql) in MIGRATIONS.iter().enumerate().skip(current as usize) {
        let v = idx as i64 + 1;
        tx.execute_batch(sql).map_err(map)?;
        tx.execute(
            "INSERT INTO schema_version (version, applied_at) VALUES (?1, ?2)",
            rusqlite::params![v, now],
        )
        .map_err(map)?;
    }
    tx.execute_batch(&format!(
        "PRAGMA user_version = {SUPPORTED_VERSION}; PRAGMA application_id = {APPLICATION_ID};"
    ))
    .map_err(map)?;
    tx.commit().map_err(map)
}

/// Map an SQLite error to the store vocabulary: a file that is not a
/// database is `Corrupt`, a locked/busy one `Unavailable`, the rest `Backend`.
pub fn classify(e: rusqlite::Error, location: &str) -> StoreError {
    use rusqlite::ErrorCode;
    match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) | Some(ErrorCode::DatabaseCorrupt) => StoreError::Corrupt {
            location: location.to_owned(),
            reason: e.to_string(),
        },
        Some(ErrorCode::DatabaseBusy) | Some(ErrorCode::DatabaseLocked) => {
            StoreError::Unavailable {
                reason: format!("{location} is locked by another process"),
                source: Some(Box::new(e)),
            }
        }
        _ => StoreError::Backend {
            operation: "sqlite",
            source: Box::new(e),
        },
    }
}
