//! The claw tools that act on the agent loop itself rather than on the
//! workspace, so the loop serves them ([`crate::claw::ClawLoop`]) with
//! what only it holds: `tool_search` searches the tools the node is
//! offered (semantics of upstream's vendored claw-code-go
//! `internal/tools/tool_search.go`, registered by upstream
//! `pkg/backend/tool/claw_builtins.go` `RegisterClawToolSearch`), and
//! `enter_plan_mode` / `exit_plan_mode` switch the node's plan mode
//! (`internal/tools/plan_mode.go`, `RegisterClawPlanMode`), in which a
//! tool that may modify anything is refused until the model exits it.
//!
//! A tool node has no loop: calling one of these from a `tool` node is an
//! error result, never a pretend success.

use serde_json::{Value, json};

use super::context::int_arg;
use crate::tools::ToolSpec;

/// `tool_search`'s default number of matches (claw's).
pub const TOOL_SEARCH_DEFAULT_MAX: usize = 5;

/// The names a node keeps in plan mode besides the read-only built-ins:
/// the loop's own tools and the question to the human, none of which
/// changes the workspace or the world.
const PLAN_MODE_ALLOWED: &[&str] = &[
    "tool_search",
    "enter_plan_mode",
    "exit_plan_mode",
    "ask_user",
];

/// Whether plan mode lets the tool of qualified name `name` run.
pub fn plan_mode_admits(name: &str) -> bool {
    crate::tools::is_read_only(name) || PLAN_MODE_ALLOWED.contains(&name)
}

/// The error result of a tool refused in plan mode.
pub fn plan_mode_refusal(name: &str) -> String {
    format!(
        "{name}: plan mode is active, so tools that may modify anything are described, not executed; call exit_plan_mode to resume normal tool execution"
    )
}

/// claw's query normalization: lower-cased, everything but `[a-z0-9]`,
/// white space and `+` dropped, a trailing `tool` cut from each word.
fn normalize_query(q: &str) -> String {
    let kept: String = q
        .to_lowercase()
        .chars()
        .filter(|c| {
            c.is_ascii_lowercase()
                || c.is_ascii_digit()
                || matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0c' | '+')
        })
        .collect();
    kept.split_whitespace()
        .map(|t| t.strip_suffix("tool").unwrap_or(t))
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Lower-cased, only `[a-z0-9]` kept.
fn canonical(s: &str) -> String {
    s.to_lowercase()
        .chars()
        .filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        .collect()
}

/// `tool_search` over `haystack` (the tools the node is offered, by the
/// names the model calls them): `select:a,b` picks exact names that
/// exist, in the order given; otherwise each normalized word scores the
/// tools (exact name +8, canonical name +12, in the name +4, in the
/// description +2, canonical in the description +3), a `+word` must
/// appear in the name or description, best score first then by name.
pub fn tool_search(input: &Value, haystack: &[ToolSpec]) -> Result<String, String> {
    let query = input
        .get("query")
        .and_then(Value::as_str)
        .filter(|q| !q.is_empty())
        .ok_or("tool_search: 'query' is required")?;
    let max = int_arg(input, "max_results")
        .filter(|n| *n > 0)
        .map_or(TOOL_SEARCH_DEFAULT_MAX, |n| {
            usize::try_from(n).unwrap_or(usize::MAX)
        });
    let normalized = normalize_query(query);
    let mut matches: Vec<String> = if let Some(list) = query.strip_prefix("select:") {
        list.split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty() && haystack.iter().any(|t| t.name == *n))
            .map(str::to_owned)
            .collect()
    } else {
        let terms: Vec<&str> = normalized.split_whitespace().collect();
        if terms.is_empty() {
            haystack.iter().map(|t| t.name.clone()).collect()
        } else {
            let required: Vec<&str> = terms.iter().filter_map(|t| t.strip_prefix('+')).collect();
            let all: Vec<&str> = required
                .iter()
                .copied()
                .chain(terms.iter().copied().filter(|t| !t.starts_with('+')))
                .collect();
            let mut scored: Vec<(i64, &str)> = haystack
                .iter()
                .filter_map(|t| {
                    let name = t.name.to_lowercase();
                    let desc = t.description.to_lowercase();
                    if !required
                        .iter()
                        .all(|r| name.contains(r) || desc.contains(r))
                    {
                        return None;
                    }
                    let (name_c, desc_c) = (canonical(&t.name), canonical(&t.description));
                    let score: i64 = all
                        .iter()
                        .map(|term| {
                            let term_c = canonical(term);
                            8 * i64::from(name == *term)
                                + 12 * i64::from(name_c == term_c)
                                + 4 * i64::from(name.contains(term))
                                + 2 * i64::from(desc.contains(term))
                                + 3 * i64::from(desc_c.contains(&term_c))
                        })
                        .sum();
                    (score > 0).then_some((score, t.name.as_str()))
                })
                .collect();
            scored.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
            scored.into_iter().map(|(_, n)| n.to_owned()).collect()
        }
    };
    matches.truncate(max);
    Ok(serde_json::to_string_pretty(&json!({
        "matches": matches,
        "query": query,
        "normalized_query": normalized,
        "total_deferred_tools": haystack.len(),
    }))
    .unwrap_or_default())
}

/// `enter_plan_mode` with claw's in-memory semantics (no settings file:
/// the mode lives as long as the node's loop).
pub fn enter_plan_mode(active: &mut bool) -> String {
    if *active {
        plan_output("enter", false, true, true, "Plan mode is already active")
    } else {
        *active = true;
        plan_output(
            "enter",
            true,
            true,
            true,
            "Enabled worktree-local plan mode override.",
        )
    }
}

/// `exit_plan_mode` with claw's in-memory semantics.
pub fn exit_plan_mode(active: &mut bool) -> String {
    if *active {
        *active = false;
        plan_output(
            "exit",
            true,
            false,
            false,
            "Plan mode deactivated. Normal tool execution resumed.",
        )
    } else {
        plan_output("exit", false, false, false, "Plan mode is not active")
    }
}

/// claw's ten-field answer (every field always present).
fn plan_output(
    operation: &str,
    changed: bool,
    active: bool,
    managed: bool,
    message: &str,
) -> String {
    serde_json::to_string_pretty(&json!({
        "success": true,
        "operation": operation,
        "changed": changed,
        "active": active,
        "managed": managed,
        "message": message,
        "settingsPath": "",
        "statePath": "",
        "previousLocalMode": null,
        "currentLocalMode": null,
    }))
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    //! Pins upstream's vendored claw-code-go `internal/tools/tool_search.go`
    //! and `internal/tools/plan_mode.go` (upstream 2322ab49).
    use super::*;

    fn spec(name: &str, description: &str) -> ToolSpec {
        ToolSpec {
            name: name.to_owned(),
            description: description.to_owned(),
            input_schema: json!({"type": "object"}),
        }
    }

    fn haystack() -> Vec<ToolSpec> {
        ["read_file", "write_file", "grep", "bash", "tool_search"]
            .iter()
            .map(|n| crate::tools::Builtin::parse(n).unwrap().spec())
            .collect()
    }

    fn run(input: Value) -> Value {
        serde_json::from_str(&tool_search(&input, &haystack()).unwrap()).unwrap()
    }

    #[test]
    fn keyword_search_ranks_the_canonical_name_first() {
        // "read_file" normalizes to "readfile" (the underscore goes), which
        // is read_file's canonical name: +12 puts it first.
        let out = run(json!({"query": "read_file"}));
        assert_eq!(out["matches"][0], "read_file");
        assert_eq!(out["normalized_query"], "readfile");
        assert_eq!(out["total_deferred_tools"], 5);
        let out = run(json!({"query": "file", "max_results": 2}));
        assert_eq!(out["matches"], json!(["read_file", "write_file"]));
    }

    #[test]
    fn select_picks_existing_names_in_order_and_required_terms_filter() {
        let out = run(json!({"query": "select:grep, nope ,bash"}));
        assert_eq!(out["matches"], json!(["grep", "bash"]));
        // A `+word` must appear; "regex" is only in grep's description.
        let out = run(json!({"query": "+regex file"}));
        assert_eq!(out["matches"], json!(["grep"]));
        // A trailing "tool" is cut from each word; nothing left lists all.
        let out = run(json!({"query": "tool", "max_results": 10}));
        assert_eq!(out["normalized_query"], "");
        assert_eq!(out["matches"].as_array().unwrap().len(), 5);
        let out = run(json!({"query": "zzz"}));
        assert_eq!(out["matches"], json!([]));
    }

    #[test]
    fn query_is_required() {
        assert!(tool_search(&json!({}), &[]).is_err());
        assert!(tool_search(&json!({"query": ""}), &[spec("a", "b")]).is_err());
    }

    #[test]
    fn plan_mode_toggles_and_refuses_writers() {
        let mut active = false;
        let v: Value = serde_json::from_str(&exit_plan_mode(&mut active)).unwrap();
        assert_eq!(v["changed"], false);
        let v: Value = serde_json::from_str(&enter_plan_mode(&mut active)).unwrap();
        assert!(active);
        assert_eq!(
            (v["changed"].clone(), v["active"].clone()),
            (json!(true), json!(true))
        );
        let v: Value = serde_json::from_str(&enter_plan_mode(&mut active)).unwrap();
        assert_eq!(v["message"], "Plan mode is already active");
        assert!(plan_mode_admits("read_file") && plan_mode_admits("exit_plan_mode"));
        for writer in [
            "bash",
            "write_file",
            "patch",
            "mcp.github.create_issue",
            "todo_write",
        ] {
            assert!(!plan_mode_admits(writer), "{writer}");
        }
        let v: Value = serde_json::from_str(&exit_plan_mode(&mut active)).unwrap();
        assert!(!active);
        assert_eq!(v["changed"], true);
        assert_eq!(v.as_object().unwrap().len(), 10);
    }
}
