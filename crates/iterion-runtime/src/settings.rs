//! The engine-wide knobs, [`EngineSettings`]: how much of a node's output
//! reaches the run log and how much is kept for parsing and for
//! `node_failed`. The engine is configured with them and every node
//! execution reads them through its run's context, so they sit below both.
//!
//! It does not apply them (tool nodes do) nor load them from anywhere (the
//! caller builds them).

/// Engine-wide knobs.
#[derive(Debug, Clone)]
pub struct EngineSettings {
    /// Bytes of one node execution's output that reach the run log.
    pub node_log_cap: u64,
    /// Rows one node execution may write to the run log. Past half of it
    /// the node's lines are coalesced into rows of up to
    /// [`EngineSettings::max_log_line`] bytes, so the byte cap is reached
    /// long before this one unless the output is made to defeat
    /// coalescing; past it the rest is dropped and counted (issue 31 #6).
    pub node_log_rows: u64,
    /// Bytes the whole run may write to the run log (every node, every
    /// visit, driver and system lines).
    pub run_log_cap: u64,
    /// Rows the whole run may write to the run log.
    pub run_log_rows: u64,
    /// Longest run-log line; longer lines are split.
    pub max_log_line: usize,
    /// Bytes of stdout kept for output parsing (the rest is only logged).
    pub stdout_keep: usize,
    /// Bytes of stderr kept for `node_failed.stderr_tail`.
    pub stderr_tail: usize,
    /// Fail a tool node whose output does not match its `output:` schema
    /// (`ITERION_STRICT_TOOL_OUTPUTS=1`); off, as upstream, which never
    /// checks tool outputs: the mismatch is only an event.
    pub strict_tool_outputs: bool,
}

impl Default for EngineSettings {
    fn default() -> Self {
        Self {
            node_log_cap: 8 * 1024 * 1024,
            node_log_rows: 4096,
            run_log_cap: 256 * 1024 * 1024,
            run_log_rows: 1_000_000,
            max_log_line: 64 * 1024,
            stdout_keep: 1024 * 1024,
            stderr_tail: 4 * 1024,
            strict_tool_outputs: false,
        }
    }
}
