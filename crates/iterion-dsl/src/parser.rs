//! Parser: tokens → a tree of logical lines, and line → value helpers.
//!
//! The tree is the indentation structure only (each logical line with the
//! lines indented under it); what a line means is decided by the compiler,
//! which knows the context (a `schema` field, an edge, a sandbox property).
//! Built with an explicit stack, so depth never costs recursion beyond the
//! lexer's nesting cap ([`crate::lexer::MAX_DEPTH`]).

use crate::ir::Pos;
use crate::lexer::{STok, StrKind, Tok};

/// One logical line and the block under it.
#[derive(Debug, Clone, Default)]
pub struct Line {
    /// Tokens of the line (no `Newline`).
    pub toks: Vec<STok>,
    /// Lines indented under it.
    pub children: Vec<Line>,
    /// Raw text body (prompt), when captured.
    pub text: Option<(String, Pos)>,
}

impl Line {
    /// Position of the first token.
    pub fn pos(&self) -> Pos {
        self.toks.first().map(|t| t.pos).unwrap_or_default()
    }
}

/// Build the line tree.
pub fn parse(toks: Vec<STok>) -> Vec<Line> {
    let mut stack: Vec<Vec<Line>> = vec![Vec::new()];
    let mut buf: Vec<STok> = Vec::new();
    for t in toks {
        match t.tok {
            Tok::Newline => {
                if buf.is_empty() {
                    continue;
                }
                let line_toks = std::mem::take(&mut buf);
                if let [
                    STok {
                        tok: Tok::Text(_), ..
                    },
                ] = line_toks.as_slice()
                {
                    let STok { tok, pos, .. } = line_toks.into_iter().next().unwrap_or(STok {
                        tok: Tok::Newline,
                        pos: Pos::default(),
                        glued: false,
                    });
                    if let Tok::Text(s) = tok {
                        let top = stack.last_mut();
                        if let Some(last) = top.and_then(|v| v.last_mut()) {
                            last.text = Some((s, pos));
                        }
                    }
                    continue;
                }
                if let Some(top) = stack.last_mut() {
                    top.push(Line {
                        toks: line_toks,
                        children: Vec::new(),
                        text: None,
                    });
                }
            }
            Tok::Indent => stack.push(Vec::new()),
            Tok::Dedent => {
                if stack.len() > 1 {
                    let block = stack.pop().unwrap_or_default();
                    attach(&mut stack, block);
                }
            }
            _ => buf.push(t),
        }
    }
    if !buf.is_empty()
        && let Some(top) = stack.last_mut()
    {
        top.push(Line {
            toks: buf,
            children: Vec::new(),
            text: None,
        });
    }
    while stack.len() > 1 {
        let block = stack.pop().unwrap_or_default();
        attach(&mut stack, block);
    }
    stack.pop().unwrap_or_default()
}

fn attach(stack: &mut [Vec<Line>], block: Vec<Line>) {
    if let Some(top) = stack.last_mut() {
        match top.last_mut() {
            Some(parent) if parent.children.is_empty() => parent.children = block,
            Some(parent) => parent.children.extend(block),
            None => top.extend(block),
        }
    }
}

/// A property value as written on one line.
#[derive(Debug, Clone, PartialEq)]
pub enum PValue {
    /// A string literal.
    Str(String, StrKind),
    /// A bare word (identifier, dotted name, number, `true`…).
    Word(String),
    /// `[a, b]`.
    List(Vec<(PValue, Pos)>),
    /// `{ k: v }`.
    Map(Vec<(String, PValue, Pos)>),
    /// Several tokens that form no single value (kept as text).
    Expr(String),
}

impl PValue {
    /// Text of a string or a word.
    pub fn text(&self) -> Option<&str> {
        match self {
            PValue::Str(s, _) | PValue::Word(s) => Some(s),
            _ => None,
        }
    }

    /// Identifier-shaped word.
    pub fn ident(&self) -> Option<&str> {
        match self {
            PValue::Word(s) if is_ident(s) => Some(s),
            _ => None,
        }
    }

    /// A word that is an integer.
    pub fn int(&self) -> Option<i64> {
        match self {
            PValue::Word(s) => s.parse().ok(),
            _ => None,
        }
    }

    /// What kind of value this is, for messages.
    pub fn describe(&self) -> &'static str {
        match self {
            PValue::Str(..) => "a string",
            PValue::Word(w) if w.parse::<f64>().is_ok() => "a number",
            PValue::Word(w) if w == "true" || w == "false" => "a boolean",
            PValue::Word(_) => "a bare word",
            PValue::List(_) => "a list",
            PValue::Map(_) => "a map",
            PValue::Expr(_) => "an expression",
        }
    }

    /// To JSON (for `Node::properties` and tooling).
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value;
        match self {
            PValue::Str(s, _) => Value::String(s.clone()),
            PValue::Word(w) => {
                if w == "true" {
                    Value::Bool(true)
                } else if w == "false" {
                    Value::Bool(false)
                } else if let Ok(i) = w.parse::<i64>() {
                    Value::from(i)
                } else if let Some(f) = w.parse::<f64>().ok().filter(|f| f.is_finite()) {
                    serde_json::Number::from_f64(f).map_or(Value::String(w.clone()), Value::Number)
                } else {
                    Value::String(w.clone())
                }
            }
            PValue::List(items) => Value::Array(items.iter().map(|(v, _)| v.to_json()).collect()),
            PValue::Map(entries) => Value::Object(
                entries
                    .iter()
                    .map(|(k, v, _)| (k.clone(), v.to_json()))
                    .collect(),
            ),
            PValue::Expr(e) => Value::String(e.clone()),
        }
    }
}

/// Whether a word is an identifier (letter or `_` first, then
/// letters, digits, `_`).
pub fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_alphabetic() || c == '_')
        && chars.all(|c| c.is_alphanumeric() || c == '_')
}

/// Render tokens back to text (for expressions and messages).
pub fn tokens_text(toks: &[STok]) -> String {
    let mut out = String::new();
    for (i, t) in toks.iter().enumerate() {
        if i > 0 && !t.glued {
            out.push(' ');
        }
        match &t.tok {
            Tok::Word(w) => out.push_str(w),
            Tok::Str(s, StrKind::Raw) => {
                out.push('`');
                out.push_str(s);
                out.push('`');
            }
            Tok::Str(s, _) => {
                out.push('"');
                out.push_str(s);
                out.push('"');
            }
            Tok::Text(s) => out.push_str(s),
            Tok::Colon => out.push(':'),
            Tok::Comma => out.push(','),
            Tok::LBrack => out.push('['),
            Tok::RBrack => out.push(']'),
            Tok::LBrace => out.push('{'),
            Tok::RBrace => out.push('}'),
            Tok::LParen => out.push('('),
            Tok::RParen => out.push(')'),
            Tok::Arrow => out.push_str("->"),
            Tok::Eq => out.push('='),
            Tok::Punct(c) => out.push(*c),
            Tok::Newline | Tok::Indent | Tok::Dedent => {}
        }
    }
    out
}

/// Deepest `[`/`{` nesting a value may have.
const MAX_VALUE_DEPTH: usize = 16;

/// Parse the value tokens of a property. `Err((pos, message))` when the
/// shape is broken (unbalanced bracket, missing colon in a map…).
pub fn parse_value(toks: &[STok]) -> Result<PValue, (Pos, String)> {
    if toks.is_empty() {
        return Ok(PValue::Expr(String::new()));
    }
    let (v, used) = parse_one(toks, 0)?;
    if used == toks.len() {
        Ok(v)
    } else if matches!(v, PValue::List(_) | PValue::Map(_)) {
        Err((
            toks[used].pos,
            format!(
                "unexpected `{}` after the value",
                tokens_text(&toks[used..used + 1])
            ),
        ))
    } else {
        Ok(PValue::Expr(tokens_text(toks)))
    }
}

fn parse_one(toks: &[STok], depth: usize) -> Result<(PValue, usize), (Pos, String)> {
    let Some(first) = toks.first() else {
        return Err((Pos::default(), "missing value".into()));
    };
    if depth > MAX_VALUE_DEPTH {
        return Err((first.pos, "value nested too deeply".into()));
    }
    match &first.tok {
        Tok::Str(s, k) => Ok((PValue::Str(s.clone(), *k), 1)),
        Tok::LBrack => {
            let mut items = Vec::new();
            let mut i = 1;
            loop {
                match toks.get(i).map(|t| &t.tok) {
                    None => return Err((first.pos, "unclosed `[`".into())),
                    Some(Tok::RBrack) => return Ok((PValue::List(items), i + 1)),
                    Some(Tok::Comma) => i += 1,
                    Some(_) => {
                        let pos = toks[i].pos;
                        let (v, used) = parse_elem(&toks[i..], depth + 1)?;
                        items.push((v, pos));
                        i += used;
                        match toks.get(i).map(|t| &t.tok) {
                            Some(Tok::Comma | Tok::RBrack) => {}
                            None => return Err((first.pos, "unclosed `[`".into())),
                            Some(_) => {
                                return Err((toks[i].pos, "expected `,` or `]` in list".into()));
                            }
                        }
                    }
                }
            }
        }
        Tok::LBrace => {
            let mut entries = Vec::new();
            let mut i = 1;
            loop {
                match toks.get(i).map(|t| &t.tok) {
                    None => return Err((first.pos, "unclosed `{`".into())),
                    Some(Tok::RBrace) => return Ok((PValue::Map(entries), i + 1)),
                    Some(Tok::Comma) => i += 1,
                    Some(Tok::Word(k)) | Some(Tok::Str(k, _)) => {
                        let pos = toks[i].pos;
                        let key = k.clone();
                        if toks.get(i + 1).map(|t| &t.tok) != Some(&Tok::Colon) {
                            return Err((pos, format!("expected `:` after map key `{key}`")));
                        }
                        i += 2;
                        let (v, used) = parse_elem(&toks[i..], depth + 1)?;
                        entries.push((key, v, pos));
                        i += used;
                        match toks.get(i).map(|t| &t.tok) {
                            Some(Tok::Comma | Tok::RBrace) => {}
                            None => return Err((first.pos, "unclosed `{`".into())),
                            Some(_) => {
                                return Err((toks[i].pos, "expected `,` or `}` in map".into()));
                            }
                        }
                    }
                    Some(_) => return Err((toks[i].pos, "expected a key in map".into())),
                }
            }
        }
        _ => parse_elem(toks, depth),
    }
}

/// One list/map element: a string, a nested collection, or a run of glued
/// tokens (`mcp.server.*`, `-1`, `!**.npmjs.org`) read as one word.
fn parse_elem(toks: &[STok], depth: usize) -> Result<(PValue, usize), (Pos, String)> {
    let Some(first) = toks.first() else {
        return Err((Pos::default(), "missing value".into()));
    };
    match first.tok {
        Tok::Str(..) | Tok::LBrack | Tok::LBrace => parse_one(toks, depth),
        Tok::Comma | Tok::RBrack | Tok::RBrace | Tok::Colon => {
            Err((first.pos, "missing value".into()))
        }
        _ => {
            let mut n = 1;
            while let Some(t) = toks.get(n) {
                if !t.glued
                    || matches!(
                        t.tok,
                        Tok::Comma | Tok::RBrack | Tok::RBrace | Tok::Colon | Tok::Str(..)
                    )
                {
                    break;
                }
                n += 1;
            }
            // words separated by spaces inside a list element (`a b`) are one expression
            while let Some(t) = toks.get(n) {
                if matches!(
                    t.tok,
                    Tok::Comma
                        | Tok::RBrack
                        | Tok::RBrace
                        | Tok::Colon
                        | Tok::LBrack
                        | Tok::LBrace
                        | Tok::Str(..)
                ) {
                    break;
                }
                n += 1;
            }
            let text = tokens_text(&toks[..n]);
            if n == 1
                && let Tok::Word(w) = &first.tok
            {
                return Ok((PValue::Word(w.clone()), 1));
            }
            Ok((PValue::Word(text), n))
        }
    }
}
