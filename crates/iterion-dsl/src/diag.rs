//! Diagnostics: codes (upstream names), severities, positions, the per-file
//! bound on how many are kept, and the two renderings `iterion validate`
//! prints (human with a caret under the source, and JSON). Rendering is
//! plain text with no colour so snapshots and non-TTY output are
//! deterministic, and it is linear in the input: a file keeps at most
//! [`MAX_PER_FILE`] diagnostics (the rest are only counted), a message at
//! most [`MAX_MESSAGE_CHARS`] characters, and the human form shows a window
//! of at most [`WINDOW_CHARS`] characters of each source line, with control
//! characters replaced so a hostile file cannot drive the terminal.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::ir::Pos;

/// Diagnostic codes. Upstream names are kept (`docs/references/diagnostics.md`
/// for `C…`, `pkg/dsl/parser/diagnostic.go` for `E…`); codes this project
/// adds are documented in `crates/iterion-dsl/DIAGNOSTICS.md`.
pub mod codes {
    /// Unexpected token.
    pub const E001: &str = "E001";
    /// Expected a specific token / shape.
    pub const E002: &str = "E002";
    /// Bad indentation (tabs, misaligned dedent, nesting depth).
    pub const E003: &str = "E003";
    /// Unterminated string.
    pub const E004: &str = "E004";
    /// Unknown escape in strict-escape mode.
    pub const E005: &str = "E005";
    /// Source is not UTF-8.
    pub const E006: &str = "E006";
    /// Duplicate declaration.
    pub const E010: &str = "E010";
    /// Unknown property.
    pub const E012: &str = "E012";
    /// Required property missing.
    pub const E013: &str = "E013";
    /// Duplicate top-level block.
    pub const E014: &str = "E014";
    /// Invalid value.
    pub const E020: &str = "E020";
    /// Invalid type expression.
    pub const E021: &str = "E021";
    /// Duplicate edge clause.
    pub const E030: &str = "E030";
    /// `when` and `else` on one edge.
    pub const E031: &str = "E031";
    /// Unknown `dsl:` profile.
    pub const E040: &str = "E040";
    /// Unknown node reference.
    pub const C001: &str = "C001";
    /// Unknown schema reference.
    pub const C002: &str = "C002";
    /// Unknown prompt reference.
    pub const C003: &str = "C003";
    /// Duplicate loop definition.
    pub const C005: &str = "C005";
    /// No workflow.
    pub const C006: &str = "C006";
    /// Multiple workflows.
    pub const C007: &str = "C007";
    /// Missing / unknown entry.
    pub const C008: &str = "C008";
    /// Multiple unconditional edges.
    pub const C010: &str = "C010";
    /// Ambiguous conditions.
    pub const C011: &str = "C011";
    /// Missing fallback.
    pub const C012: &str = "C012";
    /// Condition field not bool.
    pub const C013: &str = "C013";
    /// Condition field not found.
    pub const C014: &str = "C014";
    /// Else without conditional sibling.
    pub const C015: &str = "C015";
    /// Unreachable node.
    pub const C016: &str = "C016";
    /// Undeclared cycle.
    pub const C019: &str = "C019";
    /// Invalid loop iterations.
    pub const C026: &str = "C026";
    /// Invalid reasoning effort.
    pub const C027: &str = "C027";
    /// `when "…"` expression does not parse (syntax, unknown function,
    /// nesting past the depth limit).
    pub const C040: &str = "C040";
    /// `session: inherit`/`fork` on a convergence point.
    pub const C009: &str = "C009";
    /// Malformed `{{…}}` template reference.
    pub const C004: &str = "C004";
    /// `outputs.X.history` on a node that is on no loop edge.
    pub const C017: &str = "C017";
    /// Round-robin router with fewer than two unconditional edges.
    pub const C020: &str = "C020";
    /// LLM router with fewer than two edges.
    pub const C021: &str = "C021";
    /// LLM router edge with a `when` field condition.
    pub const C022: &str = "C022";
    /// LLM-only property on a router that is not `mode: llm`.
    pub const C023: &str = "C023";
    /// Duplicate `mcp_server` name.
    pub const C024: &str = "C024";
    /// `outputs.X` reference to an unknown node.
    pub const C029: &str = "C029";
    /// `outputs.X.f` field not in X's output schema.
    pub const C031: &str = "C031";
    /// `outputs.X.f` on a node without output schema (warning).
    pub const C032: &str = "C032";
    /// `vars.x` reference to an undeclared variable.
    pub const C033: &str = "C033";
    /// `input.f` field not in the node's input schema.
    pub const C034: &str = "C034";
    /// `artifacts.a` that no node publishes.
    pub const C035: &str = "C035";
    /// Reference to a node (or artifact producer) that does not run before
    /// the consumer.
    pub const C036: &str = "C036";
    /// Compute node without expressions.
    pub const C039: &str = "C039";
    /// `attachments.a` not declared.
    pub const C053: &str = "C053";
    /// Unknown attachment sub-field.
    pub const C054: &str = "C054";
    /// Reserved name (`done`/`fail`) on a prompt, schema, cursor, agent,
    /// judge or compute declaration (upstream's parser stage).
    pub const E011: &str = "E011";
    /// Invalid MCP server config (transport's required/forbidden fields).
    pub const C025: &str = "C025";
    /// Node max_tokens over the workflow budget (warning).
    pub const C037: &str = "C037";
    /// Unsupported or incomplete MCP auth.
    pub const C038: &str = "C038";
    /// Compaction setting out of range.
    pub const C043: &str = "C043";
    /// Memory on a backend that ignores it (warning).
    pub const C047: &str = "C047";
    /// Memory enabled without a scope.
    pub const C048: &str = "C048";
    /// Attachment declared twice.
    pub const C050: &str = "C050";
    /// Attachment named like a variable.
    pub const C051: &str = "C051";
    /// accept_mime entry not type/subtype.
    pub const C052: &str = "C052";
    /// Preset sets an undeclared variable.
    pub const C070: &str = "C070";
    /// Preset value of the wrong type.
    pub const C071: &str = "C071";
    /// Preset declared twice.
    pub const C072: &str = "C072";
    /// Unknown capability (warning).
    pub const C080: &str = "C080";
    /// Capability name of the wrong shape.
    pub const C081: &str = "C081";
    /// Board capability under a sandbox (warning).
    pub const C082: &str = "C082";
    /// Unknown cursor in a node's `cursors:` block (warning).
    pub const C083: &str = "C083";
    /// Cursor value the cursor does not accept.
    pub const C084: &str = "C084";
    /// Malformed cursor declaration.
    pub const C085: &str = "C085";
    /// Duplicate cursor name.
    pub const C086: &str = "C086";
    /// Playwright MCP under a sandbox without a browser image.
    pub const C060: &str = "C060";
    /// Duplicate node id.
    pub const C041: &str = "C041";
    /// Reserved node name.
    pub const C042: &str = "C042";
    /// Invalid sandbox mode / spec.
    pub const C044: &str = "C044";
    /// Unbounded loop without fuel.
    pub const C097: &str = "C097";
    /// Var default type mismatch.
    pub const C109: &str = "C109";
    /// Use references unknown group.
    pub const C116: &str = "C116";
    /// Multiple else edges.
    pub const C123: &str = "C123";
    /// Else alongside unconditional.
    pub const C124: &str = "C124";
    /// Var enum on non-string type.
    pub const C125: &str = "C125";
    /// Var default not in enum.
    pub const C126: &str = "C126";
    /// Sandbox opt-out.
    pub const C128: &str = "C128";
    /// Gated backend needs a host-side run.
    pub const C136: &str = "C136";
    /// Invalid worktree value.
    pub const C142: &str = "C142";
    /// `network:` without `mode:`.
    pub const C312: &str = "C312";
    /// Network rule rejected by the policy compiler (hook, this project).
    pub const C313: &str = "C313";
    /// Invalid `read_back:` path (ADR-143, this project).
    pub const C320: &str = "C320";
    /// A tool's `timeout:` or `budget.max_duration` that is not a positive
    /// Go duration (issue 19 #6, this project).
    pub const C321: &str = "C321";
    /// An agent's or judge's `tools:` entry the tool registry does not
    /// know (issue 20, this project: hook).
    pub const C322: &str = "C322";
    /// An `mcp: servers:`/`disable:` entry naming no declared
    /// `mcp_server` (issue 20, this project; upstream fails at run time).
    pub const C323: &str = "C323";
    /// A secret's `egress:` pattern that can never bind a host: it does
    /// not parse as a network rule, is negated, or names every host
    /// (issue 17, this project).
    pub const C324: &str = "C324";
    /// A secret bound to a host the workflow's `network:` block never lets
    /// through (issue 17, this project: hook).
    pub const C325: &str = "C325";
}

/// Severity of a diagnostic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Blocks execution.
    Error,
    /// Informational, does not block.
    Warning,
    /// Purely informational.
    Info,
}

impl Severity {
    /// The lower-case word.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Info => "info",
        }
    }
}

/// One positioned finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    /// Stable code (`C044`, `E012`…).
    pub code: &'static str,
    /// Severity.
    pub severity: Severity,
    /// File as given to the compiler.
    pub file: PathBuf,
    /// Line, from 1.
    pub line: u32,
    /// Column (characters), from 1.
    pub column: u32,
    /// What is wrong.
    pub message: String,
    /// The next step, when one helps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

/// Diagnostics one file keeps; past this they are counted in [`Omitted`].
/// A hostile file (32 KiB of NULs once produced 32,768 of them, each with
/// its whole line) stays bounded; the first hundred are what a person reads.
pub const MAX_PER_FILE: usize = 100;

/// Longest message or hint kept, in characters (a message may quote a
/// value of the file, and a value may be a megabyte long).
pub const MAX_MESSAGE_CHARS: usize = 1000;

/// Widest source excerpt the human rendering shows under a diagnostic.
pub const WINDOW_CHARS: usize = 120;

/// Diagnostics found past [`MAX_PER_FILE`]: counted, never built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Omitted {
    /// Error-severity diagnostics not kept.
    pub errors: usize,
    /// Warnings (and infos) not kept.
    pub warnings: usize,
}

impl Omitted {
    /// How many were not kept.
    pub fn total(self) -> usize {
        self.errors + self.warnings
    }
}

/// Where the lexer and the compiler put diagnostics: keeps the first
/// [`MAX_PER_FILE`], counts the rest by severity.
#[derive(Debug, Default)]
pub struct Sink {
    /// The diagnostics kept, in the order found.
    pub kept: Vec<Diagnostic>,
    /// What was found past the bound.
    pub omitted: Omitted,
}

impl Sink {
    /// Keep `d` (returning its index) or count it.
    pub fn push(&mut self, d: Diagnostic) -> Option<usize> {
        if self.kept.len() >= MAX_PER_FILE {
            self.count(d.severity);
            return None;
        }
        self.kept.push(d);
        Some(self.kept.len() - 1)
    }

    /// Whether another diagnostic would be kept (callers skip building it
    /// otherwise).
    pub fn full(&self) -> bool {
        self.kept.len() >= MAX_PER_FILE
    }

    /// Count one diagnostic that is not kept.
    pub fn count(&mut self, severity: Severity) {
        match severity {
            Severity::Error => self.omitted.errors += 1,
            Severity::Warning | Severity::Info => self.omitted.warnings += 1,
        }
    }
}

/// `text` cut to `max` characters (an ellipsis marks the cut).
pub(crate) fn clip(mut text: String, max: usize) -> String {
    if let Some((at, _)) = text.char_indices().nth(max) {
        text.truncate(at);
        text.push('…');
    }
    text
}

impl Diagnostic {
    /// A diagnostic without hint.
    pub fn new(
        code: &'static str,
        severity: Severity,
        file: impl AsRef<Path>,
        pos: Pos,
        message: impl Into<String>,
    ) -> Self {
        Self {
            code,
            severity,
            file: file.as_ref().to_path_buf(),
            line: pos.line.max(1),
            column: pos.column.max(1),
            message: clip(message.into(), MAX_MESSAGE_CHARS),
            hint: None,
        }
    }

    /// Attach a hint.
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(clip(hint.into(), MAX_MESSAGE_CHARS));
        self
    }
}

/// Render diagnostics for a human: `file:line:col: severity[CODE]: message`,
/// a window of the source line, a caret under the column, and the hint.
/// Walks the source once for diagnostics sorted by position (as
/// [`crate::compile_source`] returns them).
pub fn render_human(source: &str, diags: &[Diagnostic]) -> String {
    let mut out = String::new();
    let mut lines = Lines::new(source);
    for d in diags {
        let _ = writeln!(
            out,
            "{}[{}]: {}",
            d.severity.as_str(),
            d.code,
            printable(&d.message)
        );
        let num = d.line.to_string();
        let pad = " ".repeat(num.len());
        // the path is the user's (or an attacker's) file name: a newline in it
        // must not forge a diagnostic line
        let file = d.file.display().to_string();
        let _ = writeln!(out, "{pad}--> {}:{}:{}", printable(&file), d.line, d.column);
        if let Some(src) = lines.get(d.line as usize) {
            let (shown, caret_at) = window(src.trim_end_matches('\r'), d.column as usize);
            let _ = writeln!(out, "{pad} |");
            let _ = writeln!(out, "{num} | {shown}");
            let _ = writeln!(out, "{pad} | {}^", " ".repeat(caret_at));
        }
        if let Some(h) = &d.hint {
            let _ = writeln!(out, "{pad} = hint: {}", printable(h));
        }
        out.push('\n');
    }
    out
}

/// The one line that follows the rendered diagnostics of a file whose
/// diagnostics were bounded, if any were omitted.
pub fn render_omitted(omitted: Omitted) -> Option<String> {
    (omitted.total() > 0).then(|| {
        format!(
            "… {} more diagnostic(s) not shown ({} error(s), {} warning(s)); fix the ones above first\n",
            omitted.total(),
            omitted.errors,
            omitted.warnings
        )
    })
}

/// Forward cursor over the lines of a source: sorted lookups cost one pass.
struct Lines<'a> {
    rest: std::str::Lines<'a>,
    source: &'a str,
    /// Number (from 1) of the line `rest` yields next.
    next: usize,
    /// The line returned last (several diagnostics often share one).
    last: Option<(usize, &'a str)>,
}

impl<'a> Lines<'a> {
    fn new(source: &'a str) -> Self {
        Self {
            rest: source.lines(),
            source,
            next: 1,
            last: None,
        }
    }

    fn get(&mut self, line: usize) -> Option<&'a str> {
        if line == 0 {
            return None;
        }
        if let Some((n, text)) = self.last
            && n == line
        {
            return Some(text);
        }
        if line < self.next {
            *self = Self::new(self.source);
        }
        while self.next < line {
            self.rest.next()?;
            self.next += 1;
        }
        self.next += 1;
        let text = self.rest.next()?;
        self.last = Some((line, text));
        Some(text)
    }
}

/// At most [`WINDOW_CHARS`] characters of `line` around `column`, with
/// tabs as spaces and control characters as U+FFFD, and where the caret
/// goes in it.
fn window(line: &str, column: usize) -> (String, usize) {
    let col = column.saturating_sub(1);
    let start = col.saturating_sub(WINDOW_CHARS / 2);
    let mut shown = String::new();
    let mut total = start;
    if start > 0 {
        shown.push('…');
    }
    for (taken, c) in line.chars().skip(start).enumerate() {
        if taken == WINDOW_CHARS {
            shown.push('…');
            break;
        }
        shown.push(match c {
            '\t' => ' ',
            c if c.is_control() => '\u{fffd}',
            c => c,
        });
        total += 1;
    }
    let lead = usize::from(start > 0);
    let caret = col.min(total).saturating_sub(start) + lead;
    (shown, caret)
}

/// `text` with control characters replaced (messages may quote the file).
fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    if text.chars().any(char::is_control) {
        text.chars()
            .map(|c| if c.is_control() { '\u{fffd}' } else { c })
            .collect::<String>()
            .into()
    } else {
        text.into()
    }
}

/// The JSON shape of one diagnostic in `iterion validate --json`.
#[derive(Debug, Serialize)]
pub struct JsonDiagnostic<'a> {
    /// Code.
    pub code: &'a str,
    /// Severity.
    pub severity: Severity,
    /// Line.
    pub line: u32,
    /// Column.
    pub column: u32,
    /// Message.
    pub message: &'a str,
    /// Hint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<&'a str>,
}

/// Diagnostics of one file as `iterion validate --json` prints them; an
/// `omitted` object appears only when the file's diagnostics were bounded.
pub fn json_file(path: &str, diags: &[Diagnostic], omitted: Omitted) -> serde_json::Value {
    let list: Vec<JsonDiagnostic<'_>> = diags
        .iter()
        .map(|d| JsonDiagnostic {
            code: d.code,
            severity: d.severity,
            line: d.line,
            column: d.column,
            message: &d.message,
            hint: d.hint.as_deref(),
        })
        .collect();
    if omitted.total() > 0 {
        serde_json::json!({ "path": path, "diagnostics": list, "omitted": omitted })
    } else {
        serde_json::json!({ "path": path, "diagnostics": list })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_name_cannot_forge_a_diagnostic_line() {
        let d = Diagnostic::new(
            codes::E001,
            Severity::Error,
            "evil\nerror[E999]: forged.iter",
            Pos { line: 1, column: 1 },
            "bad",
        );
        let out = render_human("x\n", &[d]);
        assert!(!out.lines().any(|l| l.starts_with("error[E999]")), "{out}");
        assert!(out.contains("evil\u{fffd}error[E999]"), "{out}");
    }
}
