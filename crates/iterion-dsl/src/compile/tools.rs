//! C322: the names in an agent's or judge's `tools:` list, checked against
//! the tool registry through the caller's hook (the registry lives in the
//! agent crate; this crate knows only the grammar). Owns where the
//! diagnostic points and what it says, not which names exist.

use crate::diag::codes;
use crate::parser::PValue;

use super::ctx::Ctx;
use super::decls::NodeDecl;

/// Check each `tools:` entry of `n`; `tool_check` returns why a name is
/// unknown, `None` when the registry knows it.
pub(crate) fn names(
    n: &NodeDecl<'_>,
    ctx: &mut Ctx<'_>,
    tool_check: &dyn Fn(&str) -> Option<String>,
) {
    let Some(PValue::List(items)) = n.get("tools").and_then(|p| p.value.as_ref()) else {
        return;
    };
    for (item, pos) in items {
        let Some(name) = item.text() else {
            continue;
        };
        if let Some(reason) = tool_check(name) {
            ctx.error(
                codes::C322,
                *pos,
                format!("`{}`: unknown tool `{name}`: {reason}", n.id),
            );
        }
    }
}
