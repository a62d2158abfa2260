//! Diagnostics: codes (upstream names), severities, positions, and the two
//! renderings `iterion validate` prints (human with a caret under the
//! source, and JSON). Rendering is plain text with no colour so snapshots
//! and non-TTY output are deterministic.

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
            message: message.into(),
            hint: None,
        }
    }

    /// Attach a hint.
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

/// Render diagnostics for a human: `file:line:col: severity[CODE]: message`,
/// the source line, a caret under the column, and the hint.
pub fn render_human(source: &str, diags: &[Diagnostic]) -> String {
    let lines: Vec<&str> = source.lines().collect();
    let mut out = String::new();
    for d in diags {
        let _ = writeln!(out, "{}[{}]: {}", d.severity.as_str(), d.code, d.message);
        let num = d.line.to_string();
        let pad = " ".repeat(num.len());
        let _ = writeln!(out, "{pad}--> {}:{}:{}", d.file.display(), d.line, d.column);
        if let Some(src) = lines.get((d.line as usize).saturating_sub(1)) {
            let src = src.trim_end_matches('\r');
            let shown: String = src
                .chars()
                .map(|c| if c == '\t' { ' ' } else { c })
                .collect();
            let _ = writeln!(out, "{pad} |");
            let _ = writeln!(out, "{num} | {shown}");
            let caret_at = (d.column as usize)
                .saturating_sub(1)
                .min(shown.chars().count());
            let _ = writeln!(out, "{pad} | {}^", " ".repeat(caret_at));
        }
        if let Some(h) = &d.hint {
            let _ = writeln!(out, "{pad} = hint: {h}");
        }
        out.push('\n');
    }
    out
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

/// Diagnostics of one file as `iterion validate --json` prints them.
pub fn json_file(path: &str, diags: &[Diagnostic]) -> serde_json::Value {
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
    serde_json::json!({ "path": path, "diagnostics": list })
}
