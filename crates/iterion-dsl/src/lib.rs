//! The `.iter` workflow language: lexer → parser → compiler → [`ir`].
//!
//! Owns the grammar of upstream Iterion v1 and its diagnostics (codes,
//! positions, hints, rendering), plus the host-side variable expansion of a
//! sandbox spec ([`expand`]). Does no IO beyond reading the file it is
//! handed ([`compile_file`]), and knows nothing of drivers or stores.
//! Malformed input always yields diagnostics, never a panic.

pub mod diag;
pub mod expand;
pub mod expr;
pub mod ir;
pub mod lexer;
pub mod parser;

mod compile;

use std::path::Path;

pub use diag::{Diagnostic, Omitted, Severity, codes, render_human, render_omitted};
pub use iterion_core::NetworkSpec;

/// The result of compiling one file.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// Workflows in source order (the runtime runs the first).
    pub workflows: Vec<ir::Workflow>,
    /// The diagnostics kept (at most [`diag::MAX_PER_FILE`]), sorted by
    /// position.
    pub diagnostics: Vec<Diagnostic>,
    /// Diagnostics found past the bound: counted, not kept.
    pub omitted: Omitted,
}

impl Compiled {
    /// Whether any diagnostic is an error.
    pub fn has_errors(&self) -> bool {
        self.omitted.errors > 0
            || self
                .diagnostics
                .iter()
                .any(|d| d.severity == Severity::Error)
    }
}

/// Compile source text. `file` is only used in diagnostics.
pub fn compile_source(text: &str, file: &Path) -> Compiled {
    compile_checked(
        text,
        file,
        &Checks {
            tool: &|_| None,
            egress: &|_, _| None,
        },
    )
}

/// What a compile asks of the components that own a decision this crate
/// only parses.
pub struct Checks<'a> {
    /// An agent's or judge's `tools:` name: why it is unknown, `None` when
    /// the tool registry knows it (`C322` at the entry).
    pub tool: &'a dyn Fn(&str) -> Option<String>,
    /// A secret's `egress:` pattern under the workflow's `network:` block
    /// (`None`: no block): why no host it names could be reached, `None`
    /// when some could (`C325` at the pattern). The egress policy owns
    /// "host allowed" (`iterion_netproxy::Policy`).
    pub egress: &'a dyn Fn(Option<&NetworkSpec>, &iterion_core::net::NetRule) -> Option<String>,
}

/// Compile with every hook of [`Checks`].
pub fn compile_checked(text: &str, file: &Path, checks: &Checks<'_>) -> Compiled {
    let fname = file.display().to_string();
    let mut diags = diag::Sink::default();
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let lexed = lexer::lex(text, &fname, &mut diags);
    let lines = parser::parse(lexed.toks);
    let mut ctx = compile::Ctx {
        file: &fname,
        diags,
        bindings: Vec::new(),
    };
    let workflows = compile::compile(&lines, &mut ctx, checks.tool, checks.egress);
    let diag::Sink {
        kept: mut diagnostics,
        omitted,
    } = ctx.diags;
    diagnostics.sort_by(|a, b| (a.line, a.column, a.code).cmp(&(b.line, b.column, b.code)));
    diagnostics.dedup();
    Compiled {
        workflows,
        diagnostics,
        omitted,
    }
}

/// Read and compile a file. A file that is not UTF-8 compiles to an `E006`
/// diagnostic; only IO failures are errors.
pub fn compile_file(path: &Path) -> Result<Compiled, std::io::Error> {
    let bytes = std::fs::read(path)?;
    match String::from_utf8(bytes) {
        Ok(text) => Ok(compile_source(&text, path)),
        Err(e) => {
            let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
            let prefix = String::from_utf8_lossy(valid);
            let line = prefix.matches('\n').count() as u32 + 1;
            let column = prefix.rsplit('\n').next().map_or(0, |l| l.chars().count()) as u32 + 1;
            Ok(Compiled {
                workflows: Vec::new(),
                diagnostics: vec![
                    Diagnostic::new(
                        codes::E006,
                        Severity::Error,
                        path,
                        ir::Pos { line, column },
                        "the file holds a byte that is not UTF-8",
                    )
                    .with_hint("save the file as UTF-8"),
                ],
                omitted: Omitted::default(),
            })
        }
    }
}
