//! The tool policy (`tool_policy:` on the workflow, an agent or a judge):
//! which qualified tool names a node may call, checked before every call
//! wherever the call would run. It owns the pattern language, the verdict
//! and the `tool_denied` event of a refused call; it does not decide where
//! a tool runs (the placement table).
//!
//! Patterns follow upstream `pkg/backend/tool/policy.go` — `*` (every
//! tool), `prefix.*` (a namespace such as `mcp.github.*`), an exact
//! qualified name — plus this project's `!pattern`, which denies. Deny
//! wins over allow. No policy written is open (upstream: nil is open); an
//! empty list denies everything (upstream: empty non-nil denies); a list of
//! deny patterns only allows every name none of them matches.

use iterion_core::EventKind;
use serde::{Deserialize, Serialize};

use crate::events::AgentEventSink;

/// A node's effective tool policy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolPolicy {
    /// `None`: no policy written (open). `Some([])`: deny everything.
    patterns: Option<Vec<String>>,
}

/// Why a call was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyDenial {
    /// The `!pattern` that matched, or `None` when no allow pattern did.
    pub rule: Option<String>,
    /// One sentence for the model and the event.
    pub reason: String,
}

impl ToolPolicy {
    /// The open policy (no `tool_policy:` written).
    pub fn open() -> Self {
        Self::default()
    }

    /// A policy of the patterns written (an empty list denies everything).
    pub fn new(patterns: Vec<String>) -> Self {
        Self {
            patterns: Some(patterns),
        }
    }

    /// The patterns as written, `None` when open.
    pub fn patterns(&self) -> Option<&[String]> {
        self.patterns.as_deref()
    }

    /// Whether no name at all may be called.
    pub fn denies_everything(&self) -> bool {
        self.patterns
            .as_ref()
            .is_some_and(|p| p.is_empty() || p.iter().any(|x| x == "!*"))
    }

    /// The verdict on one qualified tool name.
    pub fn check(&self, qualified: &str) -> Result<(), PolicyDenial> {
        let Some(patterns) = &self.patterns else {
            return Ok(());
        };
        if let Some(rule) = patterns
            .iter()
            .find(|p| p.strip_prefix('!').is_some_and(|d| matches(d, qualified)))
        {
            return Err(PolicyDenial {
                rule: Some(rule.clone()),
                reason: format!("tool {qualified:?} is denied by tool_policy rule {rule:?}"),
            });
        }
        let allows: Vec<&String> = patterns.iter().filter(|p| !p.starts_with('!')).collect();
        let deny_only = !patterns.is_empty() && allows.is_empty();
        if deny_only || allows.iter().any(|p| matches(p, qualified)) {
            return Ok(());
        }
        Err(PolicyDenial {
            rule: None,
            reason: format!("tool {qualified:?} is not in the tool_policy allowlist"),
        })
    }
}

impl ToolPolicy {
    /// Judge one call before it runs: a denial is recorded on `sink` as
    /// `tool_denied` (where it was refused: `container` or `host`) and
    /// returned as the text the model gets.
    pub fn admit_call(
        &self,
        tool: &str,
        tool_use_id: &str,
        placement: &str,
        sink: &dyn AgentEventSink,
    ) -> Result<(), String> {
        self.check(tool).map_err(|denial| {
            sink.emit(EventKind::ToolDenied {
                tool: tool.to_owned(),
                tool_use_id: tool_use_id.to_owned(),
                rule: denial.rule,
                reason: denial.reason.clone(),
                placement: placement.to_owned(),
            });
            denial.reason
        })
    }
}

/// One pattern against one qualified name (upstream `matchPattern`).
fn matches(pattern: &str, name: &str) -> bool {
    if pattern == "*" {
        return true;
    }
    match pattern.strip_suffix('*') {
        Some(prefix) if prefix.ends_with('.') => name.starts_with(prefix),
        _ => pattern == name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(list: &[&str]) -> ToolPolicy {
        ToolPolicy::new(list.iter().map(|s| (*s).to_owned()).collect())
    }

    #[test]
    fn open_allows_everything_empty_denies_everything() {
        for name in ["git_diff", "run_command", "mcp.github.create_issue", "x"] {
            assert!(ToolPolicy::open().check(name).is_ok());
            assert!(p(&[]).check(name).is_err());
            assert!(p(&["*"]).check(name).is_ok());
        }
        assert!(p(&[]).denies_everything());
        assert!(p(&["!*"]).denies_everything());
        assert!(!ToolPolicy::open().denies_everything());
        assert!(!p(&["read_file"]).denies_everything());
    }

    #[test]
    fn exact_and_namespace_patterns_as_upstream() {
        let pol = p(&["git_diff", "mcp.github.*"]);
        assert!(pol.check("git_diff").is_ok());
        assert!(pol.check("mcp.github.create_issue").is_ok());
        assert!(pol.check("mcp.githubx.create_issue").is_err());
        assert!(pol.check("mcp.gitlab.create_issue").is_err());
        let e = pol.check("run_command").expect_err("denied");
        assert_eq!(e.rule, None);
        assert!(e.reason.contains("allowlist"), "{}", e.reason);
        // A bare trailing `*` is not a prefix glob (upstream needs `.*`).
        assert!(p(&["git*"]).check("git_diff").is_err());
    }

    #[test]
    fn deny_wins_and_deny_only_lists_allow_the_rest() {
        let pol = p(&["*", "!run_command", "!mcp.prod.*"]);
        assert!(pol.check("read_file").is_ok());
        let e = pol.check("run_command").expect_err("denied");
        assert_eq!(e.rule.as_deref(), Some("!run_command"));
        assert!(pol.check("mcp.prod.drop_table").is_err());
        let deny_only = p(&["!bash"]);
        assert!(deny_only.check("read_file").is_ok());
        assert!(deny_only.check("bash").is_err());
    }
}
