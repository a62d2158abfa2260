//! The per-run placeholder vault of the privacy tools: token → original
//! value, kept in the run store as the run file [`VAULT_PATH`] (upstream
//! keeps `pii_vault.json` beside the run; a store without a directory,
//! PostgreSQL, needs the store's own file area). The values are the PII
//! the filter took out, so the vault never reaches an event, a log line
//! or an error text: errors name the run and the token, never a value.
//!
//! The name sits under `.iterion/`, which the read-back drain refuses
//! (`iterion_readback::name`), so nothing a sandbox writes can replace it.

use std::collections::BTreeMap;

use bytes::Bytes;
use futures_util::StreamExt;
use iterion_core::store::RunFilePath;
use iterion_core::{RunId, RunStore};
use serde::{Deserialize, Serialize};

/// The vault's run-file path.
pub const VAULT_PATH: &str = ".iterion/privacy/vault.json";
/// Largest vault accepted (a run redacting more than this is refused).
pub const VAULT_CAP: u64 = 64 * 1024 * 1024;
/// Version of the persisted format.
pub const VAULT_VERSION: u32 = 1;

/// One mapping.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VaultEntry {
    /// The original text.
    pub value: String,
    /// Its category.
    pub category: String,
    /// When it was first redacted (RFC 3339).
    pub first_seen_at: String,
}

/// The persisted form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VaultFile {
    /// [`VAULT_VERSION`].
    pub version: u32,
    /// The run it belongs to.
    pub run_id: String,
    /// Entries by token.
    pub entries: BTreeMap<String, VaultEntry>,
}

/// Why the vault could not be read or written. Never carries a value.
#[derive(Debug, thiserror::Error)]
pub enum VaultError {
    /// The store failed.
    #[error("privacy vault of run {run}: {operation}: {source}")]
    Store {
        /// The run.
        run: String,
        /// What was done.
        operation: &'static str,
        /// Cause.
        #[source]
        source: Box<iterion_core::StoreError>,
    },
    /// What the store holds is not a vault of this version and run.
    #[error("privacy vault of run {run} is unreadable: {reason}")]
    Corrupt {
        /// The run.
        run: String,
        /// Why (never the content).
        reason: String,
    },
}

/// A run's vault, in memory, written through to the store.
#[derive(Debug)]
pub struct Vault {
    run: RunId,
    data: VaultFile,
}

impl Vault {
    /// The run's vault: what the store holds, or an empty one.
    pub async fn open(store: &dyn RunStore, run: &RunId) -> Result<Self, VaultError> {
        let path = vault_path(run)?;
        let files = store
            .list_files(run)
            .await
            .map_err(|source| VaultError::Store {
                run: run.to_string(),
                operation: "list run files",
                source: Box::new(source),
            })?;
        let mut data = VaultFile {
            version: VAULT_VERSION,
            run_id: run.to_string(),
            entries: BTreeMap::new(),
        };
        if files.iter().any(|f| f.path == path) {
            let mut stream =
                store
                    .get_file(run, &path)
                    .await
                    .map_err(|source| VaultError::Store {
                        run: run.to_string(),
                        operation: "read",
                        source: Box::new(source),
                    })?;
            let mut raw = Vec::new();
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| VaultError::Corrupt {
                    run: run.to_string(),
                    reason: format!("read failed: {e}"),
                })?;
                raw.extend_from_slice(&chunk);
                if raw.len() as u64 > VAULT_CAP {
                    return Err(VaultError::Corrupt {
                        run: run.to_string(),
                        reason: format!("larger than {VAULT_CAP} bytes"),
                    });
                }
            }
            let file: VaultFile =
                serde_json::from_slice(&raw).map_err(|e| VaultError::Corrupt {
                    run: run.to_string(),
                    // serde's message names a position, not the content.
                    reason: format!(
                        "not a vault document (line {}, column {})",
                        e.line(),
                        e.column()
                    ),
                })?;
            if file.version != VAULT_VERSION || file.run_id != run.as_str() {
                return Err(VaultError::Corrupt {
                    run: run.to_string(),
                    reason: format!(
                        "version {} of run {:?} (this engine reads version {VAULT_VERSION} of its own run)",
                        file.version, file.run_id
                    ),
                });
            }
            data = file;
        }
        Ok(Self {
            run: run.clone(),
            data,
        })
    }

    /// The value behind `token`.
    pub fn get(&self, token: &str) -> Option<&VaultEntry> {
        self.data.entries.get(token)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.data.entries.len()
    }

    /// Whether the vault is empty.
    pub fn is_empty(&self) -> bool {
        self.data.entries.is_empty()
    }

    /// Add `(token, value, category)` entries (a token already present
    /// keeps its first value) and write the vault once.
    pub async fn add_all(
        &mut self,
        store: &dyn RunStore,
        entries: Vec<(String, String, &'static str)>,
    ) -> Result<(), VaultError> {
        let now = now_rfc3339();
        let mut dirty = false;
        for (token, value, category) in entries {
            self.data.entries.entry(token).or_insert_with(|| {
                dirty = true;
                VaultEntry {
                    value,
                    category: category.to_owned(),
                    first_seen_at: now.clone(),
                }
            });
        }
        if !dirty {
            return Ok(());
        }
        let body = serde_json::to_vec(&self.data).map_err(|e| VaultError::Corrupt {
            run: self.run.to_string(),
            reason: format!("cannot encode: {e}"),
        })?;
        let stream: iterion_core::ByteStream = Box::pin(futures_util::stream::once(async move {
            Ok::<_, std::io::Error>(Bytes::from(body))
        }));
        store
            .put_file(&self.run, &vault_path(&self.run)?, stream, VAULT_CAP)
            .await
            .map_err(|source| VaultError::Store {
                run: self.run.to_string(),
                operation: "write",
                source: Box::new(source),
            })
            .and_then(|outcome| match outcome {
                iterion_core::store::PutOutcome::Stored(_) => Ok(()),
                iterion_core::store::PutOutcome::CapExceeded { cap, .. } => {
                    Err(VaultError::Corrupt {
                        run: self.run.to_string(),
                        reason: format!("it outgrew the vault cap of {cap} bytes"),
                    })
                }
            })
    }
}

fn vault_path(run: &RunId) -> Result<RunFilePath, VaultError> {
    // A constant the store's own parser accepts (tested below).
    RunFilePath::parse(VAULT_PATH).map_err(|e| VaultError::Corrupt {
        run: run.to_string(),
        reason: e.to_string(),
    })
}

fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_is_a_run_file_path() {
        assert_eq!(vault_path(&RunId::generate()).unwrap().as_str(), VAULT_PATH);
    }
}
