//! The drain's error, and the reason token each case reports. A leaf: the
//! archive reader returns it, the drain and the workspace export map it.

use std::io;
use std::time::Duration;

use iterion_core::driver::DriverError;
use iterion_core::store::StoreError;

use crate::reason;

/// Errors of the drain, each mapping to a reason token.
#[derive(Debug, thiserror::Error)]
pub enum ReadbackError {
    /// The export stream failed mid-archive.
    #[error("archive stream failed: {source}")]
    Stream {
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// The archive ended before its end-of-archive marker.
    #[error("archive is truncated")]
    Truncated,
    /// A header could not be parsed.
    #[error("corrupt archive header: {reason}")]
    Header {
        /// What was wrong.
        reason: &'static str,
    },
    /// The driver could not export the path.
    #[error("export failed: {source}")]
    Export {
        /// Cause.
        #[source]
        source: DriverError,
    },
    /// The run store failed.
    #[error("run store failed: {source}")]
    Store {
        /// Cause.
        #[source]
        source: StoreError,
    },
    /// The drain's time bound elapsed.
    #[error("drain timed out after {}s", after.as_secs())]
    Timeout {
        /// The bound.
        after: Duration,
    },
}

impl ReadbackError {
    /// Stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Stream { .. } => "READBACK_STREAM_ERROR",
            Self::Truncated => "READBACK_ARCHIVE_TRUNCATED",
            Self::Header { .. } => "READBACK_ARCHIVE_CORRUPT",
            Self::Export { .. } => "READBACK_EXPORT_FAILED",
            Self::Store { .. } => "READBACK_STORE_ERROR",
            Self::Timeout { .. } => "READBACK_TIMEOUT",
        }
    }

    /// The SPEC §3 reason token.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Stream { .. } | Self::Truncated | Self::Header { .. } => reason::ARCHIVE_ERROR,
            Self::Export {
                source: DriverError::ContainerGone { .. },
            } => reason::CONTAINER_GONE,
            Self::Export {
                source: DriverError::PhaseTimeout { .. } | DriverError::Cancelled,
            } => reason::TIMEOUT,
            Self::Export { .. } => reason::ARCHIVE_ERROR,
            Self::Store { .. } => reason::STORE_ERROR,
            Self::Timeout { .. } => reason::TIMEOUT,
        }
    }
}
