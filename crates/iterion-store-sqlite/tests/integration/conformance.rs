//! `store_conformance!` mounted on [`SqliteStore`], one temp dir per test.

use std::sync::Arc;

use iterion_core::{RunStore, StoreError};
use iterion_store_sqlite::SqliteStore;
use iterion_testkit::store::StoreFixture;

async fn fresh() -> StoreFixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteStore::open(dir.path()).expect("open fresh store");
    StoreFixture {
        store: Arc::new(store),
        locator: dir.path().display().to_string(),
        guard: Box::new(dir),
    }
}

async fn open(locator: String) -> Result<Arc<dyn RunStore>, StoreError> {
    Ok(Arc::new(SqliteStore::open(std::path::Path::new(&locator))?))
}

iterion_testkit::store_conformance!(fresh: fresh(), open: open);
