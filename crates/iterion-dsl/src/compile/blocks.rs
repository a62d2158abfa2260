//! Upstream's checks on the blocks that configure rather than run: presets
//! (C070 unknown variable, C071 wrong type, C072 duplicate), attachments
//! (C050 duplicate, C051 clash with a variable, C052 `accept_mime` not
//! `type/subtype`), and per-node settings checked against the workflow:
//! `max_tokens` over `budget.max_tokens` (C037 warning), `compaction`
//! ranges (C043), `memory` without scope (C048) or on a backend that
//! ignores it (C047 warning), and capability names (C081 shape, C080
//! unknown and C082 board capability under a sandbox, both warnings).
//! Owns no graph rule.

use foldhash::{HashSet, HashSetExt};
use std::collections::BTreeMap;

use serde_json::Value;

use crate::diag::{Severity, codes};
use crate::ir::{AttachmentDecl, FieldType, NodeKind, VarDecl, Workflow};
use crate::lexer::Tok;
use crate::parser::{Line, PValue, parse_value};

use super::ctx::Ctx;

/// Name of an entry line (`name:` or `name: value`).
fn entry_name(l: &Line) -> Option<&str> {
    match (
        l.toks.first().map(|t| &t.tok),
        l.toks.get(1).map(|t| &t.tok),
    ) {
        (Some(Tok::Word(n)), Some(Tok::Colon)) => Some(n),
        _ => None,
    }
}

/// The value of a `key: value` line.
fn entry_value(l: &Line) -> Option<PValue> {
    parse_value(l.toks.get(2..)?).ok()
}

/// The text of the workflow's own `key: value` line (`default_backend:`).
pub(crate) fn workflow_text(wline: &Line, key: &str) -> Option<String> {
    wline
        .children
        .iter()
        .find(|l| entry_name(l) == Some(key))
        .and_then(entry_value)
        .and_then(|v| v.text().map(str::to_owned))
}

/// The entries of the workflow's own `KEY:` block.
pub(crate) fn workflow_entries<'a>(wline: &'a Line, key: &str) -> &'a [Line] {
    wline
        .children
        .iter()
        .find(|l| entry_name(l) == Some(key))
        .map_or(&[][..], |l| l.children.as_slice())
}

/// `key: value` entries as a JSON object (for numeric settings).
pub(crate) fn entries_json(entries: &[Line]) -> Value {
    Value::Object(
        entries
            .iter()
            .filter_map(|l| Some((entry_name(l)?.to_owned(), entry_value(l)?.to_json())))
            .collect(),
    )
}

/// Attachments declared at the top and in the workflow (C050–C052), by
/// name (a duplicate or a clash with a variable is reported and skipped).
pub(crate) fn attachments(
    blocks: &[&[Line]],
    vars: &BTreeMap<String, VarDecl>,
    ctx: &mut Ctx<'_>,
) -> BTreeMap<String, AttachmentDecl> {
    let mut out = BTreeMap::new();
    for entry in blocks.iter().flat_map(|b| b.iter()) {
        let Some(name) = entry_name(entry) else {
            continue;
        };
        if vars.contains_key(name) {
            ctx.error(
                codes::C051,
                entry.pos(),
                format!("attachment `{name}` has the name of a declared variable; rename one"),
            );
            continue;
        }
        if out.contains_key(name) {
            ctx.error(
                codes::C050,
                entry.pos(),
                format!("attachment `{name}` is declared more than once"),
            );
            continue;
        }
        let mut decl = AttachmentDecl {
            kind: entry_value(entry)
                .and_then(|v| v.text().map(str::to_owned))
                .unwrap_or_else(|| "file".to_owned()),
            ..AttachmentDecl::default()
        };
        for c in &entry.children {
            match (entry_name(c), entry_value(c)) {
                (Some("description"), Some(v)) => decl.description = v.text().map(str::to_owned),
                (Some("required"), Some(PValue::Word(w))) => decl.required = w == "true",
                (Some("accept_mime"), Some(PValue::List(items))) => {
                    for (item, pos) in items {
                        let Some(m) = item.text() else { continue };
                        let ok = m
                            .split_once('/')
                            .is_some_and(|(t, s)| !t.is_empty() && !s.is_empty());
                        if !ok {
                            ctx.error(
                                codes::C052,
                                pos,
                                format!(
                                    "attachment `{name}`: accept_mime `{m}` is not `type/subtype`"
                                ),
                            );
                            continue;
                        }
                        decl.accept_mime.push(m.to_owned());
                    }
                }
                _ => {}
            }
        }
        out.insert(name.to_owned(), decl);
    }
    out
}

/// Presets: each names declared variables with values of their type
/// (C070–C072); returns the values of every preset, typed as their
/// variables (an int written for a float is a float).
pub(crate) fn presets(
    entries: &[Line],
    vars: &BTreeMap<String, VarDecl>,
    ctx: &mut Ctx<'_>,
) -> BTreeMap<String, BTreeMap<String, Value>> {
    let mut seen = HashSet::new();
    let mut out: BTreeMap<String, BTreeMap<String, Value>> = BTreeMap::new();
    for entry in entries {
        let Some(name) = entry_name(entry) else {
            continue;
        };
        if !seen.insert(name) {
            ctx.error(
                codes::C072,
                entry.pos(),
                format!("preset `{name}` is declared more than once"),
            );
            continue;
        }
        for c in &entry.children {
            let Some(key) = entry_name(c) else { continue };
            let Some(var) = vars.get(key) else {
                ctx.error(
                    codes::C070,
                    c.pos(),
                    format!("preset `{name}` sets `{key}`, which is not declared in vars:"),
                );
                continue;
            };
            let fits = match (var.ty, entry_value(c)) {
                (
                    FieldType::String | FieldType::Json | FieldType::StringArray,
                    Some(PValue::Str(..)),
                ) => true,
                (FieldType::Int, Some(PValue::Word(w))) => w.parse::<i64>().is_ok(),
                (FieldType::Float, Some(PValue::Word(w))) => w.parse::<f64>().is_ok(),
                (FieldType::Bool, Some(PValue::Word(w))) => w == "true" || w == "false",
                _ => false,
            };
            if !fits {
                ctx.error(
                    codes::C071,
                    c.pos(),
                    format!("preset `{name}`: the value of `{key}` does not fit its declared type"),
                );
                continue;
            }
            let Some(value) = entry_value(c).map(|v| v.to_json()) else {
                continue;
            };
            let value = match (var.ty, value.as_f64()) {
                (FieldType::Float, Some(f)) => {
                    serde_json::Number::from_f64(f).map_or(value, Value::Number)
                }
                _ => value,
            };
            out.entry(name.to_owned())
                .or_default()
                .insert(key.to_owned(), value);
        }
        out.entry(name.to_owned()).or_default();
    }
    out
}

/// A number of a JSON object field.
fn num(v: Option<&Value>, key: &str) -> Option<f64> {
    v?.get(key)?.as_f64()
}

/// Per-node settings checked against the workflow (C037, C043, C047, C048).
pub(crate) fn node_settings(w: &Workflow, workflow_compaction: Option<&Value>, ctx: &mut Ctx<'_>) {
    let cap = w
        .budget
        .get("max_tokens")
        .and_then(Value::as_i64)
        .filter(|c| *c > 0);
    let compaction = |scope: &str, v: Option<&Value>, pos, ctx: &mut Ctx<'_>| {
        if let Some(t) = num(v, "threshold")
            && t != 0.0
            && !(t > 0.0 && t <= 1.0)
        {
            ctx.error(
                codes::C043,
                pos,
                format!("{scope}: compaction.threshold must be in (0, 1], got {t}"),
            );
        }
        if let Some(p) = num(v, "preserve_recent")
            && p < 0.0
        {
            ctx.error(
                codes::C043,
                pos,
                format!("{scope}: compaction.preserve_recent must be at least 1 when set (0 inherits), got {p}"),
            );
        }
    };
    compaction(
        &format!("workflow `{}`", w.name),
        workflow_compaction,
        w.pos,
        ctx,
    );
    for (id, n) in &w.nodes {
        if !matches!(n.kind, NodeKind::Agent | NodeKind::Judge) {
            continue;
        }
        let scope = format!("{} `{id}`", n.kind.as_str());
        if let (Some(cap), Some(mt)) = (cap, n.properties.get("max_tokens").and_then(Value::as_i64))
            && mt > cap
        {
            ctx.push(
                codes::C037,
                Severity::Warning,
                n.pos,
                format!("{scope} has max_tokens {mt}, over the workflow's budget.max_tokens {cap}"),
                None,
            );
        }
        compaction(&scope, n.properties.get("compaction"), n.pos, ctx);
        let memory = n.properties.get("memory");
        if memory
            .and_then(|m| m.get("enabled"))
            .and_then(Value::as_bool)
            == Some(true)
        {
            let scoped = memory
                .and_then(|m| m.get("scope"))
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty());
            if !scoped {
                ctx.error(
                    codes::C048,
                    n.pos,
                    format!("{scope}: `memory: enabled` needs a `scope:` name"),
                );
            }
            if let Some(b) = n.properties.get("backend").and_then(Value::as_str)
                && !b.is_empty()
                && b != "claw"
            {
                ctx.push(
                    codes::C047,
                    Severity::Warning,
                    n.pos,
                    format!(
                        "{scope}: memory is only used by backend claw; backend `{b}` ignores it"
                    ),
                    None,
                );
            }
        }
    }
}

/// Capabilities upstream's registry knows (`boardops`).
const KNOWN_CAPABILITIES: &[&str] = &[
    "board.read",
    "board.create",
    "board.move",
    "board.assign",
    "board.label",
    "board.close",
];

/// `domain` or `domain.action`, each `[a-z][a-z0-9_]*` (upstream's shape).
fn capability_shape(cap: &str) -> bool {
    let part = |p: &str| {
        let mut c = p.chars();
        c.next().is_some_and(|f| f.is_ascii_lowercase())
            && c.all(|x| x.is_ascii_lowercase() || x.is_ascii_digit() || x == '_')
    };
    let mut parts = cap.split('.');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(d), None, None) => part(d),
        (Some(d), Some(a), None) => part(d) && part(a),
        _ => false,
    }
}

fn capability(cap: &str, scope: &str, pos: crate::ir::Pos, ctx: &mut Ctx<'_>) {
    if cap.is_empty() {
        return;
    }
    if !capability_shape(cap) {
        ctx.error(
            codes::C081,
            pos,
            format!("{scope} capability `{cap}` must be `domain` or `domain.action` (lowercase letters, digits, underscores)"),
        );
    } else if !KNOWN_CAPABILITIES.contains(&cap) {
        ctx.push(
            codes::C080,
            Severity::Warning,
            pos,
            format!("{scope} capability `{cap}` is not in the built-in registry; it is passed through to the executor"),
            None,
        );
    }
}

/// Capability names of the workflow and of each agent/judge (C080–C082).
pub(crate) fn capabilities(w: &Workflow, wline: &Line, ctx: &mut Ctx<'_>) {
    if let Some(l) = wline
        .children
        .iter()
        .find(|l| entry_name(l) == Some("capabilities"))
        && let Some(PValue::List(items)) = entry_value(l)
    {
        for (item, pos) in items {
            if let Some(cap) = item.text() {
                capability(cap, "workflow", pos, ctx);
            }
        }
    }
    let sandboxed = w.sandbox.as_ref().is_some_and(|s| s.spec.mode.is_active());
    for (id, n) in &w.nodes {
        if !matches!(n.kind, NodeKind::Agent | NodeKind::Judge) {
            continue;
        }
        let Some(Value::Array(caps)) = n.properties.get("capabilities") else {
            continue;
        };
        let scope = format!("{} `{id}`", n.kind.as_str());
        for cap in caps.iter().filter_map(Value::as_str) {
            capability(cap, &scope, n.pos, ctx);
            if sandboxed && (cap == "board" || cap.starts_with("board.")) {
                ctx.push(
                    codes::C082,
                    Severity::Warning,
                    n.pos,
                    format!("{scope}: capability `{cap}` under a sandbox needs the HTTP board transport; without it the capability does nothing inside the container"),
                    None,
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// Upstream's presets tests: values typed as their variables (an int
    /// written for a float is a float); attachments keep their declaration.
    #[test]
    fn presets_and_attachments_reach_the_ir() {
        let src = "vars:\n  ratio: float = 0.5\n  name: string = \"x\"\n\npresets:\n  pick:\n    ratio: 1\n    name: \"y\"\n  empty:\n\nattachments:\n  logo: image\n    required: true\n  notes:\n\nworkflow w:\n  entry: a\n  a -> done\ntool a:\n  command: \"true\"\n";
        let compiled = crate::compile_source(src, Path::new("p.iter"));
        assert!(!compiled.has_errors(), "{:?}", compiled.diagnostics);
        let w = &compiled.workflows[0];
        assert_eq!(w.presets["pick"]["ratio"], serde_json::json!(1.0));
        assert!(w.presets["pick"]["ratio"].is_f64());
        assert_eq!(w.presets["pick"]["name"], "y");
        assert!(w.presets["empty"].is_empty());
        assert_eq!(w.attachments["logo"].kind, "image");
        assert!(w.attachments["logo"].required);
        assert_eq!(w.attachments["notes"].kind, "file");
        assert!(!w.attachments["notes"].required);
    }
}
