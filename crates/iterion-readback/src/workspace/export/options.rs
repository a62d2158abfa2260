//! [`ExportOptions`]: the bounds of one workspace export and the variable
//! that sets its byte cap.

use std::time::Duration;

use iterion_core::ByteSize;

/// Variable setting [`ExportOptions::cap`] (a size: `8GiB`, `512MiB`…).
pub const EXPORT_CAP_ENV: &str = "ITERION_SANDBOX_WORKSPACE_EXPORT_CAP";

/// Per-call knobs of [`export`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportOptions {
    /// Bound on the whole export.
    pub timeout: Duration,
    /// Bytes written onto the host at most; a member past it is declined.
    pub cap: u64,
    /// Members read at most; the rest are declined as a count.
    pub max_members: u64,
    /// Deepest path kept.
    pub max_depth: usize,
    /// Declined and kept names reported; the rest are counted.
    pub max_declined_names: usize,
    /// Longest GNU long name (and link target) read.
    pub max_long_name: u64,
    /// Largest PAX header read.
    pub max_pax_header: u64,
    /// Symlinks placed at most.
    pub max_links: usize,
}

impl Default for ExportOptions {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(1800),
            cap: 8 << 30,
            max_members: 2_000_000,
            max_depth: 256,
            max_declined_names: 1_000,
            max_long_name: 64 * 1024,
            max_pax_header: 1024 * 1024,
            max_links: 100_000,
        }
    }
}

impl ExportOptions {
    /// The defaults with the cap `env` sets ([`EXPORT_CAP_ENV`]); a bad
    /// value keeps the default.
    pub fn from_env(env: &std::collections::BTreeMap<String, String>) -> Self {
        let cap = env
            .get(EXPORT_CAP_ENV)
            .and_then(|v| iterion_core::parse_size(v.trim()).ok())
            .map(|ByteSize(n)| n);
        Self {
            cap: cap.unwrap_or(Self::default().cap),
            ..Self::default()
        }
    }
}
