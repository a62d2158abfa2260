//! Reason tokens of `sandbox_runfiles_drain_failed` (SPEC §3).

/// A member would have pushed its declared path over the cap.
pub const CAP_EXCEEDED: &str = "cap_exceeded";
/// The container was gone when the drain asked for its content.
pub const CONTAINER_GONE: &str = "container_gone";
/// The archive was corrupt, truncated, or held members the drain refuses.
pub const ARCHIVE_ERROR: &str = "archive_error";
/// The run store failed.
pub const STORE_ERROR: &str = "store_error";
/// The drain ran out of time.
pub const TIMEOUT: &str = "timeout";
