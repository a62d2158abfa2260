//! Property tables (which keys each block accepts and the kind of value each
//! takes, following upstream's grammar), enumerated words, and reading one
//! `key: value` line against a table (E001/E002/E003/E012, enum codes).
//! Owns no cross-property or cross-declaration rule.

use serde_json::Value;

use crate::diag::{Severity, codes};
use crate::ir::Pos;
use crate::lexer::{STok, Tok};
use crate::parser::{Line, PValue, parse_value};

use super::ctx::{Ctx, nearest, short};

// `system:`/`user:`/`instructions:`/`interaction_prompt:` take K::S: a bare
// name refers to a declared prompt (C003 when unknown), a string is an
// inline prompt (upstream docs/dsl.md, "A prompt may also be written where
// it is used").

/// Property kinds of the tables.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum K {
    /// String (quoted, raw, block, or one plain word).
    S,
    /// Bare identifier.
    I,
    /// Integer.
    N,
    /// Number.
    F,
    /// Boolean.
    B,
    /// Inline list.
    L,
    /// String map (inline `{}` or indented block).
    M,
    /// Indented sub-block.
    Blk,
    /// Anything.
    Any,
}

pub(crate) const LLM: &[(&str, K)] = &[
    ("description", K::S),
    ("fallbacks", K::Blk),
    ("model", K::S),
    ("backend", K::S),
    ("provider", K::Any),
    ("command", K::S),
    ("delegate", K::S),
    ("input", K::I),
    ("output", K::I),
    ("publish", K::I),
    ("artifact_labels", K::L),
    ("system", K::S),
    ("user", K::S),
    ("session", K::I),
    ("session_slot", K::Any),
    ("tools", K::L),
    ("tool_policy", K::L),
    ("capabilities", K::L),
    ("skills", K::L),
    ("tool_max_steps", K::N),
    ("max_tokens", K::N),
    ("reasoning_effort", K::S),
    ("timeout", K::S),
    ("readonly", K::B),
    ("full_access", K::B),
    ("images", K::L),
    ("interaction", K::I),
    ("interaction_prompt", K::S),
    ("interaction_model", K::S),
    ("await", K::I),
    ("compress", K::I),
    ("auto_memory", K::I),
    ("permission", K::I),
    ("needs", K::Any),
    ("mcp", K::Blk),
    ("compaction", K::Blk),
    ("memory", K::Blk),
    ("sandbox", K::Any),
    ("cursors", K::Blk),
    ("allow", K::L),
    ("ask", K::L),
    ("deny", K::L),
];
pub(crate) const ROUTER: &[(&str, K)] = &[
    ("description", K::S),
    ("mode", K::I),
    ("model", K::S),
    ("backend", K::S),
    ("provider", K::Any),
    ("system", K::S),
    ("user", K::S),
    ("multi", K::B),
    ("reasoning_effort", K::S),
    ("over", K::S),
    ("as", K::I),
    ("key", K::I),
    ("depends_on", K::I),
    ("needs", K::Any),
];
pub(crate) const HUMAN: &[(&str, K)] = &[
    ("description", K::S),
    ("input", K::I),
    ("output", K::I),
    ("publish", K::I),
    ("artifact_labels", K::L),
    ("instructions", K::S),
    ("interaction", K::I),
    ("interaction_prompt", K::S),
    ("interaction_model", K::S),
    ("model", K::S),
    ("system", K::S),
    ("min_answers", K::N),
    ("await", K::I),
    ("review_url", K::S),
    ("posture", K::S),
    ("merge_strategy", K::S),
    ("merge_into", K::S),
    ("max_turns", K::N),
];
pub(crate) const TOOL: &[(&str, K)] = &[
    ("description", K::S),
    ("command", K::S),
    ("script", K::S),
    ("language", K::I),
    ("input", K::I),
    ("output", K::I),
    ("publish", K::I),
    ("artifact_labels", K::L),
    ("await", K::I),
    ("compress", K::I),
    ("permission", K::I),
    ("needs", K::Any),
    ("parallel_safe", K::B),
    ("goal", K::S),
    ("postcondition", K::S),
    ("policy", K::I),
    ("recovery", K::Blk),
    ("sandbox", K::Any),
    ("action", K::Any),
    ("connection", K::Any),
    ("params", K::Any),
    ("retry", K::Any),
    ("timeout", K::Any),
];
pub(crate) const COMPUTE: &[(&str, K)] = &[
    ("description", K::S),
    ("input", K::I),
    ("output", K::I),
    ("publish", K::I),
    ("artifact_labels", K::L),
    ("await", K::I),
    ("expr", K::M),
];
pub(crate) const EMIT: &[(&str, K)] = &[("description", K::S), ("event", K::S), ("with", K::Any)];
pub(crate) const WAIT: &[(&str, K)] = &[
    ("description", K::S),
    ("event", K::S),
    ("timeout", K::S),
    ("output", K::I),
];
pub(crate) const AWAIT_ANSWERS: &[(&str, K)] =
    &[("description", K::S), ("from", K::S), ("timeout", K::S)];
pub(crate) const FAIL: &[(&str, K)] = &[
    ("description", K::S),
    ("code", K::S),
    ("message", K::S),
    ("resumable", K::B),
];
/// Legacy `join` node of early v1 files (`strategy: wait_all`, `require: [a, b]`).
pub(crate) const JOIN: &[(&str, K)] = &[
    ("description", K::S),
    ("strategy", K::I),
    ("require", K::L),
    ("input", K::I),
    ("output", K::I),
    ("publish", K::I),
];
pub(crate) const SUBBOT: &[(&str, K)] = &[
    ("description", K::S),
    ("source", K::S),
    ("with", K::Any),
    ("output", K::I),
    ("needs", K::Any),
    ("isolated", K::B),
];
pub(crate) const MCP_SERVER: &[(&str, K)] = &[
    ("transport", K::I),
    ("command", K::S),
    ("args", K::L),
    ("url", K::S),
    ("auth", K::Blk),
    ("env", K::M),
    ("headers", K::M),
];
pub(crate) const CURSOR: &[(&str, K)] =
    &[("description", K::S), ("values", K::Blk), ("bands", K::Blk)];
pub(crate) const SUPERVISOR: &[(&str, K)] = &[
    ("watches", K::L),
    ("model", K::S),
    ("system", K::S),
    ("cooldown", K::S),
    ("max_evals", K::N),
    ("monitors", K::L),
];
pub(crate) const WORKFLOW: &[(&str, K)] = &[
    ("vars", K::Blk),
    ("attachments", K::Blk),
    ("mcp", K::Blk),
    ("entry", K::Any),
    ("default_backend", K::S),
    ("tool_policy", K::L),
    ("capabilities", K::L),
    ("skills", K::L),
    ("budget", K::Blk),
    ("resources", K::Blk),
    ("compaction", K::Blk),
    ("interaction", K::I),
    ("worktree", K::I),
    ("compress", K::I),
    ("auto_memory", K::I),
    ("loop_budget_guard", K::I),
    ("repo_devbox", K::I),
    ("workspace_checkpoint", K::I),
    ("permission", K::I),
    ("allow", K::L),
    ("ask", K::L),
    ("deny", K::L),
    ("sandbox", K::Any),
    ("secrets", K::Blk),
    ("contract", K::Any),
    ("description", K::S),
];
pub(crate) const BUDGET: &[(&str, K)] = &[
    ("max_parallel_branches", K::N),
    ("max_duration", K::S),
    ("max_cost_usd", K::F),
    ("max_tokens", K::N),
    ("max_iterations", K::N),
    ("warn_tokens", K::N),
];

/// Accepted words for enumerated properties, with the code a bad word gets.
pub(crate) fn enum_rule(key: &str) -> Option<(&'static [&'static str], &'static str)> {
    Some(match key {
        "session" => (
            &[
                "fresh",
                "inherit",
                "inherit_if_available",
                "fork",
                "artifacts_only",
                "persist",
            ],
            codes::E020,
        ),
        "await" => (&["wait_all", "best_effort"], codes::E020),
        "compress" => (&["off", "on", "ultra"], "C102"),
        "auto_memory" => (&["off", "on"], "C131"),
        "loop_budget_guard" => (&["off", "on"], "C133"),
        "repo_devbox" => (&["off", "on"], "C134"),
        "workspace_checkpoint" => (&["off", "on"], "C139"),
        "permission" => (&["off", "ask", "deny"], "C110"),
        "worktree" => (&["auto", "none"], codes::C142),
        "policy" => (&["required", "recover", "best_effort"], "C103"),
        "interaction" => (
            &[
                "none",
                "human",
                "llm",
                "llm_or_human",
                "review",
                "async",
                "human_or_host",
            ],
            codes::E020,
        ),
        _ => return None,
    })
}

pub(crate) const REASONING: &[&str] = &["low", "medium", "high", "xhigh", "max", "ultracode"];
pub(crate) const ROUTER_MODES: &[&str] = &[
    "fan_out_all",
    "fan_out_each",
    "condition",
    "round_robin",
    "llm",
];
pub(crate) const LANGUAGES: &[&str] = &["js", "py", "sh", "bash", "node", "python", "python3"];

/// A property as read from one line.
#[derive(Debug)]
pub(crate) struct Prop<'a> {
    pub key: String,
    pub pos: Pos,
    pub value_pos: Pos,
    /// `None` when the line is `key:` with a block under it.
    pub value: Option<PValue>,
    pub line: &'a Line,
}

impl Prop<'_> {
    pub(crate) fn text(&self) -> Option<&str> {
        self.value.as_ref().and_then(PValue::text)
    }
}

impl Ctx<'_> {
    /// Read `key: value` lines of a block, checking names and value kinds
    /// against `table` (None = accept any name).
    pub(crate) fn props<'a>(
        &mut self,
        lines: &'a [Line],
        table: Option<&[(&str, K)]>,
        what: &str,
    ) -> Vec<Prop<'a>> {
        let mut out = Vec::new();
        for line in lines {
            if let Some(p) = self.prop(line, table, what) {
                out.push(p);
            }
        }
        out
    }

    pub(crate) fn prop<'a>(
        &mut self,
        line: &'a Line,
        table: Option<&[(&str, K)]>,
        what: &str,
    ) -> Option<Prop<'a>> {
        let toks = &line.toks;
        let pos = line.pos();
        // `with { … }` inside emit/subbot bodies
        let (key, rest) = match toks.as_slice() {
            [
                STok {
                    tok: Tok::Word(w), ..
                },
                STok {
                    tok: Tok::LBrace, ..
                },
                ..,
            ] if w == "with" => ("with".to_string(), &toks[1..]),
            [
                STok {
                    tok: Tok::Word(w), ..
                },
                STok {
                    tok: Tok::Colon, ..
                },
                rest @ ..,
            ] => (w.clone(), rest),
            [
                STok {
                    tok: Tok::Str(w, _),
                    ..
                },
                STok {
                    tok: Tok::Colon, ..
                },
                rest @ ..,
            ] => (w.clone(), rest),
            _ => {
                self.push(
                    codes::E001,
                    Severity::Error,
                    pos,
                    format!("expected `key: value` in {what}, found `{}`", short(toks)),
                    Some("Inside a block every line is `key: value` (or `src -> dst` inside `workflow:`); check this line's indentation"),
                );
                return None;
            }
        };
        let kind = match table {
            Some(t) => match t.iter().find(|(n, _)| *n == key) {
                Some((_, k)) => *k,
                None if self.diags.full() => {
                    // past the bound: count it, skip building the hint
                    self.diags.count(Severity::Error);
                    return None;
                }
                None => {
                    let names: Vec<&str> = t.iter().map(|(n, _)| *n).collect();
                    let hint = if key == "network" {
                        // facts §2.3: `network:` is only a sub-block of `sandbox:`
                        "`network:` is a sub-block of `sandbox:`: indent it under the workflow's `sandbox:` block".to_string()
                    } else {
                        nearest(&key, &names)
                            .map(|n| format!("did you mean `{n}`?"))
                            .unwrap_or_else(|| format!("accepted properties: {}", names.join(", ")))
                    };
                    self.push(
                        codes::E012,
                        Severity::Error,
                        pos,
                        format!("unknown property `{key}` in {what}"),
                        Some(&hint),
                    );
                    return None;
                }
            },
            None => K::Any,
        };
        let value_pos = rest.first().map_or(pos, |t| t.pos);
        let dash_items = rest.is_empty()
            && !line.children.is_empty()
            && line
                .children
                .iter()
                .all(|c| matches!(c.toks.first().map(|t| &t.tok), Some(Tok::Punct('-'))));
        let value = if dash_items {
            // a list written as one `- item` per indented line
            let mut items = Vec::new();
            for c in &line.children {
                let item = &c.toks[1..];
                match parse_value(item) {
                    Ok(PValue::Expr(e)) if e.is_empty() => {
                        self.error(codes::E002, c.pos(), "empty list item");
                    }
                    Ok(v) => items.push((v, item.first().map_or(c.pos(), |t| t.pos))),
                    Err((p, m)) => {
                        self.error(codes::E002, if p.line == 0 { c.pos() } else { p }, m)
                    }
                }
            }
            Some(PValue::List(items))
        } else if rest.is_empty() {
            None
        } else {
            match parse_value(rest) {
                Ok(v) => Some(v),
                Err((p, m)) => {
                    self.error(codes::E002, if p.line == 0 { value_pos } else { p }, m);
                    return None;
                }
            }
        };
        if value.is_some() && !dash_items && !line.children.is_empty() {
            self.error(
                codes::E003,
                line.children[0].pos(),
                format!("unexpected indented block under `{key}: …`"),
            );
        }
        let ok = match (&value, kind) {
            (_, K::Any) => true,
            (None, K::Blk | K::M) => true,
            (None, _) => false,
            (Some(_), K::Blk) => false,
            (Some(PValue::Map(_)), K::M) => true,
            (Some(_), K::M) => false,
            (Some(PValue::Str(..)), K::S) => true,
            (Some(PValue::Word(_)), K::S) => true,
            (Some(v), K::I) => v.ident().is_some(),
            (Some(v), K::N) => v.int().is_some(),
            (Some(PValue::Word(w)), K::F) => w.parse::<f64>().is_ok(),
            (Some(PValue::Word(w)), K::B) => w == "true" || w == "false",
            (Some(PValue::List(_)), K::L) => true,
            _ => false,
        };
        if !ok {
            let want = match kind {
                K::S => "a string",
                K::I => "a bare name",
                K::N => "an integer",
                K::F => "a number",
                K::B => "`true` or `false`",
                K::L => "a list `[a, b]`",
                K::M => "a map",
                K::Blk => "an indented block",
                K::Any => "a value",
            };
            let got = value.as_ref().map_or("nothing", PValue::describe);
            let hint = match (kind, &value) {
                (K::I, Some(PValue::Str(..))) => Some(
                    "This property takes a bare name — a declared `schema` or node — not a quoted string: remove the quotes",
                ),
                (K::Blk, _) => Some("open an indented block under this header"),
                _ => None,
            };
            // a bare word that is not a bool or a number literal is an
            // invalid value (E020) in upstream's parser; a wrong shape
            // (string, list, block) is an expected token (E002)
            let code = match (kind, &value) {
                (K::B | K::N | K::F, Some(PValue::Word(_))) => codes::E020,
                _ => codes::E002,
            };
            self.push(
                code,
                Severity::Error,
                value_pos,
                format!("`{key}` expects {want}, found {got}"),
                hint,
            );
            return None;
        }
        if let (Some((allowed, code)), Some(v)) = (enum_rule(&key), &value)
            && let Some(w) = v.text()
            && !allowed.contains(&w)
        {
            self.push(
                code,
                Severity::Error,
                value_pos,
                format!("invalid {key} `{w}`"),
                Some(&format!("use one of: {}", allowed.join(", "))),
            );
        }
        Some(Prop {
            key,
            pos,
            value_pos,
            value,
            line,
        })
    }
}

/// A block's `key: value` lines as a JSON object, nested blocks as nested
/// objects (an `mcp` server's `auth`, a free-form workflow property):
/// reading a block without a table. Here, not in `workflow`, so `mcp` and
/// `workflow` reach it without naming each other.
pub(crate) fn block_json(lines: &[Line]) -> Value {
    // iterative flatten of one level: `key: value` lines into an object;
    // deeper blocks recurse through a bounded depth (lexer cap)
    let mut map = serde_json::Map::new();
    for l in lines {
        if let [
            STok {
                tok: Tok::Word(k), ..
            },
            STok {
                tok: Tok::Colon, ..
            },
            rest @ ..,
        ] = l.toks.as_slice()
        {
            let v = if rest.is_empty() {
                block_json(&l.children)
            } else {
                parse_value(rest).map_or(Value::Null, |v| v.to_json())
            };
            map.insert(k.clone(), v);
        }
    }
    Value::Object(map)
}
