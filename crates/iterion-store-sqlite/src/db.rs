//! The store's handle: its directory, its one connection (used on the
//! blocking pool), the wake-up of in-process followers and the lock that
//! keeps a run file's record describing the file on disk. Opening it
//! creates the private directory and runs the migrations.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use tokio::sync::watch;

use iterion_core::StoreError;

use crate::{files, schema};

/// Name of the database file inside the store directory.
pub const DB_FILE: &str = "iterion.db";

/// How long a writer waits for another process's lock before `Unavailable`.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The embedded run store. Cheap to clone.
#[derive(Clone)]
pub struct SqliteStore {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) dir: PathBuf,
    pub(crate) location: String,
    pub(crate) conn: Mutex<Connection>,
    /// Bumped after every event/log append so in-process followers wake at
    /// once; followers also poll, for appends by other processes.
    pub(crate) changed: watch::Sender<u64>,
    /// Serializes the rename + record update of run files so the record
    /// always describes the file on disk.
    pub(crate) files_lock: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("dir", &self.inner.dir)
            .finish()
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

    pub(crate) fn bump(&self) {
        self.inner.changed.send_modify(|v| *v = v.wrapping_add(1));
    }
}
