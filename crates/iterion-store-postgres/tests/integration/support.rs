//! Shared fixtures: the server URL (fail, never skip, when it is missing)
//! and throwaway schemas dropped when the test ends.

use std::sync::Arc;

use iterion_core::{RunStore, StoreError};
use iterion_store_postgres::PostgresStore;
use iterion_testkit::store::StoreFixture;

/// The shared test server's URL.
pub fn url() -> String {
    std::env::var("ITERION_TEST_POSTGRES_URL").unwrap_or_else(|_| {
        panic!("ITERION_TEST_POSTGRES_URL is not set: run scripts/test.sh (it starts PostgreSQL)")
    })
}

/// A fresh schema name.
pub fn schema_name() -> String {
    let r: [u8; 6] = rand::random();
    format!("t_{}", hex::encode(r))
}

/// Drops its schema when dropped (on a thread of its own: Drop is sync).
pub struct SchemaGuard {
    pub url: String,
    pub schema: String,
}

impl Drop for SchemaGuard {
    fn drop(&mut self) {
        let url = self.url.clone();
        let schema = self.schema.clone();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
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

/// A store in a fresh schema of the shared server.
pub async fn fresh() -> StoreFixture {
    let url = url();
    let schema = schema_name();
    let store = PostgresStore::connect(&url, Some(&schema))
        .await
        .unwrap_or_else(|e| {
            panic!(
                "PostgreSQL at ITERION_TEST_POSTGRES_URL does not answer ({e}): run scripts/test.sh"
            )
        });
    StoreFixture {
        store: Arc::new(store),
        locator: format!("{schema}|{url}"),
        guard: Box::new(SchemaGuard { url, schema }),
    }
}

/// Reopen from a `schema|url` locator.
pub async fn open(locator: String) -> Result<Arc<dyn RunStore>, StoreError> {
    let (schema, url) = locator.split_once('|').expect("schema|url locator");
    Ok(Arc::new(PostgresStore::connect(url, Some(schema)).await?))
}
