//! The workflow a run compiled, for its graph: the run's launch record
//! (`iterion_runtime::progress`, the first checkpoint) names the file and
//! the SHA-256 of the source the run compiled, exactly what
//! `iterion resume` relies on. The file is read again, and drawn only
//! when it still hashes to that digest: a graph of a workflow that has
//! changed since would show nodes the run never had. When it cannot be
//! drawn, the page says why instead.

use std::path::{Path, PathBuf};

use iterion_core::EventRecord;
use iterion_dsl::ir;
use iterion_runtime::progress::RunProgress;
use sha2::{Digest, Sha256};

/// A workflow file larger than this is not read (no workflow is).
const SOURCE_MAX: u64 = 4 * 1024 * 1024;

/// Why a run's graph cannot be drawn.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GraphUnavailable {
    /// The run recorded no launch (it never started).
    #[error("the run recorded no launch, so no workflow source")]
    NoLaunch,
    /// The launch record does not parse.
    #[error("the run's progress record does not parse: {reason}")]
    BadProgress {
        /// Why.
        reason: String,
    },
    /// The file is gone or unreadable here.
    #[error("{} cannot be read here: {reason}", file.display())]
    Unreadable {
        /// The file.
        file: PathBuf,
        /// Why.
        reason: String,
    },
    /// The file changed since the run compiled it.
    #[error("{} changed since the run compiled it (sha256 {expected}, now {actual})", file.display())]
    Changed {
        /// The file.
        file: PathBuf,
        /// Digest the run recorded.
        expected: String,
        /// Digest now.
        actual: String,
    },
    /// The source no longer compiles to a workflow of the run's name.
    #[error("{} declares no workflow {workflow}", file.display())]
    NoWorkflow {
        /// The file.
        file: PathBuf,
        /// The run's workflow name.
        workflow: String,
    },
}

/// The workflow the run compiled, or why it cannot be had.
pub async fn workflow_of(
    workflow_name: &str,
    events: &[EventRecord],
) -> Result<ir::Workflow, GraphUnavailable> {
    let progress = RunProgress::from_events(events).map_err(|e| GraphUnavailable::BadProgress {
        reason: e.to_string(),
    })?;
    let launch = progress.launch.ok_or(GraphUnavailable::NoLaunch)?;
    let file = PathBuf::from(&launch.file);
    let source = read_bounded(&file).await?;
    if let Some(expected) = launch.source_sha256 {
        let actual = format!("{:x}", Sha256::digest(source.as_bytes()));
        if actual != expected {
            return Err(GraphUnavailable::Changed {
                file,
                expected,
                actual,
            });
        }
    }
    iterion_dsl::compile_source(&source, &file)
        .workflows
        .into_iter()
        .find(|w| w.name == workflow_name)
        .ok_or(GraphUnavailable::NoWorkflow {
            file,
            workflow: workflow_name.to_owned(),
        })
}

/// The file's text, lossy UTF-8 as `iterion run` reads it (the digest the
/// run recorded is of that text).
async fn read_bounded(file: &Path) -> Result<String, GraphUnavailable> {
    let unreadable = |reason: String| GraphUnavailable::Unreadable {
        file: file.to_owned(),
        reason,
    };
    let meta = tokio::fs::metadata(file)
        .await
        .map_err(|e| unreadable(e.to_string()))?;
    if !meta.is_file() {
        return Err(unreadable("not a regular file".into()));
    }
    if meta.len() > SOURCE_MAX {
        return Err(unreadable(format!("larger than {SOURCE_MAX} bytes")));
    }
    let bytes = tokio::fs::read(file)
        .await
        .map_err(|e| unreadable(e.to_string()))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}
