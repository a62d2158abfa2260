//! Integration tests of the ADR-143 drain: contract, hostile archives, fuzz.

mod attempts;
mod contract;
mod engine;
mod faults;
mod fuzz;
mod hostile;
mod oversize;
mod store;
mod support;
mod workspace;

use std::collections::BTreeMap;

use futures_util::StreamExt;
use iterion_core::store::RunFilePath;
use iterion_core::{RunId, RunStore};

/// Every stored file of a run with its content.
pub async fn stored(store: &dyn RunStore, run: &RunId) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let files = store
        .list_files(run)
        .await
        .unwrap_or_else(|e| panic!("list_files: {e}"));
    for f in files {
        // Defence in depth: whatever the store lists must itself be a safe,
        // relative run-file path.
        let reparsed = RunFilePath::parse(f.path.as_str())
            .unwrap_or_else(|e| panic!("store listed an unsafe path: {e}"));
        assert_eq!(reparsed, f.path);
        let mut stream = store
            .get_file(run, &f.path)
            .await
            .unwrap_or_else(|e| panic!("get_file {}: {e}", f.path));
        let mut data = Vec::new();
        while let Some(chunk) = stream.next().await {
            data.extend_from_slice(&chunk.unwrap_or_else(|e| panic!("read: {e}")));
        }
        assert_eq!(data.len() as u64, f.size, "{} size", f.path);
        out.insert(f.path.as_str().to_owned(), data);
    }
    out
}
