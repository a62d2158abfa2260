//! Reason tokens of `sandbox_workspace_export_failed`: the drain's that
//! also apply, and the export's own.

pub use crate::reason::{ARCHIVE_ERROR, CAP_EXCEEDED, CONTAINER_GONE, TIMEOUT};
/// Writing the host workspace failed.
pub const HOST_ERROR: &str = "host_error";
/// The host workspace is gone (or is no longer a directory).
pub const WORKSPACE_GONE: &str = "workspace_gone";
/// Only host files changed during the run were kept.
pub const HOST_CHANGED: &str = "host_changed";
