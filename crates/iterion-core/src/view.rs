//! The machine-readable views of the run store: the documents that
//! `iterion runs --json` and `iterion files --json` print and that
//! `iterion studio` serves under `/api/` (`docs/reference/SPEC.md` §2). One shape
//! in one home, so the CLI and the web API cannot drift apart; events need
//! no view, their envelope is [`EventRecord`](crate::EventRecord) itself.
//!
//! Fields are declared in alphabetical order: that is the key order these
//! documents have always had on the wire (they began as `serde_json`
//! objects, whose keys sort), and scripts diffing the output keep working.
//! It owns the shapes and the little arithmetic they show (a run's
//! duration, a file's status, the human spelling of times and durations); reading the store and printing are the
//! callers'.

use serde::{Deserialize, Serialize};
use time::format_description::well_known::Rfc3339;

use crate::failure::{Disposition, FailureCode, RunStatus};
use crate::id::RunId;
use crate::mode::Trust;
use crate::store::{DrainRecord, DrainStatus, RunFilePath, RunFileRecord, RunRecord};

/// `iterion runs --json`: every run, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunsView {
    /// The runs.
    pub runs: Vec<RunView>,
}

impl RunsView {
    /// The document of `runs`, in the order given.
    pub fn of(runs: &[RunRecord]) -> Self {
        Self {
            runs: runs.iter().map(RunView::of).collect(),
        }
    }
}

/// One run as `iterion runs --json` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunView {
    /// The failure's disposition, when the run failed.
    pub disposition: Option<Disposition>,
    /// Wall time, once the run is terminal.
    pub duration_ms: Option<u64>,
    /// The failure code, when the run failed.
    pub failure_code: Option<FailureCode>,
    /// The workflow file as given to `iterion run`.
    pub file: String,
    /// The run.
    pub id: RunId,
    /// When the run was created (RFC 3339).
    pub started: Option<String>,
    /// Status.
    pub status: RunStatus,
    /// Trust.
    pub trust: Trust,
    /// Workflow name.
    pub workflow: String,
}

impl RunView {
    /// The view of one record.
    pub fn of(r: &RunRecord) -> Self {
        Self {
            disposition: r.failure.as_ref().map(|f| f.disposition),
            duration_ms: run_duration_ms(r),
            failure_code: r.failure.as_ref().map(|f| f.code),
            file: r.file.clone(),
            id: r.id.clone(),
            started: r.created_at.format(&Rfc3339).ok(),
            status: r.status,
            trust: r.trust,
            workflow: r.workflow.clone(),
        }
    }
}

/// A run's wall time in milliseconds, once it is terminal (creation to
/// the last update, which is the terminal transition).
pub fn run_duration_ms(r: &RunRecord) -> Option<u64> {
    r.status.is_terminal().then(|| {
        u64::try_from((r.updated_at - r.created_at).whole_milliseconds().max(0)).unwrap_or(u64::MAX)
    })
}

/// RFC 3339 in whole seconds, UTC: what a human scans (`iterion runs`, the
/// studio's pages).
pub fn human_time(t: time::OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    t.replace_nanosecond(0)
        .unwrap_or(t)
        .format(&Rfc3339)
        .unwrap_or_else(|_| t.to_string())
}

/// `850ms`, `12.3s`, `4m05s`, `2h03m`.
pub fn human_duration(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms}ms"),
        1_000..=59_999 => format!("{:.1}s", ms as f64 / 1000.0),
        60_000..=3_599_999 => format!("{}m{:02}s", ms / 60_000, (ms / 1000) % 60),
        _ => format!("{}h{:02}m", ms / 3_600_000, (ms / 60_000) % 60),
    }
}

/// `iterion files --json`: a run's drained files and its drain record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilesView {
    /// The last drain, when one ran.
    pub drain: Option<DrainView>,
    /// The stored files, sorted by path.
    pub files: Vec<FileView>,
    /// The run.
    pub run_id: RunId,
}

impl FilesView {
    /// The document of `files` under `drain`.
    pub fn of(run: &RunId, files: &[RunFileRecord], drain: Option<&DrainRecord>) -> Self {
        let status = FileStatus::under(drain);
        Self {
            drain: drain.map(DrainView::of),
            files: files
                .iter()
                .map(|f| FileView {
                    path: f.path.clone(),
                    sha256: f.sha256.clone(),
                    size: f.size,
                    status,
                })
                .collect(),
            run_id: run.clone(),
        }
    }
}

/// One stored file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileView {
    /// Run-relative path.
    pub path: RunFilePath,
    /// Hex sha256 recorded when it was stored.
    pub sha256: String,
    /// Size in bytes.
    pub size: u64,
    /// Whether what is stored is current.
    pub status: FileStatus,
}

/// What a stored file's bytes are worth, given the last drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileStatus {
    /// Drained and current.
    Stored,
    /// The last drain failed stale: what is stored may be out of date.
    Stale,
}

impl FileStatus {
    /// `stale` when the last drain says what is stored may be stale.
    pub fn under(drain: Option<&DrainRecord>) -> Self {
        match drain {
            Some(d) if d.stale => Self::Stale,
            _ => Self::Stored,
        }
    }

    /// The snake_case spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stored => "stored",
            Self::Stale => "stale",
        }
    }
}

/// The drain record as `iterion files --json` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainView {
    /// Declined members by path.
    pub declined: Vec<String>,
    /// Bytes metered per declared path.
    pub metered: Vec<MeteredView>,
    /// Reason token when not complete.
    pub reason: Option<String>,
    /// Whether what is stored may be stale.
    pub stale: bool,
    /// Status.
    pub status: DrainStatus,
}

impl DrainView {
    /// The view of a record.
    pub fn of(d: &DrainRecord) -> Self {
        Self {
            declined: d.declined.clone(),
            metered: d
                .metered
                .iter()
                .map(|(path, bytes)| MeteredView {
                    bytes: *bytes,
                    path: path.clone(),
                })
                .collect(),
            reason: d.reason.clone(),
            stale: d.stale,
            status: d.status,
        }
    }
}

/// Bytes metered for one declared path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeteredView {
    /// Bytes.
    pub bytes: u64,
    /// The declared path.
    pub path: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Failure;
    use time::macros::datetime;

    fn record(status: RunStatus, secs: i64) -> RunRecord {
        let at = datetime!(2026-11-29 08:00:00 UTC);
        RunRecord {
            id: RunId::parse("r1").expect("id"),
            workflow: "w".into(),
            file: "w.iter".into(),
            trust: Trust::Untrusted,
            status,
            failure: (status == RunStatus::Failed)
                .then(|| Failure::new(FailureCode::NodeFailed, "boom")),
            admission: None,
            owner: None,
            revision: 1,
            created_at: at,
            updated_at: at + time::Duration::seconds(secs),
        }
    }

    #[test]
    fn keys_keep_the_sorted_order_of_the_documents() {
        // Scripts diff these documents: a reordered struct would change
        // every line of them.
        let text =
            serde_json::to_string(&RunView::of(&record(RunStatus::Failed, 2))).expect("serialise");
        let keys: Vec<&str> = text
            .trim_matches(|c| c == '{' || c == '}')
            .split(',')
            .map(|kv| kv.split(':').next().unwrap_or("").trim_matches('"'))
            .collect();
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        assert_eq!(keys, sorted, "{text}");
        assert!(text.contains(r#""duration_ms":2000"#), "{text}");
        assert!(text.contains(r#""failure_code":"NODE_FAILED""#), "{text}");
        assert!(text.contains(r#""disposition":"reexecutable""#), "{text}");
    }

    #[test]
    fn a_live_run_has_no_duration_and_a_stale_drain_marks_files() {
        assert_eq!(run_duration_ms(&record(RunStatus::Running, 9)), None);
        let drain = DrainRecord {
            status: DrainStatus::Failed,
            reason: Some("container_gone".into()),
            declined: vec![],
            stale: true,
            metered: vec![],
            updated_at: datetime!(2026-11-29 08:00:00 UTC),
        };
        assert_eq!(FileStatus::under(Some(&drain)), FileStatus::Stale);
        assert_eq!(FileStatus::under(None).as_str(), "stored");
    }
}
