//! The compiler's diagnostic sink and the small text helpers every stage
//! shares (a shortened token echo, "did you mean" by edit distance). Owns no
//! language rule.

use crate::diag::{Diagnostic, Severity};
use crate::ir::Pos;
use crate::lexer::STok;
use crate::parser::tokens_text;

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
