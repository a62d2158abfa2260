//! The real stores every test drains into: the embedded `SqliteStore` in a
//! temp dir, and its cloud twin `PostgresStore` in a fresh schema of the
//! test server (facts §10 R10), dropped when the test ends.

use std::sync::Arc;

use iterion_core::store::NewRun;
use iterion_core::{RunId, RunStore, Trust};
use iterion_store_postgres::PostgresStore;
use iterion_store_sqlite::SqliteStore;

/// Which store backend a test drains into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The embedded store, in a temp dir.
    Sqlite,
    /// The cloud twin (`ITERION_TEST_POSTGRES_URL`), one schema per test.
    Postgres,
}

/// A store and what keeps its backing resources alive.
pub struct TestStore {
    pub store: Arc<dyn RunStore>,
    #[allow(dead_code)] // dropped with the test: temp dir or schema
    guard: Guard,
}

enum Guard {
    Dir(#[allow(dead_code)] tempfile::TempDir),
    Schema(#[allow(dead_code)] SchemaGuard),
}

/// A fresh store on the default (embedded) backend.
pub async fn new_store() -> TestStore {
    new_store_on(Backend::Sqlite).await
}

/// A fresh store on `backend`.
pub async fn new_store_on(backend: Backend) -> TestStore {
    match backend {
        Backend::Sqlite => {
            let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
            let store = SqliteStore::open(dir.path())
                .unwrap_or_else(|e| panic!("open the SQLite store: {e}"));
            TestStore {
                store: Arc::new(store),
                guard: Guard::Dir(dir),
            }
        }
        Backend::Postgres => {
            let url = std::env::var("ITERION_TEST_POSTGRES_URL").unwrap_or_else(|_| {
                panic!("ITERION_TEST_POSTGRES_URL is not set: run scripts/test.sh (it starts PostgreSQL)")
            });
            let r: [u8; 6] = rand::random();
            let schema = format!("t_readback_{}", hex::encode(r));
            let store = PostgresStore::connect(&url, Some(&schema))
                .await
                .unwrap_or_else(|e| {
                    panic!("PostgreSQL at ITERION_TEST_POSTGRES_URL does not answer ({e}): run scripts/test.sh")
                });
            TestStore {
                store: Arc::new(store),
                guard: Guard::Schema(SchemaGuard { url, schema }),
            }
        }
    }
}

/// A run to drain into (the stores refuse files of an unknown run).
pub async fn new_run(store: &dyn RunStore) -> RunId {
    let id = RunId::generate();
    store
        .create_run(NewRun {
            id: id.clone(),
            workflow: "readback".into(),
            file: "readback.iter".into(),
            trust: Trust::Untrusted,
            owner: None,
        })
        .await
        .unwrap_or_else(|e| panic!("create run: {e}"));
    id
}

/// Drops its schema when dropped (on a thread of its own: Drop is sync).
struct SchemaGuard {
    url: String,
    schema: String,
}

impl Drop for SchemaGuard {
    fn drop(&mut self) {
        let url = self.url.clone();
        let schema = self.schema.clone();
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                if let Ok((client, conn)) =
                    tokio_postgres::connect(&url, tokio_postgres::NoTls).await
                {
                    tokio::spawn(conn);
                    let _ = client
                        .batch_execute(&format!(
                            "SET lock_timeout = '10s'; DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
                        ))
                        .await;
                }
            });
        })
        .join();
    }
}
