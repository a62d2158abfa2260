//! What a drain or an export declined: counted always, named up to a bound,
//! and the most severe reason token seen (SPEC §3's order, the workspace
//! export's tokens included).

use crate::reason;
use crate::workspace::reason as workspace_reason;

fn severity(token: &str) -> u8 {
    match token {
        reason::TIMEOUT => 6,
        reason::CONTAINER_GONE => 5,
        workspace_reason::WORKSPACE_GONE => 4,
        reason::STORE_ERROR | workspace_reason::HOST_ERROR => 3,
        reason::ARCHIVE_ERROR => 2,
        workspace_reason::HOST_CHANGED => 0,
        _ => 1,
    }
}

/// Declined members of the whole drain: counted always, named up to a bound
/// (a million-member archive must not become a million-entry list).
pub(crate) struct Declines {
    pub(crate) names: Vec<String>,
    pub(crate) count: u64,
    pub(crate) max_names: usize,
    pub(crate) worst: Option<&'static str>,
}

impl Declines {
    /// No declines yet; at most `max_names` are named.
    pub(crate) fn new(max_names: usize) -> Self {
        Self {
            names: Vec::new(),
            count: 0,
            max_names,
            worst: None,
        }
    }

    pub(crate) fn note(&mut self, token: &'static str) {
        if self.worst.is_none_or(|w| severity(token) > severity(w)) {
            self.worst = Some(token);
        }
    }

    pub(crate) fn decline(&mut self, token: &'static str, name: impl FnOnce() -> String) {
        self.count += 1;
        if self.names.len() < self.max_names {
            self.names.push(name());
        }
        self.note(token);
    }
}
