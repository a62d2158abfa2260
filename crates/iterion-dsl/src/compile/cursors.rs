//! Cursors as upstream checks them: a `cursor NAME:` declaration has either
//! `values:` (named prompts) or `bands:` (`"lo..hi"` ranges within [0, 1]
//! that do not overlap), never both nor neither (C085; a second declaration
//! of a name is C086 where it is declared); an agent/judge `cursors:` block
//! names declared cursors (C083 warning) with a value the cursor accepts
//! (C084). Owns no prompt rendering.

use foldhash::{HashMap, HashSet, HashSetExt};

use serde_json::Value;

use crate::diag::{Severity, codes};
use crate::ir::{NodeKind, Pos, Workflow};
use crate::lexer::Tok;
use crate::parser::Line;

use super::ctx::Ctx;

/// A cursor's accepted values.
pub(crate) enum CursorDef {
    /// Named values.
    Values(Vec<String>),
    /// `[lo, hi]` bands.
    Bands(Vec<(f64, f64)>),
}

/// The key of a `key: "prompt"` entry (a word or a quoted range).
fn entry_key(l: &Line) -> Option<&str> {
    match (
        l.toks.first().map(|t| &t.tok),
        l.toks.get(1).map(|t| &t.tok),
    ) {
        (Some(Tok::Word(k) | Tok::Str(k, _)), Some(Tok::Colon)) => Some(k),
        _ => None,
    }
}

fn prompt_of(l: &Line) -> Option<&str> {
    match l.toks.get(2).map(|t| &t.tok) {
        Some(Tok::Str(p, _) | Tok::Word(p)) if !p.is_empty() => Some(p),
        _ => None,
    }
}

fn band(range: &str) -> Result<(f64, f64), &'static str> {
    let (lo, hi) = range.split_once("..").ok_or("range must be \"lo..hi\"")?;
    let lo: f64 = lo.trim().parse().map_err(|_| "invalid lower bound")?;
    let hi: f64 = hi.trim().parse().map_err(|_| "invalid upper bound")?;
    if !(0.0..=1.0).contains(&lo) || !(0.0..=1.0).contains(&hi) {
        return Err("range must lie in [0.0, 1.0]");
    }
    if lo > hi {
        return Err("lower bound greater than upper bound");
    }
    Ok((lo, hi))
}

/// Check one declaration; `None` when malformed (reported).
pub(crate) fn declaration(
    name: &str,
    line: &Line,
    pos: Pos,
    ctx: &mut Ctx<'_>,
) -> Option<CursorDef> {
    let block = |key: &str| {
        line.children
            .iter()
            .find(|c| entry_key(c) == Some(key))
            .map(|c| c.children.as_slice())
    };
    let bad = |ctx: &mut Ctx<'_>, why: String| {
        ctx.error(codes::C085, pos, format!("cursor `{name}`: {why}"));
        None
    };
    match (block("values"), block("bands")) {
        (None, None) => bad(
            ctx,
            "declare either `values:` (named) or `bands:` (numeric)".into(),
        ),
        (Some(_), Some(_)) => bad(ctx, "declare `values:` or `bands:`, not both".into()),
        (Some(values), None) => {
            let mut seen = HashSet::new();
            for v in values {
                let (Some(k), Some(_)) = (entry_key(v), prompt_of(v)) else {
                    return bad(ctx, "a value entry has an empty name or prompt".into());
                };
                if !seen.insert(k) {
                    return bad(ctx, format!("value `{k}` is declared twice"));
                }
            }
            if seen.is_empty() {
                return bad(ctx, "`values:` is empty".into());
            }
            Some(CursorDef::Values(
                seen.into_iter().map(str::to_owned).collect(),
            ))
        }
        (None, Some(bands)) => {
            let mut out: Vec<(f64, f64)> = Vec::new();
            for b in bands {
                let range = entry_key(b).unwrap_or_default();
                match band(range) {
                    Ok((lo, hi)) => {
                        if let Some((l2, h2)) = out.iter().find(|(l2, h2)| lo <= *h2 && *l2 <= hi) {
                            return bad(
                                ctx,
                                format!("bands overlap: [{lo}..{hi}] and [{l2}..{h2}]"),
                            );
                        }
                        out.push((lo, hi));
                    }
                    Err(why) => return bad(ctx, format!("band `{range}`: {why}")),
                }
            }
            if out.is_empty() {
                return bad(ctx, "`bands:` is empty".into());
            }
            Some(CursorDef::Bands(out))
        }
    }
}

/// Why `value` is not accepted by `def`, if it is not.
fn refuse(def: &CursorDef, value: &Value) -> Option<&'static str> {
    let number = value
        .as_f64()
        .or_else(|| value.as_str().and_then(|s| s.trim().parse::<f64>().ok()));
    if let Some(v) = number {
        if !(0.0..=1.0).contains(&v) {
            return Some("numeric cursor values must lie in [0.0, 1.0]");
        }
        return match def {
            CursorDef::Bands(b) if !b.iter().any(|(lo, hi)| v >= *lo && v <= *hi) => {
                Some("no band covers this value")
            }
            _ => None,
        };
    }
    match (def, value.as_str()) {
        (CursorDef::Values(names), Some(s)) if names.iter().any(|n| n == s) => None,
        (CursorDef::Bands(_), _) => Some("the cursor declares bands: it takes a number"),
        _ => Some("not one of the declared values"),
    }
}

/// Agent/judge `cursors:` blocks against the declarations (C083, C084).
pub(crate) fn invocations(
    w: &Workflow,
    defs: &HashMap<String, Option<CursorDef>>,
    ctx: &mut Ctx<'_>,
) {
    for (id, n) in &w.nodes {
        if !matches!(n.kind, NodeKind::Agent | NodeKind::Judge) {
            continue;
        }
        let Some(Value::Object(settings)) = n.properties.get("cursors") else {
            continue;
        };
        for (key, value) in settings {
            if key == "enabled" {
                continue;
            }
            let Some(def) = defs.get(key) else {
                ctx.push(
                    codes::C083,
                    Severity::Warning,
                    n.pos,
                    format!(
                        "{} `{id}` uses cursor `{key}`, which is not declared (`cursor {key}:`)",
                        n.kind.as_str()
                    ),
                    None,
                );
                continue;
            };
            if value.as_str().is_some_and(|s| s.contains("${")) {
                continue;
            }
            if let Some(def) = def
                && let Some(why) = refuse(def, value)
            {
                ctx.error(
                    codes::C084,
                    n.pos,
                    format!(
                        "{} `{id}`: cursor `{key}` value {value}: {why}",
                        n.kind.as_str()
                    ),
                );
            }
        }
    }
}
