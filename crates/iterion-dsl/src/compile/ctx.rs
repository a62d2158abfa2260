//! The compiler's diagnostic sink and the small text helpers every stage
//! shares (a shortened token echo, "did you mean" by edit distance). Owns no
//! language rule.

use crate::diag::{Diagnostic, Severity, Sink};
use crate::ir::Pos;
use crate::lexer::STok;
use crate::parser::tokens_text;

pub(crate) struct Ctx<'f> {
    pub file: &'f str,
    /// Bounded: past [`crate::diag::MAX_PER_FILE`] findings are counted.
    pub diags: Sink,
    /// Every secret `egress:` pattern read so far, with where it was
    /// written: (secret, pattern as written, position), for the checks that
    /// need the workflow's network block (`super::secrets::check`).
    pub bindings: Vec<(String, String, Pos)>,
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
        if self.diags.full() {
            self.diags.count(sev);
            return;
        }
        let mut d = Diagnostic::new(code, sev, self.file, pos, msg);
        if let Some(h) = hint {
            d = d.with_hint(h);
        }
        self.diags.push(d);
    }

    pub(crate) fn error(&mut self, code: &'static str, pos: Pos, msg: impl Into<String>) {
        self.push(code, Severity::Error, pos, msg, None);
    }
}

pub(crate) fn short(toks: &[STok]) -> String {
    let s = tokens_text(toks);
    if s.chars().count() > 40 {
        format!("{}…", s.chars().take(40).collect::<String>())
    } else {
        s
    }
}

/// Closest name by edit distance (≤ 2), for "did you mean".
pub(crate) fn nearest<'a>(word: &str, names: &[&'a str]) -> Option<&'a str> {
    let mut best: Option<(usize, &str)> = None;
    for n in names {
        let d = distance(word, n);
        if d <= 2 && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, n));
        }
    }
    best.map(|(_, n)| n)
}

pub(crate) fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().take(64).collect();
    let b: Vec<char> = b.chars().take(64).collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}
