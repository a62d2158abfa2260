//! The errors of the store seam. A leaf of `store`: the name newtypes a
//! store checks (`attachment`, run file paths) return it without naming
//! the seam itself.

use crate::boxed::BoxError;
use crate::failure::RunStatus;
use crate::id::RunId;

/// Errors of the store seam, each with a stable [`StoreError::code`].
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No such run.
    #[error("run {0} not found")]
    RunNotFound(RunId),
    /// A run with this id exists.
    #[error("run {0} already exists")]
    RunExists(RunId),
    /// The transition is not legal from the current status.
    #[error("illegal transition of run {run} from {from} to {to}")]
    IllegalTransition {
        /// Run.
        run: RunId,
        /// Current status.
        from: RunStatus,
        /// Requested status.
        to: RunStatus,
    },
    /// The run changed since the caller read it.
    #[error(
        "stale update of run {run}: expected {expected_status} rev {expected_revision:?}, found {actual_status} rev {actual_revision}"
    )]
    StaleTransition {
        /// Run.
        run: RunId,
        /// What the caller expected.
        expected_status: RunStatus,
        /// Revision the caller expected.
        expected_revision: Option<u64>,
        /// What the store has.
        actual_status: RunStatus,
        /// Its revision.
        actual_revision: u64,
    },
    /// An event re-appended at an existing seq with different content.
    #[error("event seq {seq} of run {run} already holds a different event")]
    SeqConflict {
        /// Run.
        run: RunId,
        /// Seq.
        seq: u64,
    },
    /// An event appended at a seq past the next free one (would leave a gap).
    #[error("event seq {seq} of run {run} would leave a gap (next is {next})")]
    SeqGap {
        /// Run.
        run: RunId,
        /// Requested seq.
        seq: u64,
        /// The next free seq.
        next: u64,
    },
    /// An event payload the store could not read back (e.g. nested deeper
    /// than JSON readers accept); refused at append so an accepted event is
    /// always readable.
    #[error("event payload for run {run} refused: {reason}")]
    InvalidPayload {
        /// Run.
        run: RunId,
        /// Why.
        reason: &'static str,
    },
    /// A run-file path that would leave the run's area.
    #[error("unsafe run-file path {path:?}: {reason}")]
    UnsafePath {
        /// The path.
        path: String,
        /// Why.
        reason: &'static str,
    },
    /// No such file.
    #[error("run file {0} not found")]
    FileNotFound(String),
    /// A stored run file whose bytes no longer match the size and sha256
    /// recorded when it was stored: served by nobody (issue 19 item 3).
    #[error(
        "run file {path} does not match its record (expected {expected_size} bytes with sha256 {expected_sha256}, found {actual_size} bytes with sha256 {actual_sha256}): refusing to serve it"
    )]
    Tampered {
        /// The file.
        path: String,
        /// Size recorded at store time.
        expected_size: u64,
        /// Digest recorded at store time.
        expected_sha256: String,
        /// Size of what the store holds now.
        actual_size: u64,
        /// Digest of what the store holds now.
        actual_sha256: String,
    },
    /// A bad cursor.
    #[error("invalid page cursor")]
    InvalidCursor,
    /// The store's schema is newer than this binary.
    #[error(
        "store schema version {found} is newer than this iterion supports ({supported}); upgrade iterion"
    )]
    SchemaTooNew {
        /// Version in the store.
        found: i64,
        /// Highest version known.
        supported: i64,
    },
    /// The store is not an iterion store (foreign or corrupt file).
    #[error("{location} is not a usable iterion store: {reason}")]
    Corrupt {
        /// Where.
        location: String,
        /// Why.
        reason: String,
    },
    /// The backend cannot be reached.
    #[error("run store unavailable: {reason}")]
    Unavailable {
        /// Why.
        reason: String,
        /// Cause.
        #[source]
        source: Option<BoxError>,
    },
    /// A backend error.
    #[error("run store {operation} failed: {source}")]
    Backend {
        /// Operation.
        operation: &'static str,
        /// Cause.
        #[source]
        source: BoxError,
    },
    /// Local IO.
    #[error("run store io ({operation}): {source}")]
    Io {
        /// Operation.
        operation: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

impl StoreError {
    /// Stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::RunNotFound(_) => "STORE_RUN_NOT_FOUND",
            Self::RunExists(_) => "STORE_RUN_EXISTS",
            Self::IllegalTransition { .. } => "STORE_ILLEGAL_TRANSITION",
            Self::StaleTransition { .. } => "STORE_STALE_TRANSITION",
            Self::SeqConflict { .. } => "STORE_SEQ_CONFLICT",
            Self::SeqGap { .. } => "STORE_SEQ_GAP",
            Self::InvalidPayload { .. } => "STORE_INVALID_PAYLOAD",
            Self::UnsafePath { .. } => "STORE_UNSAFE_PATH",
            Self::FileNotFound(_) => "STORE_FILE_NOT_FOUND",
            Self::Tampered { .. } => "STORE_FILE_TAMPERED",
            Self::InvalidCursor => "STORE_INVALID_CURSOR",
            Self::SchemaTooNew { .. } => "STORE_SCHEMA_TOO_NEW",
            Self::Corrupt { .. } => "STORE_CORRUPT",
            Self::Unavailable { .. } => "STORE_UNAVAILABLE",
            Self::Backend { .. } => "STORE_BACKEND_ERROR",
            Self::Io { .. } => "STORE_IO_ERROR",
        }
    }

    /// Whether retrying may succeed (the reaper keeps on a transient error).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::Unavailable { .. } | Self::Backend { .. } | Self::Io { .. }
        )
    }
}
