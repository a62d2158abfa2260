//! Compiler: line tree → [`crate::ir::Workflow`]s plus diagnostics.
//!
//! Owns the meaning of every declaration and property (the property tables
//! below follow upstream's grammar), name resolution, the graph checks
//! (C008, C010–C016, C019…), and the sandbox block (C044, C128, C312,
//! C320). Everything is iterative; nothing here can recurse deeper than the
//! lexer's nesting cap.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

use iterion_core::NodeId;
use serde_json::Value;

use crate::diag::{Diagnostic, Severity, codes};
use crate::ir::{
    Condition, Edge, Field, FieldType, ForEach, LoopBound, Node, NodeKind, Pos, Schema, SecretDecl,
    SecretDelivery, Target, ToolSpec, VarDecl, Workflow,
};
use crate::lexer::{STok, Tok};
use crate::parser::{Line, PValue, is_ident, parse_value, tokens_text};
use crate::sandbox;

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

const LLM: &[(&str, K)] = &[
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
const ROUTER: &[(&str, K)] = &[
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
const HUMAN: &[(&str, K)] = &[
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
const TOOL: &[(&str, K)] = &[
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
const COMPUTE: &[(&str, K)] = &[
    ("description", K::S),
    ("input", K::I),
    ("output", K::I),
    ("publish", K::I),
    ("artifact_labels", K::L),
    ("await", K::I),
    ("expr", K::M),
];
const EMIT: &[(&str, K)] = &[("description", K::S), ("event", K::S), ("with", K::Any)];
const WAIT: &[(&str, K)] = &[
    ("description", K::S),
    ("event", K::S),
    ("timeout", K::S),
    ("output", K::I),
];
const AWAIT_ANSWERS: &[(&str, K)] = &[("description", K::S), ("from", K::S), ("timeout", K::S)];
const FAIL: &[(&str, K)] = &[
    ("description", K::S),
    ("code", K::S),
    ("message", K::S),
    ("resumable", K::B),
];
/// Legacy `join` node of early v1 files (`strategy: wait_all`, `require: [a, b]`).
const JOIN: &[(&str, K)] = &[
    ("description", K::S),
    ("strategy", K::I),
    ("require", K::L),
    ("input", K::I),
    ("output", K::I),
    ("publish", K::I),
];
const SUBBOT: &[(&str, K)] = &[
    ("description", K::S),
    ("source", K::S),
    ("with", K::Any),
    ("output", K::I),
    ("needs", K::Any),
    ("isolated", K::B),
];
const MCP_SERVER: &[(&str, K)] = &[
    ("transport", K::I),
    ("command", K::S),
    ("args", K::L),
    ("url", K::S),
    ("auth", K::Blk),
    ("env", K::M),
    ("headers", K::M),
];
const CURSOR: &[(&str, K)] = &[("description", K::S), ("values", K::Blk), ("bands", K::Blk)];
const SUPERVISOR: &[(&str, K)] = &[
    ("watches", K::L),
    ("model", K::S),
    ("system", K::S),
    ("cooldown", K::S),
    ("max_evals", K::N),
    ("monitors", K::L),
];
const WORKFLOW: &[(&str, K)] = &[
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
const BUDGET: &[(&str, K)] = &[
    ("max_parallel_branches", K::N),
    ("max_duration", K::S),
    ("max_cost_usd", K::F),
    ("max_tokens", K::N),
    ("max_iterations", K::N),
    ("warn_tokens", K::N),
];

/// C321: a bound the runtime enforces must be a positive Go duration
/// (`iterion_core::duration`, the one parser of every iterion duration).
fn check_duration(ctx: &mut Ctx<'_>, pos: Pos, what: &str, v: &PValue) {
    let ok = v
        .text()
        .and_then(iterion_core::duration::parse_go_duration)
        .is_some_and(|d| !d.is_zero());
    if !ok {
        ctx.push(
            codes::C321,
            Severity::Error,
            pos,
            format!("{what} must be a positive duration"),
            Some("write it as a Go duration: \"90s\", \"10m\", \"1h30m\", \"250ms\""),
        );
    }
}

/// Accepted words for enumerated properties, with the code a bad word gets.
fn enum_rule(key: &str) -> Option<(&'static [&'static str], &'static str)> {
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

const REASONING: &[&str] = &["low", "medium", "high", "xhigh", "max", "ultracode"];
const ROUTER_MODES: &[&str] = &[
    "fan_out_all",
    "fan_out_each",
    "condition",
    "round_robin",
    "llm",
];
const LANGUAGES: &[&str] = &["js", "py", "sh", "bash", "node", "python", "python3"];

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

pub(crate) struct Ctx<'f> {
    pub file: &'f str,
    pub diags: Vec<Diagnostic>,
}

impl Ctx<'_> {
    pub(crate) fn push(
        &mut self,
        code: &'static str,
        sev: Severity,
        pos: Pos,
        msg: impl Into<String>,
        hint: Option<&str>,
    ) {
        let mut d = Diagnostic::new(code, sev, self.file, pos, msg);
        d.hint = hint.map(str::to_owned);
        self.diags.push(d);
    }

    pub(crate) fn error(&mut self, code: &'static str, pos: Pos, msg: impl Into<String>) {
        self.push(code, Severity::Error, pos, msg, None);
    }

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
            self.push(
                codes::E002,
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

fn short(toks: &[STok]) -> String {
    let s = tokens_text(toks);
    if s.chars().count() > 40 {
        format!("{}…", s.chars().take(40).collect::<String>())
    } else {
        s
    }
}

/// Closest name by edit distance (≤ 2), for "did you mean".
fn nearest<'a>(word: &str, names: &[&'a str]) -> Option<&'a str> {
    let mut best: Option<(usize, &str)> = None;
    for n in names {
        let d = distance(word, n);
        if d <= 2 && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, n));
        }
    }
    best.map(|(_, n)| n)
}

fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().take(64).collect();
    let b: Vec<char> = b.chars().take(64).collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// A declared node before IR construction.
struct NodeDecl<'a> {
    id: String,
    kind: NodeKind,
    pos: Pos,
    props: Vec<Prop<'a>>,
}

impl<'a> NodeDecl<'a> {
    fn get(&self, key: &str) -> Option<&Prop<'a>> {
        self.props.iter().find(|p| p.key == key)
    }
    fn text(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(Prop::text)
    }
}

struct Group<'a> {
    members: Vec<(NodeKind, String, &'a Line)>,
    edges: Vec<&'a Line>,
}

/// Compile a line tree.
pub(crate) fn compile(
    lines: &[Line],
    ctx: &mut Ctx<'_>,
    net_check: &dyn Fn(&iterion_core::NetworkSpec) -> Vec<(String, String)>,
) -> Vec<Workflow> {
    let mut vars: BTreeMap<String, VarDecl> = BTreeMap::new();
    let mut schemas: BTreeMap<String, Schema> = BTreeMap::new();
    let mut prompts: HashSet<String> = HashSet::new();
    let mut nodes: Vec<NodeDecl<'_>> = Vec::new();
    let mut workflows: Vec<&Line> = Vec::new();
    let mut secrets: Vec<SecretDecl> = Vec::new();
    let mut groups: HashMap<String, Group<'_>> = HashMap::new();
    let mut uses: Vec<(String, String, Pos)> = Vec::new();
    let mut names: HashMap<(String, String), Pos> = HashMap::new();
    let mut blocks_seen: HashMap<String, Pos> = HashMap::new();
    let mut first_decl = true;

    for line in lines {
        let toks = &line.toks;
        let pos = line.pos();
        let words: Vec<Option<&str>> = toks
            .iter()
            .map(|t| match &t.tok {
                Tok::Word(w) => Some(w.as_str()),
                _ => None,
            })
            .collect();
        let is_colon = |i: usize| toks.get(i).is_some_and(|t| t.tok == Tok::Colon);
        let kw = words.first().copied().flatten();
        let was_first = std::mem::replace(&mut first_decl, false);
        match kw {
            Some("dsl") if is_colon(1) => {
                let v = words.get(2).copied().flatten();
                if !was_first {
                    ctx.error(
                        "E041",
                        pos,
                        "the `dsl:` header must be the first declaration",
                    );
                }
                if !matches!(v, Some("1") | Some("2")) || toks.len() != 3 {
                    ctx.push(
                        codes::E040,
                        Severity::Error,
                        pos,
                        format!("unknown syntax profile `{}`", short(&toks[2..])),
                        Some("write `dsl: 2`, or omit the header for profile 1"),
                    );
                }
            }
            Some("import") => {
                ctx.error(
                    "C030",
                    pos,
                    "imports are not resolved: this file was compiled alone",
                );
            }
            Some(b @ ("vars" | "presets" | "attachments" | "secrets")) if is_colon(1) => {
                if toks.len() > 2 {
                    ctx.error(
                        codes::E002,
                        toks[2].pos,
                        format!("`{b}:` takes an indented block"),
                    );
                }
                if let Some(prev) = blocks_seen.insert(b.to_string(), pos) {
                    ctx.push(
                        codes::E014,
                        Severity::Error,
                        pos,
                        format!("duplicate `{b}:` block (first at line {})", prev.line),
                        Some("keep one block per file and merge the entries into it"),
                    );
                }
                match b {
                    "vars" => read_vars(&line.children, ctx, &mut vars),
                    "secrets" => read_secrets(&line.children, ctx, &mut secrets),
                    _ => loose_block(&line.children, ctx, b),
                }
            }
            Some("use") => {
                // use GROUP as PREFIX [with {…}]
                match (
                    words.get(1).copied().flatten(),
                    words.get(2).copied().flatten(),
                    words.get(3).copied().flatten(),
                ) {
                    (Some(g), Some("as"), Some(p)) if is_ident(g) && is_ident(p) => {
                        uses.push((g.to_string(), p.to_string(), pos));
                    }
                    _ => ctx.error(codes::E002, pos, "expected `use GROUP as PREFIX`"),
                }
            }
            Some(k) if words.get(1).copied().flatten().is_some() => {
                let name = words
                    .get(1)
                    .copied()
                    .flatten()
                    .unwrap_or_default()
                    .to_string();
                let mut i = 2;
                // group params `(a, b)`
                if k == "group" && toks.get(2).is_some_and(|t| t.tok == Tok::LParen) {
                    while i < toks.len() && toks[i].tok != Tok::RParen {
                        i += 1;
                    }
                    i += 1;
                }
                if !is_colon(i) || toks.len() != i + 1 {
                    ctx.push(
                        codes::E002,
                        Severity::Error,
                        toks.get(i).map_or(pos, |t| t.pos),
                        format!("expected `:` at the end of the `{k} {name}` header"),
                        Some("a declaration is `KIND NAME:` followed by an indented block"),
                    );
                }
                if !is_ident(&name) {
                    ctx.error(
                        codes::E002,
                        toks[1].pos,
                        format!("`{name}` is not a valid name"),
                    );
                    continue;
                }
                let ns = match k {
                    "agent" | "judge" | "router" | "human" | "tool" | "compute" | "emit"
                    | "wait" | "await_answers" | "subbot" | "fail" | "join" => "node",
                    other => other,
                };
                if let Some(prev) = names.get(&(ns.to_string(), name.clone())) {
                    let code = if ns == "node" {
                        codes::C041
                    } else {
                        codes::E010
                    };
                    ctx.push(
                        code,
                        Severity::Error,
                        toks[1].pos,
                        format!(
                            "duplicate {ns} `{name}` (first declared at line {})",
                            prev.line
                        ),
                        Some("rename one of the two declarations"),
                    );
                    continue;
                }
                names.insert((ns.to_string(), name.clone()), toks[1].pos);
                if ns == "node" && (name == "done" || (name == "fail" && k != "fail")) {
                    ctx.push(
                        codes::C042,
                        Severity::Error,
                        toks[1].pos,
                        format!("`{name}` is a reserved terminal target and cannot name a node"),
                        Some("pick a different node name"),
                    );
                    continue;
                }
                match k {
                    "prompt" => {
                        prompts.insert(name);
                    }
                    "schema" => {
                        let s = read_schema(&line.children, ctx);
                        schemas.insert(name, s);
                    }
                    "workflow" => workflows.push(line),
                    "group" => {
                        let mut g = Group {
                            members: Vec::new(),
                            edges: Vec::new(),
                        };
                        for m in &line.children {
                            if m.toks.iter().any(|t| t.tok == Tok::Arrow) {
                                g.edges.push(m);
                            } else if let (Some(Tok::Word(mk)), Some(Tok::Word(mn))) = (
                                m.toks.first().map(|t| &t.tok),
                                m.toks.get(1).map(|t| &t.tok),
                            ) && let Some(kind) = node_kind(mk)
                            {
                                g.members.push((kind, mn.clone(), m));
                            } else {
                                ctx.error(
                                    codes::E001,
                                    m.pos(),
                                    "expected a node or an edge in the group",
                                );
                            }
                        }
                        groups.insert(name, g);
                    }
                    "contract" => {
                        for c in &line.children {
                            let _ = ctx.prop(c, None, "contract");
                        }
                    }
                    "mcp_server" => {
                        let _ = ctx.props(&line.children, Some(MCP_SERVER), "mcp_server");
                    }
                    "cursor" => {
                        let _ = ctx.props(&line.children, Some(CURSOR), "cursor");
                    }
                    "supervisor" => {
                        let _ = ctx.props(&line.children, Some(SUPERVISOR), "supervisor");
                    }
                    other => match node_kind(other) {
                        Some(kind) => {
                            let props = node_props(kind, line, ctx);
                            nodes.push(NodeDecl {
                                id: name,
                                kind,
                                pos: toks[1].pos,
                                props,
                            });
                        }
                        None => {
                            ctx.push(
                                codes::E001,
                                Severity::Error,
                                pos,
                                format!("unknown declaration `{other}`"),
                                Some("top-level declarations are vars, presets, attachments, secrets, mcp_server, prompt, schema, agent, judge, router, human, tool, compute, workflow…"),
                            );
                        }
                    },
                }
            }
            _ => {
                ctx.push(
                    codes::E001,
                    Severity::Error,
                    pos,
                    format!("unexpected `{}` at top level", short(toks)),
                    Some("a top-level line is a declaration such as `agent NAME:` or `vars:`"),
                );
            }
        }
    }

    // groups instantiated by `use`
    let mut extra_edges: Vec<(String, &Line)> = Vec::new();
    for (g, prefix, pos) in &uses {
        match groups.get(g) {
            None => ctx.error(
                codes::C116,
                *pos,
                format!("`use` references unknown group `{g}`"),
            ),
            Some(group) => {
                for (kind, name, line) in &group.members {
                    let props = node_props(*kind, line, ctx);
                    nodes.push(NodeDecl {
                        id: format!("{prefix}.{name}"),
                        kind: *kind,
                        pos: *pos,
                        props,
                    });
                }
                for e in &group.edges {
                    extra_edges.push((prefix.clone(), e));
                }
            }
        }
    }

    if workflows.is_empty() {
        let pos = lines
            .first()
            .map(Line::pos)
            .unwrap_or(Pos { line: 1, column: 1 });
        ctx.push(
            codes::C006,
            Severity::Error,
            pos,
            "no workflow declared in this file",
            Some("add a `workflow NAME:` block"),
        );
        return Vec::new();
    }
    if workflows.len() > 1 {
        for w in &workflows[1..] {
            ctx.push(
                codes::C007,
                Severity::Error,
                w.pos(),
                "more than one workflow in this file",
                Some("v1 supports one workflow per file — remove extras"),
            );
        }
    }

    // node-level checks independent of the workflow
    for n in &nodes {
        check_node_refs(n, &schemas, &prompts, ctx);
    }

    let mut out = Vec::new();
    for wline in workflows {
        if let Some(w) = compile_workflow(
            wline,
            &nodes,
            &extra_edges,
            &vars,
            &schemas,
            &secrets,
            ctx,
            net_check,
        ) {
            out.push(w);
        }
    }
    out
}

/// Entries of `presets:` / `attachments:`: `name: value` lines, each may
/// carry its own indented block of `key: value` lines.
fn loose_block(lines: &[Line], ctx: &mut Ctx<'_>, what: &str) {
    for l in lines {
        match l.toks.as_slice() {
            [
                STok {
                    tok: Tok::Word(_), ..
                },
                STok {
                    tok: Tok::Colon, ..
                },
                ..,
            ] => {
                for c in &l.children {
                    let _ = ctx.prop(c, None, what);
                }
            }
            _ => ctx.error(
                codes::E001,
                l.pos(),
                format!("expected `name: …` in {what}, found `{}`", short(&l.toks)),
            ),
        }
    }
}

fn node_kind(k: &str) -> Option<NodeKind> {
    Some(match k {
        "agent" => NodeKind::Agent,
        "judge" => NodeKind::Judge,
        "router" => NodeKind::Router,
        "human" => NodeKind::Human,
        "tool" => NodeKind::Tool,
        "compute" => NodeKind::Compute,
        "emit" => NodeKind::Emit,
        "wait" => NodeKind::Wait,
        "await_answers" => NodeKind::AwaitAnswers,
        "subbot" => NodeKind::Subbot,
        "fail" => NodeKind::Fail,
        "join" => NodeKind::Join,
        _ => return None,
    })
}

fn node_props<'a>(kind: NodeKind, line: &'a Line, ctx: &mut Ctx<'_>) -> Vec<Prop<'a>> {
    let table = match kind {
        NodeKind::Agent | NodeKind::Judge => LLM,
        NodeKind::Router => ROUTER,
        NodeKind::Human => HUMAN,
        NodeKind::Tool => TOOL,
        NodeKind::Compute => COMPUTE,
        NodeKind::Emit => EMIT,
        NodeKind::Wait => WAIT,
        NodeKind::AwaitAnswers => AWAIT_ANSWERS,
        NodeKind::Subbot => SUBBOT,
        NodeKind::Fail => FAIL,
        NodeKind::Join => JOIN,
    };
    let what = format!("{} node", kind.as_str());
    let props = ctx.props(&line.children, Some(table), &what);
    let mut seen: HashMap<&str, Pos> = HashMap::new();
    for p in &props {
        if seen.insert(p.key.as_str(), p.pos).is_some() {
            ctx.error(
                codes::E010,
                p.pos,
                format!("duplicate property `{}`", p.key),
            );
        }
        match p.key.as_str() {
            "reasoning_effort" => {
                if let Some(w) = p.text()
                    && !w.contains("${")
                    && !w.contains("{{")
                    && !REASONING.contains(&w)
                {
                    ctx.push(
                        codes::C027,
                        Severity::Error,
                        p.value_pos,
                        format!("invalid reasoning_effort `{w}`"),
                        Some("use low, medium, high, xhigh, max or ultracode"),
                    );
                }
            }
            "mode" if kind == NodeKind::Router => {
                if let Some(w) = p.text()
                    && !ROUTER_MODES.contains(&w)
                {
                    ctx.push(
                        codes::E020,
                        Severity::Error,
                        p.value_pos,
                        format!("invalid router mode `{w}`"),
                        Some("use fan_out_all, fan_out_each, condition, round_robin or llm"),
                    );
                }
            }
            "language" => {
                if let Some(w) = p.text()
                    && !LANGUAGES.contains(&w)
                {
                    ctx.push(
                        codes::E020,
                        Severity::Error,
                        p.value_pos,
                        format!("invalid script language `{w}`"),
                        Some("use sh, bash, js or py"),
                    );
                }
            }
            "expr" if p.value.is_none() => {
                let _ = ctx.props(&p.line.children, None, "expr");
            }
            _ => {}
        }
    }
    if kind == NodeKind::Tool {
        let has_cmd = seen.contains_key("command");
        let has_script = seen.contains_key("script");
        let has_action = seen.contains_key("action");
        if has_cmd && has_script {
            ctx.error(
                codes::E020,
                line.pos(),
                "a tool node sets both `command:` and `script:`",
            );
        } else if !has_cmd && !has_script && !has_action {
            ctx.push(
                codes::E013,
                Severity::Error,
                line.toks.get(1).map_or(line.pos(), |t| t.pos),
                "tool node has no `command:` (or `script:`)",
                Some("add `command: \"…\"`"),
            );
        }
    }
    props
}

fn check_node_refs(
    n: &NodeDecl<'_>,
    schemas: &BTreeMap<String, Schema>,
    prompts: &HashSet<String>,
    ctx: &mut Ctx<'_>,
) {
    for p in &n.props {
        let Some(v) = p.value.as_ref().and_then(PValue::ident) else {
            continue;
        };
        match p.key.as_str() {
            "input" | "output" if !schemas.contains_key(v) => {
                ctx.push(
                    codes::C002,
                    Severity::Error,
                    p.value_pos,
                    format!("unknown schema `{v}`"),
                    Some("declare the schema or fix the name"),
                );
            }
            "system" | "user" | "interaction_prompt" | "instructions" if !prompts.contains(v) => {
                ctx.push(
                    codes::C003,
                    Severity::Error,
                    p.value_pos,
                    format!("unknown prompt `{v}`"),
                    Some("declare the prompt or fix the name"),
                );
            }
            _ => {}
        }
    }
}

fn parse_type(toks: &[STok], allow_file: bool) -> Option<(FieldType, usize)> {
    let Some(Tok::Word(w)) = toks.first().map(|t| &t.tok) else {
        return None;
    };
    let ty = match w.as_str() {
        "string" => {
            if toks.get(1).map(|t| &t.tok) == Some(&Tok::LBrack)
                && toks.get(2).map(|t| &t.tok) == Some(&Tok::RBrack)
                && toks[1].glued
            {
                return Some((FieldType::StringArray, 3));
            }
            FieldType::String
        }
        "bool" => FieldType::Bool,
        "int" => FieldType::Int,
        "float" => FieldType::Float,
        "json" => FieldType::Json,
        // a schema field may be `file` (upstream E021 hint); carried as string
        "file" if allow_file => FieldType::String,
        _ => return None,
    };
    Some((ty, 1))
}

/// `[enum: "a", "b"]` at `toks[0]`; returns values and tokens used.
fn parse_enum(toks: &[STok]) -> Option<(Vec<String>, usize)> {
    if toks.first().map(|t| &t.tok) != Some(&Tok::LBrack) {
        return None;
    }
    if !matches!(toks.get(1).map(|t| &t.tok), Some(Tok::Word(w)) if w == "enum") {
        return None;
    }
    if toks.get(2).map(|t| &t.tok) != Some(&Tok::Colon) {
        return None;
    }
    let mut vals = Vec::new();
    let mut i = 3;
    loop {
        match toks.get(i).map(|t| &t.tok) {
            Some(Tok::Str(s, _)) | Some(Tok::Word(s)) => vals.push(s.clone()),
            Some(Tok::Comma) => {}
            Some(Tok::RBrack) => return Some((vals, i + 1)),
            _ => return None,
        }
        i += 1;
    }
}

fn read_schema(lines: &[Line], ctx: &mut Ctx<'_>) -> Schema {
    let mut s = Schema::default();
    let mut seen = HashSet::new();
    for l in lines {
        let toks = &l.toks;
        let (Some(Tok::Word(name)), Some(Tok::Colon)) =
            (toks.first().map(|t| &t.tok), toks.get(1).map(|t| &t.tok))
        else {
            ctx.error(
                codes::E001,
                l.pos(),
                format!("expected `field: type`, found `{}`", short(toks)),
            );
            continue;
        };
        let rest = &toks[2..];
        let Some((ty, used)) = parse_type(rest, true) else {
            ctx.push(
                codes::E021,
                Severity::Error,
                rest.first().map_or(l.pos(), |t| t.pos),
                format!("invalid type `{}` for field `{name}`", short(rest)),
                Some("types are `string`, `bool`, `int`, `float`, `json` and `string[]` (a schema field may also be `file`)"),
            );
            continue;
        };
        let mut enum_values = Vec::new();
        let mut i = used;
        if let Some((vals, u)) = parse_enum(&rest[i..]) {
            enum_values = vals;
            i += u;
        }
        if i != rest.len() {
            ctx.error(
                codes::E002,
                rest[i].pos,
                format!("unexpected `{}` after the field type", short(&rest[i..])),
            );
        }
        if !seen.insert(name.clone()) {
            ctx.error(codes::E010, l.pos(), format!("duplicate field `{name}`"));
            continue;
        }
        s.fields.push(Field {
            name: name.clone(),
            ty,
            enum_values,
        });
    }
    s
}

fn read_vars(lines: &[Line], ctx: &mut Ctx<'_>, vars: &mut BTreeMap<String, VarDecl>) {
    for l in lines {
        let toks = &l.toks;
        let (Some(Tok::Word(name)), Some(Tok::Colon)) =
            (toks.first().map(|t| &t.tok), toks.get(1).map(|t| &t.tok))
        else {
            ctx.error(
                codes::E001,
                l.pos(),
                format!("expected `name: type [= default]`, found `{}`", short(toks)),
            );
            continue;
        };
        let rest = &toks[2..];
        let Some((ty, used)) = parse_type(rest, false) else {
            ctx.push(
                codes::E021,
                Severity::Error,
                rest.first().map_or(l.pos(), |t| t.pos),
                format!("invalid type `{}` for variable `{name}`", short(rest)),
                Some("types are `string`, `bool`, `int`, `float`, `json` and `string[]`"),
            );
            continue;
        };
        let mut i = used;
        let mut enum_values = None;
        if let Some((vals, u)) = parse_enum(&rest[i..]) {
            if ty != FieldType::String {
                ctx.error(
                    codes::C125,
                    rest[i].pos,
                    format!("enum constraint on non-string variable `{name}`"),
                );
            }
            enum_values = Some(vals);
            i += u;
        }
        let mut default = None;
        if rest.get(i).map(|t| &t.tok) == Some(&Tok::Eq) {
            let dpos = rest.get(i + 1).map_or(rest[i].pos, |t| t.pos);
            match parse_value(&rest[i + 1..]) {
                Ok(PValue::Expr(e)) if e.is_empty() => {
                    ctx.error(codes::E002, dpos, "missing default value after `=`");
                }
                Ok(v) => {
                    if !literal_fits(&v, ty) {
                        ctx.push(
                            codes::C109,
                            Severity::Error,
                            dpos,
                            format!(
                                "default of `{name}` is {} but the variable is declared {}",
                                v.describe(),
                                type_name(ty)
                            ),
                            Some("fix the default to match the type"),
                        );
                    } else if let (Some(vals), Some(t)) = (&enum_values, v.text())
                        && !vals.iter().any(|x| x == t)
                    {
                        ctx.error(
                            codes::C126,
                            dpos,
                            format!("default `{t}` of `{name}` is not one of its enum values"),
                        );
                    }
                    default = Some(v.to_json());
                }
                Err((p, m)) => ctx.error(codes::E002, p, m),
            }
        } else if i != rest.len() {
            ctx.error(
                codes::E002,
                rest[i].pos,
                format!("unexpected `{}` after the variable type", short(&rest[i..])),
            );
        }
        vars.insert(name.clone(), VarDecl { ty, default });
    }
}

fn type_name(t: FieldType) -> &'static str {
    match t {
        FieldType::String => "string",
        FieldType::Bool => "bool",
        FieldType::Int => "int",
        FieldType::Float => "float",
        FieldType::Json => "json",
        FieldType::StringArray => "string[]",
    }
}

fn literal_fits(v: &PValue, ty: FieldType) -> bool {
    match (ty, v) {
        (FieldType::Json | FieldType::StringArray, _) => true,
        (FieldType::String, PValue::Str(..)) => true,
        (FieldType::String, PValue::Word(_)) => true,
        (FieldType::Bool, PValue::Word(w)) => w == "true" || w == "false",
        (FieldType::Int, PValue::Word(w)) => w.parse::<i64>().is_ok(),
        (FieldType::Float, PValue::Word(w)) => w.parse::<f64>().is_ok(),
        // `${VAR}` forms defer to run time
        (_, PValue::Str(s, _)) => s.contains("${"),
        _ => false,
    }
}

fn read_secrets(lines: &[Line], ctx: &mut Ctx<'_>, out: &mut Vec<SecretDecl>) {
    const SECRET: &[(&str, K)] = &[
        ("value", K::S),
        ("as", K::S),
        ("mount_path", K::S),
        ("env", K::S),
        ("optional", K::B),
        ("hosts", K::L),
        ("description", K::S),
    ];
    for l in lines {
        let Some(Tok::Word(name)) = l.toks.first().map(|t| &t.tok) else {
            ctx.error(codes::E001, l.pos(), "expected a secret name");
            continue;
        };
        let props = ctx.props(&l.children, Some(SECRET), "secret");
        let delivery = match props.iter().find(|p| p.key == "as").and_then(Prop::text) {
            Some("file") => SecretDelivery::File,
            _ => SecretDelivery::Env,
        };
        let text = |key: &str| {
            props
                .iter()
                .find(|p| p.key == key)
                .and_then(Prop::text)
                .map(str::to_owned)
        };
        out.push(SecretDecl {
            name: name.clone(),
            delivery,
            value: text("value"),
            mount_path: text("mount_path"),
            env: text("env"),
            optional: text("optional").as_deref() == Some("true"),
        });
    }
}

/// A parsed edge line.
struct EdgeLine {
    chain: Vec<(String, Pos)>,
    cond: Option<(Condition, Pos)>,
    is_else: bool,
    loop_bound: Option<(LoopBound, Pos, bool)>,
    foreach: Option<ForEach>,
    with: BTreeMap<String, String>,
    pos: Pos,
}

fn parse_edge(line: &Line, prefix: Option<&str>, ctx: &mut Ctx<'_>) -> Option<EdgeLine> {
    let toks = &line.toks;
    let pos = line.pos();
    let mut chain = Vec::new();
    let mut i = 0;
    loop {
        match toks.get(i).map(|t| &t.tok) {
            Some(Tok::Word(w)) if w.split('.').all(is_ident) => {
                let name = match prefix {
                    Some(p) if w != "done" && w != "fail" => format!("{p}.{w}"),
                    _ => w.clone(),
                };
                chain.push((name, toks[i].pos));
                i += 1;
            }
            _ => {
                ctx.push(
                    codes::E002,
                    Severity::Error,
                    toks.get(i).map_or(pos, |t| t.pos),
                    "expected a node name in the edge",
                    Some("An edge is `src -> dst`, optionally followed by `when …`, `else`, `as name(N)` or `with { … }`."),
                );
                return None;
            }
        }
        if toks.get(i).map(|t| &t.tok) == Some(&Tok::Arrow) {
            i += 1;
        } else {
            break;
        }
    }
    if chain.len() < 2 {
        ctx.error(codes::E002, pos, "an edge needs `->` and a target");
        return None;
    }
    let mut e = EdgeLine {
        chain,
        cond: None,
        is_else: false,
        loop_bound: None,
        foreach: None,
        with: BTreeMap::new(),
        pos,
    };
    let mut seen_with = false;
    while i < toks.len() {
        let cpos = toks[i].pos;
        let Tok::Word(kw) = &toks[i].tok else {
            ctx.error(
                codes::E001,
                cpos,
                format!("unexpected `{}` in edge", short(&toks[i..i + 1])),
            );
            return None;
        };
        match kw.as_str() {
            "when" => {
                if e.cond.is_some() {
                    ctx.error(codes::E030, cpos, "duplicate `when` clause");
                }
                if e.is_else {
                    ctx.error(
                        codes::E031,
                        cpos,
                        "an edge cannot carry both `when` and `else`",
                    );
                }
                i += 1;
                let mut negated = false;
                if matches!(toks.get(i).map(|t| &t.tok), Some(Tok::Word(w)) if w == "not") {
                    negated = true;
                    i += 1;
                }
                match toks.get(i).map(|t| &t.tok) {
                    Some(Tok::Word(f)) if is_ident(f) => {
                        e.cond = Some((
                            Condition::Field {
                                field: f.clone(),
                                negated,
                            },
                            toks[i].pos,
                        ));
                    }
                    Some(Tok::Str(s, _)) if !negated => {
                        e.cond = Some((Condition::Expr(s.clone()), toks[i].pos));
                    }
                    _ => {
                        ctx.error(
                            codes::E002,
                            toks.get(i).map_or(cpos, |t| t.pos),
                            "expected a field name or a quoted expression after `when`",
                        );
                        return None;
                    }
                }
                i += 1;
            }
            "else" => {
                if e.cond.is_some() {
                    ctx.error(
                        codes::E031,
                        cpos,
                        "an edge cannot carry both `when` and `else`",
                    );
                }
                e.is_else = true;
                i += 1;
            }
            "as" => {
                if e.loop_bound.is_some() || e.foreach.is_some() {
                    ctx.error(codes::E030, cpos, "duplicate `as` clause");
                }
                i += 1;
                let name = match toks.get(i).map(|t| &t.tok) {
                    Some(Tok::Word(n)) if is_ident(n) => n.clone(),
                    _ => {
                        ctx.error(
                            codes::E002,
                            toks.get(i).map_or(cpos, |t| t.pos),
                            "expected a loop name after `as`",
                        );
                        return None;
                    }
                };
                i += 1;
                if name == "foreach" {
                    // foreach NAME ( ITEM in "collection" )
                    let parsed = (|| {
                        let Tok::Word(lname) = &toks.get(i)?.tok else {
                            return None;
                        };
                        if toks.get(i + 1)?.tok != Tok::LParen {
                            return None;
                        }
                        let Tok::Word(item) = &toks.get(i + 2)?.tok else {
                            return None;
                        };
                        let Tok::Word(inw) = &toks.get(i + 3)?.tok else {
                            return None;
                        };
                        if inw != "in" {
                            return None;
                        }
                        let Tok::Str(coll, _) = &toks.get(i + 4)?.tok else {
                            return None;
                        };
                        if toks.get(i + 5)?.tok != Tok::RParen {
                            return None;
                        }
                        Some(ForEach {
                            name: lname.clone(),
                            item: item.clone(),
                            collection: coll.clone(),
                        })
                    })();
                    match parsed {
                        Some(f) => {
                            e.foreach = Some(f);
                            i += 6;
                        }
                        None => {
                            ctx.error(
                                codes::E002,
                                cpos,
                                "expected `as foreach NAME(ITEM in \"collection\")`",
                            );
                            return None;
                        }
                    }
                    continue;
                }
                if toks.get(i).map(|t| &t.tok) != Some(&Tok::LParen) {
                    ctx.push(
                        codes::E002,
                        Severity::Error,
                        toks.get(i).map_or(cpos, |t| t.pos),
                        format!("expected `(` after loop name `{name}`"),
                        Some("write `as name(N)` with N the maximum iterations"),
                    );
                    return None;
                }
                i += 1;
                let cap_pos = toks.get(i).map_or(cpos, |t| t.pos);
                let mut unbounded = false;
                let mut max: Option<i64> = None;
                let mut deferred = false;
                loop {
                    match toks.get(i).map(|t| &t.tok) {
                        Some(Tok::RParen) => {
                            i += 1;
                            break;
                        }
                        Some(Tok::Word(w)) if w == "unbounded" => unbounded = true,
                        Some(Tok::Word(w)) => match w.parse::<i64>() {
                            Ok(n) => max = Some(n),
                            Err(_) => {
                                ctx.error(
                                    codes::E002,
                                    toks[i].pos,
                                    format!("invalid loop bound `{w}`"),
                                );
                                return None;
                            }
                        },
                        Some(Tok::Punct('-')) => {
                            ctx.error(
                                codes::C026,
                                toks[i].pos,
                                format!("loop `{name}` has a negative iteration bound"),
                            );
                            return None;
                        }
                        Some(Tok::Str(..)) => deferred = true,
                        _ => {
                            ctx.error(codes::E002, cap_pos, "unclosed loop bound `(`");
                            return None;
                        }
                    }
                    i += 1;
                }
                if !unbounded && !deferred && max.is_none() {
                    ctx.error(
                        codes::E002,
                        cap_pos,
                        format!("loop `{name}` has no iteration bound"),
                    );
                    return None;
                }
                if !unbounded && !deferred && max.is_some_and(|m| m < 1) {
                    ctx.push(
                        codes::C026,
                        Severity::Error,
                        cap_pos,
                        format!("loop `{name}` allows fewer than 1 iteration"),
                        Some("set max_iterations to at least 1"),
                    );
                }
                let fuel_given = max.is_some();
                let m = max.map_or(u32::MAX, |m| u32::try_from(m.max(0)).unwrap_or(u32::MAX));
                e.loop_bound = Some((
                    LoopBound {
                        name,
                        max: m,
                        unbounded,
                    },
                    cpos,
                    unbounded && !fuel_given,
                ));
            }
            "with" => {
                if seen_with {
                    ctx.error(codes::E030, cpos, "duplicate `with` clause");
                }
                seen_with = true;
                i += 1;
                if toks.get(i).map(|t| &t.tok) != Some(&Tok::LBrace) {
                    ctx.error(
                        codes::E002,
                        toks.get(i).map_or(cpos, |t| t.pos),
                        "expected `{` after `with`",
                    );
                    return None;
                }
                let start = i;
                let mut depth = 0usize;
                while i < toks.len() {
                    match toks[i].tok {
                        Tok::LBrace => depth += 1,
                        Tok::RBrace => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    i += 1;
                }
                match parse_value(&toks[start..(i + 1).min(toks.len())]) {
                    Ok(PValue::Map(entries)) => {
                        for (k, v, _) in entries {
                            let s = match v {
                                PValue::Str(s, _) | PValue::Word(s) | PValue::Expr(s) => s,
                                other => other.to_json().to_string(),
                            };
                            e.with.insert(k, s);
                        }
                    }
                    Ok(_) => {}
                    Err((p, m)) => {
                        ctx.error(codes::E002, if p.line == 0 { cpos } else { p }, m);
                        return None;
                    }
                }
                i += 1;
            }
            other => {
                ctx.push(codes::E001, Severity::Error, cpos, format!("unexpected `{other}` in edge"), Some("An edge is `src -> dst`, optionally followed by `when …`, `else`, `as name(N)` or `with { … }`."));
                return None;
            }
        }
    }
    Some(e)
}

#[allow(clippy::too_many_arguments)]
fn compile_workflow(
    wline: &Line,
    nodes: &[NodeDecl<'_>],
    extra_edges: &[(String, &Line)],
    file_vars: &BTreeMap<String, VarDecl>,
    schemas: &BTreeMap<String, Schema>,
    file_secrets: &[SecretDecl],
    ctx: &mut Ctx<'_>,
    net_check: &dyn Fn(&iterion_core::NetworkSpec) -> Vec<(String, String)>,
) -> Option<Workflow> {
    let name = match wline.toks.get(1).map(|t| &t.tok) {
        Some(Tok::Word(n)) => n.clone(),
        _ => return None,
    };
    let wpos = wline.pos();
    let mut vars = file_vars.clone();
    let mut secrets = file_secrets.to_vec();
    let mut entry: Option<(String, Pos)> = None;
    let mut worktree = None;
    let mut budget = BTreeMap::new();
    let mut sandbox_decl = None;
    let mut edge_lines: Vec<EdgeLine> = Vec::new();
    let mut budget_iterations: Option<i64> = None;
    let mut seen: HashMap<String, Pos> = HashMap::new();

    for l in &wline.children {
        if l.toks.iter().any(|t| t.tok == Tok::Arrow) {
            if let Some(e) = parse_edge(l, None, ctx) {
                edge_lines.push(e);
            }
            continue;
        }
        let Some(p) = ctx.prop(l, Some(WORKFLOW), "workflow") else {
            continue;
        };
        if let Some(prev) = seen.insert(p.key.clone(), p.pos) {
            ctx.error(
                codes::E010,
                p.pos,
                format!(
                    "duplicate property `{}` (first at line {})",
                    p.key, prev.line
                ),
            );
            continue;
        }
        match p.key.as_str() {
            "vars" => read_vars(&l.children, ctx, &mut vars),
            "secrets" => read_secrets(&l.children, ctx, &mut secrets),
            "entry" => match p.value.as_ref().and_then(PValue::text) {
                Some(e) => entry = Some((e.to_string(), p.value_pos)),
                None => ctx.error(codes::E002, p.value_pos, "`entry` expects a node name"),
            },
            "worktree" => worktree = p.text().map(str::to_owned),
            "budget" => {
                for b in ctx.props(&l.children, Some(BUDGET), "budget") {
                    if let Some(v) = &b.value {
                        if b.key == "max_iterations" {
                            budget_iterations = v.int();
                        }
                        if b.key == "max_cost_usd"
                            && let Some(PValue::Word(w)) = &b.value
                            && w.parse::<f64>().is_ok_and(|f| f < 0.0 || !f.is_finite())
                        {
                            ctx.error(
                                "C046",
                                b.value_pos,
                                "budget.max_cost_usd must be a non-negative finite amount",
                            );
                        }
                        if b.key == "max_duration" {
                            check_duration(ctx, b.value_pos, "budget.max_duration", v);
                        }
                        budget.insert(b.key.clone(), v.to_json());
                    }
                }
            }
            "sandbox" => {
                sandbox_decl = sandbox::read(&p, ctx, true, net_check);
            }
            "attachments" | "mcp" | "resources" | "compaction" => {
                let _ = ctx.props(&l.children, None, &p.key);
            }
            _ => {}
        }
    }
    for (prefix, l) in extra_edges {
        if let Some(e) = parse_edge(l, Some(prefix), ctx) {
            edge_lines.push(e);
        }
    }

    let wf_opts_out = sandbox_decl
        .as_ref()
        .is_some_and(|d: &crate::ir::SandboxDecl| d.spec.mode == iterion_core::Mode::None);
    if let Some(d) = &sandbox_decl
        && d.spec.mode == iterion_core::Mode::None
    {
        ctx.push(
            codes::C128,
            Severity::Warning,
            d.pos,
            format!("workflow `{name}` opts out of the sandbox: every command runs on the host with its credentials"),
            Some("remove `sandbox: none` to run sandboxed; keep the opt-out only if the flow needs the host"),
        );
    }

    // nodes
    let mut ir_nodes: BTreeMap<NodeId, Node> = BTreeMap::new();
    let mut out_schema: HashMap<&str, Option<&str>> = HashMap::new();
    for n in nodes {
        let mut properties = BTreeMap::new();
        let mut node_sandbox = None;
        for p in &n.props {
            if p.key == "sandbox" {
                node_sandbox = sandbox::read(p, ctx, false, net_check);
                if let Some(d) = &node_sandbox
                    && d.spec.mode == iterion_core::Mode::None
                {
                    let msg = if wf_opts_out {
                        format!(
                            "node `{}` declares `sandbox: none`; the workflow already opts out",
                            n.id
                        )
                    } else {
                        format!(
                            "node-level `sandbox: none` on `{}` is not honoured: every node shares the run's one sandbox",
                            n.id
                        )
                    };
                    ctx.push(codes::C128, Severity::Warning, d.pos, msg, Some("declare `sandbox: none` on the workflow to opt the whole run out, or remove the node-level block"));
                }
                continue;
            }
            let v = match &p.value {
                Some(v) => v.to_json(),
                None => block_json(&p.line.children),
            };
            properties.insert(p.key.clone(), v);
        }
        if n.kind == NodeKind::Tool
            && let Some(p) = n.get("timeout")
            && let Some(v) = &p.value
        {
            check_duration(ctx, p.value_pos, &format!("`{}` timeout", n.id), v);
        }
        let tool = if n.kind == NodeKind::Tool {
            if let Some(c) = n.text("command") {
                Some(ToolSpec::Command(c.to_string()))
            } else {
                n.text("script").map(|s| ToolSpec::Script {
                    script: s.to_string(),
                    language: n.text("language").unwrap_or("sh").to_string(),
                })
            }
        } else {
            None
        };
        let output = n
            .get("output")
            .and_then(|p| p.value.as_ref())
            .and_then(PValue::ident);
        out_schema.insert(n.id.as_str(), output);
        ir_nodes.insert(
            NodeId::new(n.id.clone()),
            Node {
                id: NodeId::new(n.id.clone()),
                kind: n.kind,
                tool,
                router_mode: if n.kind == NodeKind::Router {
                    Some(n.text("mode").unwrap_or("fan_out_all").to_string())
                } else {
                    None
                },
                input: n
                    .get("input")
                    .and_then(|p| p.value.as_ref())
                    .and_then(PValue::ident)
                    .map(str::to_owned),
                output: output.map(str::to_owned),
                sandbox: node_sandbox,
                properties,
                pos: n.pos,
            },
        );
    }

    // C136: permission-gated nodes that need a host-side run
    if !wf_opts_out {
        for n in nodes {
            let perm = n.text("permission");
            let has_ask_rules = n.get("ask").is_some();
            let node_out = ir_nodes
                .get(&NodeId::new(n.id.clone()))
                .and_then(|x| x.sandbox.as_ref())
                .is_some_and(|d| d.spec.mode == iterion_core::Mode::None);
            if node_out || !matches!(n.kind, NodeKind::Agent | NodeKind::Judge) {
                continue;
            }
            let mut backends: Vec<String> =
                n.text("backend").map(str::to_owned).into_iter().collect();
            if let Some(fb) = n.get("fallbacks") {
                for route in &fb.line.children {
                    for r in &route.children {
                        if let [
                            STok {
                                tok: Tok::Word(k), ..
                            },
                            STok {
                                tok: Tok::Colon, ..
                            },
                            STok {
                                tok: Tok::Str(b, _) | Tok::Word(b),
                                ..
                            },
                        ] = r.toks.as_slice()
                            && k == "backend"
                        {
                            backends.push(b.clone());
                        }
                    }
                }
            }
            let gated = matches!(perm, Some("ask" | "deny"));
            let ask_capable = perm == Some("ask") || has_ask_rules;
            for b in backends {
                let hit = (gated && (b == "grok" || b == "kimi")) || (ask_capable && b == "claw");
                if hit {
                    ctx.push(
                        codes::C136,
                        Severity::Warning,
                        n.pos,
                        format!("node `{}` routes a permission gate to `{b}`, which needs a host-side run; under the default sandbox it is refused at execution", n.id),
                        Some("declare `sandbox: none` on the workflow (or the node), launch with `--sandbox none`, or use a deny-shaped policy on claw"),
                    );
                    break;
                }
            }
        }
    }

    let known: HashSet<&str> = nodes.iter().map(|n| n.id.as_str()).collect();

    // entry
    let entry_id = match &entry {
        None => {
            ctx.push(
                codes::C008,
                Severity::Error,
                wpos,
                format!("workflow `{name}` has no `entry:`"),
                Some("add `entry: NODE` naming the first node"),
            );
            None
        }
        Some((e, p)) => {
            if known.contains(e.as_str()) {
                Some(NodeId::new(e.clone()))
            } else {
                ctx.push(
                    codes::C008,
                    Severity::Error,
                    *p,
                    format!("entry node `{e}` is not declared"),
                    Some("fix the entry name or declare the node"),
                );
                None
            }
        }
    };

    // edges
    let mut edges: Vec<Edge> = Vec::new();
    let mut loops: HashMap<String, (u32, Pos)> = HashMap::new();
    for e in &edge_lines {
        let mut ok = true;
        for (n, p) in &e.chain[..e.chain.len() - 1] {
            if n == "done" || n == "fail" {
                ctx.error(
                    codes::E002,
                    *p,
                    format!("`{n}` is a terminal target and cannot start an edge"),
                );
                ok = false;
            } else if !known.contains(n.as_str()) {
                ctx.push(
                    codes::C001,
                    Severity::Error,
                    *p,
                    format!("unknown node `{n}`"),
                    Some("declare the node or fix the name"),
                );
                ok = false;
            }
        }
        if let Some((n, p)) = e.chain.last()
            && n != "done"
            && n != "fail"
            && !known.contains(n.as_str())
        {
            ctx.push(
                codes::C001,
                Severity::Error,
                *p,
                format!("unknown node `{n}`"),
                Some("declare the node or fix the name"),
            );
            ok = false;
        }
        if let Some((lb, p, no_fuel)) = &e.loop_bound {
            if *no_fuel && budget_iterations.is_none() {
                ctx.push(codes::C097, Severity::Error, *p, format!("unbounded loop `{}` has no fuel ceiling", lb.name), Some("add a per-loop fuel (`as name(unbounded 200)`) or a workflow `budget.max_iterations`"));
            }
            match loops.get(&lb.name) {
                Some((m, _)) if *m != lb.max => {
                    ctx.error(
                        codes::C005,
                        *p,
                        format!("loop `{}` is declared with different bounds", lb.name),
                    );
                }
                _ => {
                    loops.insert(lb.name.clone(), (lb.max, *p));
                }
            }
        }
        if !ok {
            continue;
        }
        let n = e.chain.len();
        for (k, pair) in e.chain.windows(2).enumerate() {
            let last = k + 2 == n;
            let to = match pair[1].0.as_str() {
                "done" => Target::Done,
                "fail" => Target::Fail,
                other => Target::Node(NodeId::new(other)),
            };
            edges.push(Edge {
                from: NodeId::new(pair[0].0.clone()),
                to,
                condition: if last {
                    e.cond.as_ref().map(|c| c.0.clone())
                } else {
                    None
                },
                loop_bound: if last {
                    e.loop_bound.as_ref().map(|l| l.0.clone())
                } else {
                    None
                },
                with: if last {
                    e.with.clone()
                } else {
                    BTreeMap::new()
                },
                is_else: last && e.is_else,
                foreach: if last { e.foreach.clone() } else { None },
                pos: if k == 0 { e.pos } else { pair[0].1 },
            });
        }
    }

    // condition fields (C013/C014), with `not_x` accepted as `not x`
    for (e, line) in edges.iter_mut().zip(edge_positions(&edge_lines)) {
        let Some(Condition::Field { field, negated }) = &mut e.condition else {
            continue;
        };
        let Some(Some(sname)) = out_schema.get(e.from.as_str()) else {
            continue;
        };
        let Some(schema) = schemas.get(*sname) else {
            continue;
        };
        let find = |f: &str| schema.fields.iter().find(|x| x.name == f);
        let fpos = line.unwrap_or(e.pos);
        match find(field) {
            Some(f) if f.ty == FieldType::Bool => {}
            Some(f) => ctx.push(
                codes::C013,
                Severity::Error,
                fpos,
                format!(
                    "condition field `{}` of `{sname}` is {}, not bool",
                    f.name,
                    type_name(f.ty)
                ),
                Some("change the schema field to `bool`"),
            ),
            None => {
                if let Some(base) = field.strip_prefix("not_")
                    && find(base).is_some_and(|f| f.ty == FieldType::Bool)
                {
                    *field = base.to_string();
                    *negated = !*negated;
                } else {
                    ctx.push(
                        codes::C014,
                        Severity::Error,
                        fpos,
                        format!("condition field `{field}` not found in output schema `{sname}`"),
                        Some("add the field to the schema or fix the field name"),
                    );
                }
            }
        }
    }

    graph_checks(&ir_nodes, &edges, entry_id.as_ref(), ctx);

    Some(Workflow {
        name,
        entry: entry_id.unwrap_or_else(|| NodeId::new("")),
        nodes: ir_nodes,
        edges,
        vars,
        schemas: schemas.clone(),
        sandbox: sandbox_decl,
        worktree,
        budget,
        secrets,
        pos: wpos,
    })
}

/// Position of each IR edge's condition (parallel to the edges built from
/// `edge_lines`), used to point C013/C014 at the field.
fn edge_positions(edge_lines: &[EdgeLine]) -> Vec<Option<Pos>> {
    let mut out = Vec::new();
    for e in edge_lines {
        for k in 0..e.chain.len().saturating_sub(1) {
            let last = k + 2 == e.chain.len();
            out.push(if last {
                e.cond.as_ref().map(|c| c.1)
            } else {
                None
            });
        }
    }
    out
}

fn block_json(lines: &[Line]) -> Value {
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

fn graph_checks(
    nodes: &BTreeMap<NodeId, Node>,
    edges: &[Edge],
    entry: Option<&NodeId>,
    ctx: &mut Ctx<'_>,
) {
    // per-source checks
    let mut by_src: HashMap<&NodeId, Vec<&Edge>> = HashMap::new();
    for e in edges {
        by_src.entry(&e.from).or_default().push(e);
    }
    for (src, out) in &by_src {
        let Some(node) = nodes.get(*src) else {
            continue;
        };
        let is_router = node.kind == NodeKind::Router;
        let router_conditional = node.router_mode.as_deref() == Some("condition");
        let uncond: Vec<&&Edge> = out
            .iter()
            .filter(|e| e.condition.is_none() && !e.is_else && e.loop_bound.is_none())
            .collect();
        let elses: Vec<&&Edge> = out.iter().filter(|e| e.is_else).collect();
        let conds: Vec<&&Edge> = out.iter().filter(|e| e.condition.is_some()).collect();
        if !is_router && uncond.len() > 1 {
            ctx.push(codes::C010, Severity::Error, uncond[1].pos, format!("node `{src}` has more than one unconditional outgoing edge"), Some("keep only one default edge (plus a loop back-edge and its exhaustion exit), or use a router for fan-out"));
        }
        if elses.len() > 1 {
            ctx.error(
                codes::C123,
                elses[1].pos,
                format!("node `{src}` has more than one `else` edge"),
            );
        }
        if !elses.is_empty() && conds.is_empty() {
            ctx.error(
                codes::C015,
                elses[0].pos,
                format!("`else` edge from `{src}` has no conditional sibling"),
            );
        }
        if !elses.is_empty() && !uncond.is_empty() {
            ctx.error(
                codes::C124,
                elses[0].pos,
                format!("node `{src}` has both an `else` edge and an unconditional edge"),
            );
        }
        // duplicates
        let mut seen_fields: HashSet<(String, bool)> = HashSet::new();
        for e in &conds {
            if let Some(Condition::Field { field, negated }) = &e.condition
                && !seen_fields.insert((field.clone(), *negated))
            {
                ctx.error(
                    codes::C011,
                    e.pos,
                    format!(
                        "condition `{}{field}` appears twice on edges from `{src}`",
                        if *negated { "not " } else { "" }
                    ),
                );
            }
        }
        if !conds.is_empty() && (!is_router || router_conditional) {
            let has_fallback = out.iter().any(|e| e.condition.is_none());
            let exhaustive = seen_fields
                .iter()
                .any(|(f, n)| seen_fields.contains(&(f.clone(), !n)));
            if !has_fallback && !exhaustive {
                ctx.push(
                    codes::C012,
                    Severity::Error,
                    conds[0].pos,
                    format!(
                        "conditional edges from `{src}` are not exhaustive and have no fallback"
                    ),
                    Some("add `when not X` to complement `when X`, or add an unconditional edge"),
                );
            }
        }
    }

    // reachability (C016)
    if let Some(entry) = entry {
        let mut adj: HashMap<&NodeId, Vec<&NodeId>> = HashMap::new();
        for e in edges {
            if let Target::Node(t) = &e.to {
                adj.entry(&e.from).or_default().push(t);
            }
        }
        let mut seen: HashSet<&NodeId> = HashSet::new();
        let mut q = VecDeque::from([entry]);
        seen.insert(entry);
        while let Some(n) = q.pop_front() {
            for t in adj.get(n).into_iter().flatten() {
                if seen.insert(t) {
                    q.push_back(t);
                }
            }
        }
        for (id, n) in nodes {
            if !seen.contains(id) {
                ctx.push(
                    codes::C016,
                    Severity::Error,
                    n.pos,
                    format!("node `{id}` is unreachable from entry `{entry}`"),
                    Some("add edges to reach the node, or remove the unused declaration"),
                );
            }
        }
    }

    // undeclared cycles (C019): iterative DFS over edges without a loop bound
    let mut adj: BTreeMap<&NodeId, Vec<(&NodeId, &Edge)>> = BTreeMap::new();
    for e in edges {
        if e.loop_bound.is_none()
            && e.foreach.is_none()
            && let Target::Node(t) = &e.to
        {
            adj.entry(&e.from).or_default().push((t, e));
        }
    }
    let mut color: HashMap<&NodeId, u8> = HashMap::new();
    let mut reported: BTreeSet<(u32, u32)> = BTreeSet::new();
    for start in nodes.keys() {
        if color.get(start).copied().unwrap_or(0) != 0 {
            continue;
        }
        let mut stack: Vec<(&NodeId, usize)> = vec![(start, 0)];
        color.insert(start, 1);
        while let Some((n, idx)) = stack.last_mut() {
            let succ = adj.get(*n).map_or(&[][..], Vec::as_slice);
            if *idx < succ.len() {
                let (t, e) = succ[*idx];
                *idx += 1;
                match color.get(t).copied().unwrap_or(0) {
                    0 => {
                        color.insert(t, 1);
                        stack.push((t, 0));
                    }
                    1 if reported.insert((e.pos.line, e.pos.column)) => {
                        ctx.push(
                            codes::C019,
                            Severity::Error,
                            e.pos,
                            format!(
                                "edge `{} -> {t}` closes a cycle with no declared loop",
                                e.from
                            ),
                            Some("add `as loop_name(N)` to the back-edge to bound the cycle"),
                        );
                    }
                    _ => {}
                }
            } else {
                color.insert(n, 2);
                stack.pop();
            }
        }
    }
}

#[cfg(test)]
mod secret_tests {
    use std::path::Path;

    use crate::ir::SecretDelivery;

    #[test]
    fn secret_props_reach_the_ir() {
        let src = r#"secrets:
  API_TOKEN:
    value: "${HOST_TOKEN}"
    env: GH_TOKEN
  db_pass:
    as: file
    mount_path: "/etc/db/pass"
    optional: true

tool t:
  command: "true"

workflow w:
  entry: t
  t -> done
"#;
        let c = crate::compile_source(src, Path::new("s.iter"));
        assert!(!c.has_errors(), "{:?}", c.diagnostics);
        let s = &c.workflows[0].secrets;
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].name, "API_TOKEN");
        assert_eq!(s[0].delivery, SecretDelivery::Env);
        assert_eq!(s[0].value.as_deref(), Some("${HOST_TOKEN}"));
        assert_eq!(s[0].env.as_deref(), Some("GH_TOKEN"));
        assert!(!s[0].optional);
        assert_eq!(s[1].delivery, SecretDelivery::File);
        assert_eq!(s[1].mount_path.as_deref(), Some("/etc/db/pass"));
        assert!(s[1].optional);
        assert_eq!(s[1].value, None);
    }
}
