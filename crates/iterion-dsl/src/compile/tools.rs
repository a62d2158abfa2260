//! C322: the names in a `claw` agent's or judge's `tools:` list, checked
//! against the tool registry through the caller's hook (the registry lives
//! in the agent crate; this crate knows only the grammar). Owns which
//! nodes are checked, where the diagnostic points and what it says, not
//! which names exist.
//!
//! Only a node whose backend is written as `claw` (its own `backend:`, or
//! the workflow's `default_backend:`) is checked: a CLI backend
//! (`claude_code`, `codex`) gets its list verbatim (`--allowedTools`; the
//! CLI ignores names it does not know, upstream
//! `pkg/backend/delegate/claude_code.go`), and a node whose backend is
//! decided at launch (`${VAR}`, absent, detected) is checked by the
//! engine's admission instead. A name holding `${` is decided at launch
//! too (upstream C135 skips the same three).

use crate::diag::codes;
use crate::parser::PValue;

use super::ctx::Ctx;
use super::decls::NodeDecl;

/// Check each `tools:` entry of `n` when its backend is `claw`;
/// `tool_check` returns why a name is unknown, `None` when the registry
/// knows it.
pub(crate) fn names(
    n: &NodeDecl<'_>,
    default_backend: Option<&str>,
    ctx: &mut Ctx<'_>,
    tool_check: &dyn Fn(&str) -> Option<String>,
) {
    let backend = n.text("backend").or(default_backend).map(str::trim);
    if backend != Some("claw") {
        return;
    }
    let Some(PValue::List(items)) = n.get("tools").and_then(|p| p.value.as_ref()) else {
        return;
    };
    for (item, pos) in items {
        let Some(name) = item.text() else {
            continue;
        };
        if name.contains("${") {
            continue;
        }
        if let Some(reason) = tool_check(name) {
            ctx.error(
                codes::C322,
                *pos,
                format!(
                    "`{}`: unknown tool `{name}` on the claw backend: {reason}",
                    n.id
                ),
            );
        }
    }
}
