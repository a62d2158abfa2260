//! Indentation-aware lexer: text → tokens with `Newline`/`Indent`/`Dedent`.
//!
//! Owns the lexical quirks of upstream v1: `##` comments (a single `#` is
//! not one, facts §2.6), `"…"` strings whose backslash pairs stay verbatim
//! unless the file opts into `## strict-escape: on` (or reads as profile 2),
//! backtick raw strings spanning lines, `|` block scalars and prompt bodies
//! captured as raw text. Never panics, never recurses: every malformed input
//! becomes a diagnostic and the lexer resynchronises at the next line.

use crate::diag::{Diagnostic, Severity, Sink, codes};
use crate::ir::Pos;

/// How a string literal was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StrKind {
    /// `"…"`.
    Quoted,
    /// `` `…` ``.
    Raw,
    /// `|` block scalar.
    Block,
}

/// One token.
#[derive(Debug, Clone, PartialEq)]
pub enum Tok {
    /// A plain word: letters, digits, `_` and `.` (identifiers, dotted
    /// references, numbers, plain values such as `30s`).
    Word(String),
    /// A string literal (already decoded).
    Str(String, StrKind),
    /// A prompt body (raw text lines under `prompt NAME:`).
    Text(String),
    /// `:`.
    Colon,
    /// `,`.
    Comma,
    /// `[`.
    LBrack,
    /// `]`.
    RBrack,
    /// `{`.
    LBrace,
    /// `}`.
    RBrace,
    /// `(`.
    LParen,
    /// `)`.
    RParen,
    /// `->`.
    Arrow,
    /// `=`.
    Eq,
    /// Any other punctuation (`*`, `-`, `!`, `/`…), kept so values such as
    /// `mcp.server.*` survive.
    Punct(char),
    /// End of a logical line.
    Newline,
    /// Indentation increased.
    Indent,
    /// Indentation decreased.
    Dedent,
}

/// A token with its position and whether whitespace preceded it.
#[derive(Debug, Clone, PartialEq)]
pub struct STok {
    /// The token.
    pub tok: Tok,
    /// Where it starts.
    pub pos: Pos,
    /// Whether it touches the previous token (no space between).
    pub glued: bool,
}

/// Deepest indentation nesting accepted; deeper lines are refused (E003)
/// so later tree walks stay shallow whatever the input.
pub const MAX_DEPTH: usize = 48;

/// Deepest bracket nesting kept as tokens (values refuse more than 16
/// anyway); what lies deeper is reported once and not stored, so a file of
/// a million `[` costs no more memory than a file of a million letters.
pub const MAX_BRACKET_DEPTH: usize = 64;

/// Lexer output.
pub struct Lexed {
    /// Tokens.
    pub toks: Vec<STok>,
    /// Whether `\` escapes are decoded in `"…"` strings.
    pub strict_escape: bool,
    /// Syntax profile (`dsl: N` header), 1 when absent.
    pub profile: u32,
}

struct Lexer<'a> {
    /// The text, walked by bytes: every index is a char boundary (`bump`
    /// steps over a whole UTF-8 sequence) and columns count chars.
    text: &'a str,
    src: &'a [u8],
    i: usize,
    line: u32,
    col: u32,
    toks: Vec<STok>,
    sink: &'a mut Sink,
    /// The error being repeated (consecutive identical lexer errors, with
    /// no token between them, are one diagnostic: 32 KiB of NULs is one
    /// finding, not 32,768).
    repeat: Option<Repeat>,
    /// Start of the next non-blank line after an open bracket, once looked
    /// up: every newline inside the bracket asks, and asking again from each
    /// blank line would be quadratic.
    bracket_lookahead: Option<usize>,
    file: &'a str,
    strict: bool,
    profile: u32,
    indents: Vec<usize>,
    depth: usize,
    /// Indentation of the line that opened the outermost open bracket.
    open_indent: usize,
    line_indent: usize,
    line_start_tok: usize,
}

/// A run of identical lexer errors.
struct Repeat {
    /// Index in the sink (`None` when past its bound).
    idx: Option<usize>,
    code: &'static str,
    message: String,
    count: usize,
    last: Pos,
    /// Tokens lexed when the run last grew: a token in between ends it.
    toks_at: usize,
}

/// Lex a whole file.
pub fn lex(text: &str, file: &str, sink: &mut Sink) -> Lexed {
    let src = text.as_bytes();
    let (strict, profile) = header_flags(text);
    let mut lx = Lexer {
        text,
        src,
        i: 0,
        line: 1,
        col: 1,
        toks: Vec::with_capacity(src.len() / 4),
        sink,
        repeat: None,
        bracket_lookahead: None,
        file,
        strict,
        profile,
        indents: vec![0],
        depth: 0,
        open_indent: 0,
        line_indent: 0,
        line_start_tok: 0,
    };
    lx.run();
    lx.close_repeat();
    Lexed {
        toks: lx.toks,
        strict_escape: strict,
        profile,
    }
}

/// `## strict-escape: on` among the leading comment lines, and the `dsl: N`
/// header on the first declaration line.
fn header_flags(text: &str) -> (bool, u32) {
    let mut strict = false;
    let mut profile = 1;
    for line in text.lines() {
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        if let Some(rest) = t.strip_prefix("##") {
            let rest = rest.trim().to_ascii_lowercase();
            if rest.replace(' ', "") == "strict-escape:on" {
                strict = true;
            }
            continue;
        }
        if let Some(rest) = t.strip_prefix("dsl:") {
            let v = rest.split("##").next().unwrap_or("").trim();
            if let Ok(n) = v.parse::<u32>() {
                profile = n;
            }
        }
        break;
    }
    (strict || profile >= 2, profile)
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '.'
}

impl Lexer<'_> {
    fn pos(&self) -> Pos {
        Pos {
            line: self.line,
            column: self.col,
        }
    }

    /// The char at byte `j` (a char boundary).
    fn char_at(&self, j: usize) -> Option<char> {
        let b = *self.src.get(j)?;
        if b.is_ascii() {
            Some(char::from(b))
        } else {
            self.text.get(j..).and_then(|t| t.chars().next())
        }
    }

    /// The char `k` bytes ahead; callers look past ASCII only.
    fn peek(&self, k: usize) -> Option<char> {
        self.char_at(self.i + k)
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.char_at(self.i)?;
        self.i += c.len_utf8();
        if c == '\n' {
            self.line += 1;
            self.col = 1;
        } else {
            self.col += 1;
        }
        Some(c)
    }

    fn err(&mut self, code: &'static str, pos: Pos, message: String) {
        self.err_hint(code, pos, message, None);
    }

    fn err_hint(&mut self, code: &'static str, pos: Pos, message: String, hint: Option<&str>) {
        if let Some(r) = &mut self.repeat
            && r.code == code
            && r.message == message
            && r.toks_at == self.toks.len()
        {
            r.count += 1;
            r.last = pos;
            return;
        }
        self.close_repeat();
        let idx = if self.sink.full() {
            self.sink.count(Severity::Error);
            None
        } else {
            let mut d = Diagnostic::new(code, Severity::Error, self.file, pos, message.clone());
            if let Some(h) = hint {
                d = d.with_hint(h);
            }
            self.sink.push(d)
        };
        self.repeat = Some(Repeat {
            idx,
            code,
            message,
            count: 1,
            last: pos,
            toks_at: self.toks.len(),
        });
    }

    /// Fold the current run of identical errors into its first diagnostic.
    fn close_repeat(&mut self) {
        let Some(r) = self.repeat.take() else { return };
        if r.count < 2 {
            return;
        }
        if let Some(d) = r.idx.and_then(|i| self.sink.kept.get_mut(i)) {
            d.message = format!(
                "{} (and {} more like it, the last at line {}, column {})",
                d.message,
                r.count - 1,
                r.last.line,
                r.last.column
            );
        }
    }

    fn push(&mut self, tok: Tok, pos: Pos, glued: bool) {
        if self.depth > MAX_BRACKET_DEPTH {
            // inside an over-deep bracket: reported once, kept out of memory
            return;
        }
        self.toks.push(STok { tok, pos, glued });
    }

    /// Measure the indentation of the line starting at `self.i`, without
    /// consuming. Returns (width, has_tab, blank_or_comment).
    fn measure_line(&self, from: usize) -> (usize, bool, bool) {
        let mut j = from;
        let mut w = 0;
        let mut tab = false;
        while let Some(&c) = self.src.get(j) {
            match c {
                b' ' => w += 1,
                b'\t' => {
                    tab = true;
                    w += 1;
                }
                b'\r' => {}
                _ => break,
            }
            j += 1;
        }
        let blank = match self.src.get(j) {
            None | Some(b'\n') => true,
            Some(b'#') => self.src.get(j + 1) == Some(&b'#'),
            _ => false,
        };
        (w, tab, blank)
    }

    fn skip_to_eol(&mut self) {
        let rest = self.src.get(self.i..).unwrap_or_default();
        let end = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
        self.advance_in_line(self.i + end);
    }

    /// Move to byte `end` (a char boundary on the same line), counting the
    /// chars passed for the column.
    fn advance_in_line(&mut self, end: usize) {
        let passed = self.src.get(self.i..end).unwrap_or_default();
        let chars = passed.iter().filter(|&&b| (b & 0xC0) != 0x80).count();
        self.col += u32::try_from(chars).unwrap_or(u32::MAX);
        self.i = end;
    }

    fn run(&mut self) {
        let mut at_line_start = true;
        loop {
            if at_line_start {
                at_line_start = false;
                if !self.start_line() {
                    break;
                }
            }
            let Some(c) = self.peek(0) else { break };
            let glued = !matches!(
                self.toks.last().map(|t| &t.tok),
                None | Some(Tok::Newline | Tok::Indent | Tok::Dedent)
            ) && self.i > 0
                && !matches!(self.src[self.i - 1], b' ' | b'\t');
            let pos = self.pos();
            match c {
                '\n' => {
                    self.bump();
                    if self.depth > 0 {
                        self.maybe_close_brackets();
                        if self.depth > 0 {
                            continue;
                        }
                    }
                    self.end_line();
                    at_line_start = true;
                }
                ' ' | '\t' | '\r' => {
                    self.bump();
                }
                '#' => {
                    if self.peek(1) != Some('#') {
                        self.err_hint(
                            codes::E001,
                            pos,
                            "a single `#` does not open a comment in .iter files".into(),
                            Some("write `##` to start a comment"),
                        );
                    }
                    self.skip_to_eol();
                }
                '"' => self.quoted(pos, glued),
                '`' => self.raw(pos, glued),
                '|' if self.depth == 0 && self.rest_of_line_blank(self.i + 1) => {
                    self.bump();
                    self.skip_to_eol();
                    let text = self.capture_block(false);
                    self.push(Tok::Str(text, StrKind::Block), pos, glued);
                    self.end_line();
                    at_line_start = true;
                }
                ':' => self.single(Tok::Colon, pos, glued),
                ',' => self.single(Tok::Comma, pos, glued),
                '=' => self.single(Tok::Eq, pos, glued),
                '[' | '{' | '(' => {
                    if self.depth == 0 {
                        self.open_indent = self.line_indent;
                    }
                    if self.depth == MAX_BRACKET_DEPTH {
                        self.err(
                            codes::E002,
                            pos,
                            format!("brackets nested deeper than {MAX_BRACKET_DEPTH} levels"),
                        );
                    }
                    self.depth += 1;
                    let t = match c {
                        '[' => Tok::LBrack,
                        '{' => Tok::LBrace,
                        _ => Tok::LParen,
                    };
                    self.single(t, pos, glued);
                }
                ']' | '}' | ')' => {
                    if self.depth > MAX_BRACKET_DEPTH {
                        // its opener was dropped too
                        self.depth -= 1;
                        self.bump();
                        continue;
                    }
                    self.depth = self.depth.saturating_sub(1);
                    let t = match c {
                        ']' => Tok::RBrack,
                        '}' => Tok::RBrace,
                        _ => Tok::RParen,
                    };
                    self.single(t, pos, glued);
                }
                '-' if self.peek(1) == Some('>') => {
                    self.bump();
                    self.bump();
                    self.push(Tok::Arrow, pos, glued);
                }
                c if is_word_char(c) => {
                    let start = self.i;
                    loop {
                        match self.src.get(self.i) {
                            Some(&b) if b.is_ascii() => {
                                if b.is_ascii_alphanumeric() || b == b'_' || b == b'.' {
                                    self.i += 1;
                                    self.col += 1;
                                } else {
                                    break;
                                }
                            }
                            Some(_) if self.peek(0).is_some_and(is_word_char) => {
                                self.bump();
                            }
                            _ => break,
                        }
                    }
                    let w = self.text[start..self.i].to_owned();
                    self.push(Tok::Word(w), pos, glued);
                }
                c if c.is_control() => {
                    self.bump();
                    self.err(
                        codes::E001,
                        pos,
                        format!("unexpected control character U+{:04X}", c as u32),
                    );
                }
                c => {
                    self.bump();
                    self.push(Tok::Punct(c), pos, glued);
                }
            }
        }
        if self.depth > 0 {
            let pos = self.pos();
            self.err(codes::E002, pos, "unclosed bracket at end of file".into());
            self.depth = 0;
        }
        self.end_line();
        let pos = self.pos();
        while self.indents.len() > 1 {
            self.indents.pop();
            self.push(Tok::Dedent, pos, false);
        }
    }

    fn single(&mut self, t: Tok, pos: Pos, glued: bool) {
        self.bump();
        self.push(t, pos, glued);
    }

    fn rest_of_line_blank(&self, from: usize) -> bool {
        let mut j = from;
        while let Some(&c) = self.src.get(j) {
            match c {
                b' ' | b'\t' | b'\r' => j += 1,
                b'\n' => return true,
                b'#' => return self.src.get(j + 1) == Some(&b'#'),
                _ => return false,
            }
        }
        true
    }

    /// An unclosed bracket must not swallow the rest of the file: when the
    /// next non-blank line is less indented than the line that opened it
    /// (or as indented and not a closing bracket), the bracket is reported
    /// and the logical line ends here.
    fn maybe_close_brackets(&mut self) {
        let mut j = match self.bracket_lookahead {
            // still inside the blank run already looked through
            Some(next) if next > self.i => return,
            _ => self.i,
        };
        loop {
            let (w, _, blank) = self.measure_line(j);
            if !blank {
                self.bracket_lookahead = Some(j);
                let mut k = j;
                while matches!(self.src.get(k), Some(b' ' | b'\t' | b'\r')) {
                    k += 1;
                }
                let closer = matches!(self.src.get(k), Some(b']' | b'}' | b')'));
                if !closer && w <= self.open_indent {
                    let pos = self.pos();
                    self.err(
                        codes::E002,
                        pos,
                        "unclosed bracket on the previous line".into(),
                    );
                    self.depth = 0;
                }
                return;
            }
            match self.src[j..].iter().position(|&c| c == b'\n') {
                Some(off) => j += off + 1,
                None => {
                    self.bracket_lookahead = Some(self.src.len() + 1);
                    return;
                }
            }
        }
    }

    fn end_line(&mut self) {
        let has_content = self.toks.len() > self.line_start_tok
            && !matches!(
                self.toks.last().map(|t| &t.tok),
                Some(Tok::Newline | Tok::Indent | Tok::Dedent)
            );
        if !has_content {
            return;
        }
        let pos = self.pos();
        let is_prompt_header = {
            let mut line = self.toks[self.line_start_tok..]
                .iter()
                .map(|t| &t.tok)
                .filter(|t| !matches!(t, Tok::Indent | Tok::Dedent));
            matches!(
                (line.next(), line.next(), line.next(), line.next()),
                (Some(Tok::Word(k)), Some(Tok::Word(_)), Some(Tok::Colon), None) if k == "prompt"
            )
        };
        self.push(Tok::Newline, pos, false);
        if is_prompt_header {
            let pos = Pos {
                line: self.line,
                column: 1,
            };
            let text = self.capture_block(true);
            if !text.is_empty() {
                self.push(Tok::Text(text), pos, false);
                self.push(Tok::Newline, pos, false);
            }
        }
        self.line_start_tok = self.toks.len();
    }

    /// At the start of a physical line: skip blank/comment lines, emit
    /// indentation tokens. Returns false at end of input.
    fn start_line(&mut self) -> bool {
        loop {
            if self.i >= self.src.len() {
                return false;
            }
            let (w, tab, blank) = self.measure_line(self.i);
            if blank {
                self.skip_to_eol();
                if self.bump().is_none() {
                    return false;
                }
                continue;
            }
            let pos = self.pos();
            while matches!(self.peek(0), Some(' ' | '\t' | '\r')) {
                self.bump();
            }
            if tab {
                self.err(
                    codes::E003,
                    pos,
                    "tab in indentation; indent with spaces".into(),
                );
            }
            self.line_indent = w;
            self.line_start_tok = self.toks.len();
            let cur = self.indents.last().copied().unwrap_or(0);
            let pos = self.pos();
            if w > cur {
                if self.indents.len() > MAX_DEPTH {
                    self.err(
                        codes::E003,
                        pos,
                        format!("nesting deeper than {MAX_DEPTH} levels"),
                    );
                    self.skip_to_eol();
                    continue;
                }
                self.indents.push(w);
                self.push(Tok::Indent, pos, false);
            } else if w < cur {
                while self.indents.last().is_some_and(|&l| l > w) {
                    self.indents.pop();
                    self.push(Tok::Dedent, pos, false);
                }
                if self.indents.last().copied().unwrap_or(0) != w {
                    self.err(
                        codes::E003,
                        pos,
                        "dedent does not match any enclosing indentation level".into(),
                    );
                    self.indents.push(w);
                    self.push(Tok::Indent, pos, false);
                }
            }
            self.line_start_tok = self.toks.len();
            return true;
        }
    }

    /// Capture the lines under the current one that are more indented than
    /// it (blank lines included) as raw text; the first text line's
    /// indentation is removed from every line. Prompt bodies drop blank
    /// lines in profile 1.
    fn capture_block(&mut self, prompt: bool) -> String {
        // we are just past a '\n' (prompt) or at the '\n' (block scalar)
        if self.peek(0) == Some('\n') {
            self.bump();
        }
        let base = self.line_indent;
        let mut lines: Vec<(usize, String)> = Vec::new();
        loop {
            if self.i >= self.src.len() {
                break;
            }
            let (w, _, _) = self.measure_line(self.i);
            let mut j = self.i;
            while matches!(self.src.get(j), Some(b' ' | b'\t')) {
                j += 1;
            }
            let end = self.src[j..]
                .iter()
                .position(|&c| c == b'\n')
                .map_or(self.src.len(), |o| j + o);
            let content = self.text[j..end].trim_end_matches('\r').to_owned();
            if content.trim().is_empty() {
                // blank line: part of the block only if more text follows
                lines.push((usize::MAX, String::new()));
            } else if w > base {
                lines.push((w, content));
            } else {
                break;
            }
            self.advance_in_line(end);
            if self.bump().is_none() {
                break;
            }
        }
        // trailing blank lines belong to the next construct
        while lines.last().is_some_and(|(w, _)| *w == usize::MAX) {
            lines.pop();
        }
        let first = lines
            .iter()
            .find(|(w, _)| *w != usize::MAX)
            .map_or(0, |(w, _)| *w);
        let mut out = String::new();
        for (w, content) in lines {
            if w == usize::MAX {
                if prompt && self.profile < 2 {
                    continue;
                }
                out.push('\n');
                continue;
            }
            if !out.is_empty() {
                out.push('\n');
            }
            for _ in first..w.max(first) {
                out.push(' ');
            }
            out.push_str(&content);
        }
        out.trim_start_matches('\n').to_string()
    }

    fn quoted(&mut self, pos: Pos, glued: bool) {
        self.bump();
        let mut out = String::new();
        loop {
            match self.peek(0) {
                None | Some('\n') => {
                    self.err_hint(
                        codes::E004,
                        pos,
                        "unterminated string literal".into(),
                        Some("close the quote, or use a backtick raw string / a `|` block scalar for multi-line content"),
                    );
                    break;
                }
                Some('"') => {
                    self.bump();
                    break;
                }
                Some('\\') => {
                    let epos = self.pos();
                    self.bump();
                    let Some(n) = self.peek(0) else { continue };
                    if n == '\n' {
                        out.push('\\');
                        continue;
                    }
                    self.bump();
                    if self.strict {
                        match n {
                            '"' => out.push('"'),
                            '\\' => out.push('\\'),
                            'n' => out.push('\n'),
                            't' => out.push('\t'),
                            'r' => out.push('\r'),
                            '0' => out.push('\0'),
                            other => {
                                self.err(
                                    codes::E005,
                                    epos,
                                    format!("unknown escape sequence `\\{other}`"),
                                );
                                out.push('\\');
                                out.push(other);
                            }
                        }
                    } else {
                        // facts §2.6: the pair is kept verbatim
                        out.push('\\');
                        out.push(n);
                    }
                }
                Some(_) => {
                    // the run up to the next quote, backslash or end of line
                    let rest = self.src.get(self.i..).unwrap_or_default();
                    let len = rest
                        .iter()
                        .position(|&b| matches!(b, b'"' | b'\\' | b'\n'))
                        .unwrap_or(rest.len());
                    out.push_str(&self.text[self.i..self.i + len]);
                    self.advance_in_line(self.i + len);
                }
            }
        }
        self.push(Tok::Str(out, StrKind::Quoted), pos, glued);
    }

    fn raw(&mut self, pos: Pos, glued: bool) {
        self.bump();
        let start = self.i;
        loop {
            match self.peek(0) {
                None => {
                    self.err(codes::E004, pos, "unterminated raw string".into());
                    let s = self.text[start..self.i].to_owned();
                    self.push(Tok::Str(s, StrKind::Raw), pos, glued);
                    return;
                }
                Some('`') => {
                    let s = self.text[start..self.i].to_owned();
                    self.bump();
                    self.push(Tok::Str(s, StrKind::Raw), pos, glued);
                    return;
                }
                Some(_) => {
                    self.bump();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> (Vec<Tok>, Vec<Diagnostic>) {
        let mut d = Sink::default();
        let l = lex(s, "t.iter", &mut d);
        (l.toks.into_iter().map(|t| t.tok).collect(), d.kept)
    }

    #[test]
    fn verbatim_escapes_by_default() {
        let (t, d) = toks("a: \"x\\\"y\"\n");
        assert!(d.is_empty());
        assert_eq!(t[2], Tok::Str("x\\\"y".into(), StrKind::Quoted));
    }

    #[test]
    fn strict_escapes_on_opt_in() {
        let (t, _) = toks("## strict-escape: on\na: \"x\\\"y\\n\"\n");
        assert_eq!(t[2], Tok::Str("x\"y\n".into(), StrKind::Quoted));
    }

    #[test]
    fn indentation_tokens() {
        let (t, d) = toks("a:\n  b: c\nd: e\n");
        assert!(d.is_empty());
        assert!(t.contains(&Tok::Indent));
        assert!(t.contains(&Tok::Dedent));
    }

    #[test]
    fn block_scalar_and_prompt() {
        let (t, d) = toks("prompt p:\n  hello\n\n  {{x}}\na: |\n  one\n    two\n");
        assert!(d.is_empty(), "{d:?}");
        assert!(t.contains(&Tok::Text("hello\n{{x}}".into())));
        assert!(t.contains(&Tok::Str("one\n  two".into(), StrKind::Block)));
    }

    #[test]
    fn columns_count_chars_not_bytes() {
        let mut d = Sink::default();
        let l = lex("k: \"日本\" naïve x ## é\np: `ü` y\n", "t.iter", &mut d);
        assert!(d.kept.is_empty(), "{:?}", d.kept);
        let at = |t: Tok| {
            l.toks
                .iter()
                .find(|s| s.tok == t)
                .map(|s| (s.pos.line, s.pos.column))
        };
        assert_eq!(at(Tok::Str("日本".into(), StrKind::Quoted)), Some((1, 4)));
        assert_eq!(at(Tok::Word("naïve".into())), Some((1, 9)));
        assert_eq!(at(Tok::Word("x".into())), Some((1, 15)));
        assert_eq!(at(Tok::Str("ü".into(), StrKind::Raw)), Some((2, 4)));
        assert_eq!(at(Tok::Word("y".into())), Some((2, 8)));
    }

    #[test]
    fn single_hash_is_an_error() {
        let (_, d) = toks("# hi\n");
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].code, "E001");
    }
}
