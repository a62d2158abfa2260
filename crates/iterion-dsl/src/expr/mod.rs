//! The expression language of `when "…"` edge clauses (and, later,
//! `compute` nodes): upstream's grammar, operators, truthiness, builtin
//! functions and depth limit, parsed once by [`Expr::parse`] — the compiler
//! reports a failure as C040 at the offending column, the engine evaluates
//! the same parsed form with [`Expr::eval_bool`]. One parser for both.
//!
//! Grammar (upstream `pkg/dsl/expr`):
//! `or := and (("||"|"or") and)*`, `and := not (("&&"|"and") not)*`,
//! `not := ("!"|"not") not | cmp`, `cmp := add (("=="|"!="|"<"|"<="|">"|">=") add)?`,
//! `add := mul (("+"|"-") mul)*`, `mul := unary (("*"|"/"|"%") unary)*`,
//! `unary := "-" unary | primary`,
//! `primary := number | string | true | false | IDENT "(" args ")" | IDENT ("." IDENT)* | "(" or ")"`.
//! Paths name `vars`, `input`, `outputs`, `artifacts`, `loop`, `run`; a bare
//! identifier reads the `input` namespace (for an edge, the source node's
//! output). Functions: `length`, `concat`, `unique`, `contains`, `join`,
//! `if` (short-circuit). Nesting (parentheses, call arguments, `!`, unary
//! `-`) is capped at [`MAX_DEPTH`] levels as upstream; chains of one
//! operator are kept flat, so neither parsing nor evaluation recurses
//! deeper than that cap whatever the input. Does not own what a path
//! resolves to: the caller supplies a [`Resolve`].

mod ast;
mod error;
mod eval;
#[cfg(test)]
mod tests;

use serde_json::{Number, Value};

pub use ast::MAX_DEPTH;
use ast::{Func, Node, Op, STACK_GROW, STACK_RED_ZONE, is_namespace};
pub use error::ExprError;
pub use eval::{MapScope, Resolve, drill, truthy};

/// A reference an expression reads (for the compiler's checks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ref {
    /// `vars`, `input`, `outputs`, … (a bare identifier is `input`).
    pub namespace: String,
    /// The rest of the path.
    pub path: Vec<String>,
}

/// A parsed expression.
#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    root: Node,
    src: String,
}

// ---------------------------------------------------------------- lexer

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Eof,
    Ident(String),
    Int(String),
    Float(String),
    Str(String),
    True,
    False,
    Dot,
    Comma,
    LParen,
    RParen,
    Not,
    Op(Op),
}

impl Tok {
    fn text(&self) -> String {
        match self {
            Tok::Eof => "end of expression".into(),
            Tok::Ident(s) | Tok::Int(s) | Tok::Float(s) => format!("`{s}`"),
            Tok::Str(_) => "a string".into(),
            Tok::True => "`true`".into(),
            Tok::False => "`false`".into(),
            Tok::Dot => "`.`".into(),
            Tok::Comma => "`,`".into(),
            Tok::LParen => "`(`".into(),
            Tok::RParen => "`)`".into(),
            Tok::Not => "`!`".into(),
            Tok::Op(o) => format!("`{}`", o.text()),
        }
    }
}

struct Lexer<'a> {
    src: &'a [u8],
    text: &'a str,
    pos: usize,
}

impl Lexer<'_> {
    /// Character offset of a byte offset (errors count characters).
    fn chars_at(&self, byte: usize) -> usize {
        self.text
            .get(..byte.min(self.text.len()))
            .map_or(byte, |s| s.chars().count())
    }

    fn syntax(&self, byte: usize, message: impl Into<String>) -> ExprError {
        ExprError::Syntax {
            offset: self.chars_at(byte),
            message: message.into(),
        }
    }

    /// The next token and the byte offset it starts at.
    fn next(&mut self) -> Result<(Tok, usize), ExprError> {
        while self
            .src
            .get(self.pos)
            .is_some_and(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\r'))
        {
            self.pos += 1;
        }
        let start = self.pos;
        let Some(&c) = self.src.get(self.pos) else {
            return Ok((Tok::Eof, start));
        };
        let two = |s: &Self, b: u8| s.src.get(s.pos + 1) == Some(&b);
        let (tok, len) = match c {
            b'.' => (Tok::Dot, 1),
            b',' => (Tok::Comma, 1),
            b'(' => (Tok::LParen, 1),
            b')' => (Tok::RParen, 1),
            b'+' => (Tok::Op(Op::Add), 1),
            b'-' => (Tok::Op(Op::Sub), 1),
            b'*' => (Tok::Op(Op::Mul), 1),
            b'/' => (Tok::Op(Op::Div), 1),
            b'%' => (Tok::Op(Op::Rem), 1),
            b'&' if two(self, b'&') => (Tok::Op(Op::And), 2),
            b'|' if two(self, b'|') => (Tok::Op(Op::Or), 2),
            b'&' | b'|' => {
                return Err(self.syntax(start, format!("lone `{}` (write `{0}{0}`)", c as char)));
            }
            b'!' if two(self, b'=') => (Tok::Op(Op::Ne), 2),
            b'!' => (Tok::Not, 1),
            b'=' if two(self, b'=') => (Tok::Op(Op::Eq), 2),
            b'=' => return Err(self.syntax(start, "lone `=` (use `==` for equality)")),
            b'<' if two(self, b'=') => (Tok::Op(Op::Le), 2),
            b'<' => (Tok::Op(Op::Lt), 1),
            b'>' if two(self, b'=') => (Tok::Op(Op::Ge), 2),
            b'>' => (Tok::Op(Op::Gt), 1),
            b'"' | b'\'' => return self.string(c).map(|t| (t, start)),
            b'0'..=b'9' => return Ok((self.number(), start)),
            c if c == b'_' || c.is_ascii_alphabetic() => return Ok((self.ident(), start)),
            _ => {
                let ch = self.text.get(start..).and_then(|s| s.chars().next());
                return Err(self.syntax(
                    start,
                    format!("unexpected character {:?}", ch.unwrap_or('\u{fffd}')),
                ));
            }
        };
        self.pos += len;
        Ok((tok, start))
    }

    fn string(&mut self, quote: u8) -> Result<Tok, ExprError> {
        let start = self.pos;
        self.pos += 1;
        let mut out: Vec<u8> = Vec::new();
        while let Some(&c) = self.src.get(self.pos) {
            if c == b'\\'
                && let Some(&n) = self.src.get(self.pos + 1)
            {
                out.push(match n {
                    b'n' => b'\n',
                    b't' => b'\t',
                    other => other,
                });
                self.pos += 2;
                continue;
            }
            self.pos += 1;
            if c == quote {
                return Ok(Tok::Str(String::from_utf8_lossy(&out).into_owned()));
            }
            out.push(c);
        }
        Err(self.syntax(start, "unterminated string"))
    }

    fn number(&mut self) -> Tok {
        let start = self.pos;
        let mut float = false;
        while let Some(&c) = self.src.get(self.pos) {
            if c.is_ascii_digit() {
                self.pos += 1;
            } else if c == b'.'
                && !float
                && self.src.get(self.pos + 1).is_some_and(u8::is_ascii_digit)
            {
                float = true;
                self.pos += 1;
            } else {
                break;
            }
        }
        let text = self
            .text
            .get(start..self.pos)
            .unwrap_or_default()
            .to_owned();
        if float {
            Tok::Float(text)
        } else {
            Tok::Int(text)
        }
    }

    fn ident(&mut self) -> Tok {
        let start = self.pos;
        while self
            .src
            .get(self.pos)
            .is_some_and(|c| *c == b'_' || c.is_ascii_alphanumeric())
        {
            self.pos += 1;
        }
        let text = self.text.get(start..self.pos).unwrap_or_default();
        match text {
            "true" => Tok::True,
            "false" => Tok::False,
            "and" => Tok::Op(Op::And),
            "or" => Tok::Op(Op::Or),
            "not" => Tok::Not,
            _ => Tok::Ident(text.to_owned()),
        }
    }
}

// ---------------------------------------------------------------- parser

struct Parser<'a> {
    lex: Lexer<'a>,
    cur: Tok,
    at: usize,
    depth: usize,
}

impl Parser<'_> {
    fn advance(&mut self) -> Result<(), ExprError> {
        let (t, at) = self.lex.next()?;
        self.cur = t;
        self.at = at;
        Ok(())
    }

    fn enter(&mut self) -> Result<(), ExprError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(ExprError::TooDeep {
                offset: self.lex.chars_at(self.at),
            });
        }
        Ok(())
    }

    fn unexpected(&self, wanted: &str) -> ExprError {
        self.lex.syntax(
            self.at,
            format!("expected {wanted}, found {}", self.cur.text()),
        )
    }

    fn expr(&mut self) -> Result<Node, ExprError> {
        self.enter()?;
        // ~10 frames per nesting level, and a debug build's frames are
        // large: grow the stack rather than trust the caller's (a 2 MiB
        // tokio or test thread) to hold 256 levels.
        let n = stacker::maybe_grow(STACK_RED_ZONE, STACK_GROW, || self.chain(0));
        self.depth -= 1;
        n
    }

    /// Levels 0 (or), 1 (and), 3 (add), 4 (mul) are flat chains; 2 is the
    /// single comparison; 5 is unary.
    fn chain(&mut self, level: u8) -> Result<Node, ExprError> {
        let ops: &[Op] = match level {
            0 => &[Op::Or],
            1 => &[Op::And],
            2 => return self.cmp(),
            3 => &[Op::Add, Op::Sub],
            4 => &[Op::Mul, Op::Div, Op::Rem],
            _ => return self.unary(),
        };
        let first = if level == 1 {
            self.not()?
        } else {
            self.chain(level + 1)?
        };
        let mut rest = Vec::new();
        while let Tok::Op(op) = self.cur
            && ops.contains(&op)
        {
            self.advance()?;
            let next = if level == 1 {
                self.not()?
            } else {
                self.chain(level + 1)?
            };
            rest.push((op, next));
        }
        Ok(if rest.is_empty() {
            first
        } else {
            Node::Chain {
                first: Box::new(first),
                rest,
            }
        })
    }

    fn not(&mut self) -> Result<Node, ExprError> {
        if self.cur == Tok::Not {
            self.enter()?;
            self.advance()?;
            let child = self.not()?;
            self.depth -= 1;
            return Ok(Node::Not(Box::new(child)));
        }
        self.chain(2)
    }

    fn cmp(&mut self) -> Result<Node, ExprError> {
        let left = self.chain(3)?;
        if let Tok::Op(op @ (Op::Eq | Op::Ne | Op::Lt | Op::Le | Op::Gt | Op::Ge)) = self.cur {
            self.advance()?;
            let right = self.chain(3)?;
            return Ok(Node::Chain {
                first: Box::new(left),
                rest: vec![(op, right)],
            });
        }
        Ok(left)
    }

    fn unary(&mut self) -> Result<Node, ExprError> {
        if self.cur == Tok::Op(Op::Sub) {
            self.enter()?;
            self.advance()?;
            let child = self.unary()?;
            self.depth -= 1;
            return Ok(Node::Neg(Box::new(child)));
        }
        self.primary()
    }

    fn primary(&mut self) -> Result<Node, ExprError> {
        let at = self.at;
        let node = match std::mem::replace(&mut self.cur, Tok::Eof) {
            Tok::Int(t) => {
                let v: i64 = t
                    .parse()
                    .map_err(|_| self.lex.syntax(at, format!("invalid integer `{t}`")))?;
                Node::Lit(Value::from(v))
            }
            Tok::Float(t) => {
                let v: f64 = t
                    .parse()
                    .map_err(|_| self.lex.syntax(at, format!("invalid number `{t}`")))?;
                Node::Lit(Number::from_f64(v).map_or(Value::Null, Value::Number))
            }
            Tok::Str(s) => Node::Lit(Value::String(s)),
            Tok::True => Node::Lit(Value::Bool(true)),
            Tok::False => Node::Lit(Value::Bool(false)),
            Tok::LParen => {
                self.advance()?;
                let inner = self.expr()?;
                if self.cur != Tok::RParen {
                    return Err(self.unexpected("`)`"));
                }
                inner
            }
            Tok::Ident(name) => {
                self.advance()?;
                if self.cur == Tok::LParen {
                    let func = Func::named(&name).ok_or_else(|| ExprError::UnknownFunction {
                        name: name.clone(),
                        offset: self.lex.chars_at(at),
                    })?;
                    return self.call(func);
                }
                let mut path = Vec::new();
                while self.cur == Tok::Dot {
                    self.advance()?;
                    match std::mem::replace(&mut self.cur, Tok::Eof) {
                        Tok::Ident(p) => path.push(p),
                        other => {
                            self.cur = other;
                            return Err(self.unexpected("a name after `.`"));
                        }
                    }
                    self.advance()?;
                }
                return Ok(Node::Path {
                    namespace: name,
                    path,
                });
            }
            other => {
                self.cur = other;
                return Err(self.unexpected("a value"));
            }
        };
        self.advance()?;
        Ok(node)
    }

    fn call(&mut self, func: Func) -> Result<Node, ExprError> {
        self.advance()?; // `(`
        let mut args = Vec::new();
        if self.cur != Tok::RParen {
            loop {
                args.push(self.expr()?);
                if self.cur == Tok::Comma {
                    self.advance()?;
                    continue;
                }
                break;
            }
        }
        if self.cur != Tok::RParen {
            return Err(self.unexpected("`)` or `,` in the call"));
        }
        self.advance()?;
        Ok(Node::Call { func, args })
    }
}

impl Expr {
    /// Parse an expression (upstream's grammar and depth limit).
    pub fn parse(src: &str) -> Result<Self, ExprError> {
        let mut p = Parser {
            lex: Lexer {
                src: src.as_bytes(),
                text: src,
                pos: 0,
            },
            cur: Tok::Eof,
            at: 0,
            depth: 0,
        };
        p.advance()?;
        let root = p.expr()?;
        if p.cur != Tok::Eof {
            return Err(p.unexpected("the end of the expression"));
        }
        Ok(Self {
            root,
            src: src.to_owned(),
        })
    }

    /// The text it was parsed from.
    pub fn source(&self) -> &str {
        &self.src
    }

    /// Every path the expression reads, first occurrence first (a bare
    /// identifier is reported under `input`).
    pub fn refs(&self) -> Vec<Ref> {
        let mut out: Vec<Ref> = Vec::new();
        let mut stack = vec![&self.root];
        while let Some(n) = stack.pop() {
            match n {
                Node::Lit(_) => {}
                Node::Path { namespace, path } => {
                    let r = if is_namespace(namespace) {
                        Ref {
                            namespace: namespace.clone(),
                            path: path.clone(),
                        }
                    } else {
                        Ref {
                            namespace: "input".into(),
                            path: std::iter::once(namespace.clone())
                                .chain(path.iter().cloned())
                                .collect(),
                        }
                    };
                    if !out.contains(&r) {
                        out.push(r);
                    }
                }
                Node::Not(c) | Node::Neg(c) => stack.push(c),
                Node::Chain { first, rest } => {
                    stack.extend(rest.iter().rev().map(|(_, n)| n));
                    stack.push(first);
                }
                Node::Call { args, .. } => stack.extend(args.iter().rev()),
            }
        }
        out
    }

    /// Evaluate to a JSON value.
    pub fn eval(&self, scope: &dyn Resolve) -> Result<Value, ExprError> {
        eval::eval(&self.root, scope)
    }

    /// Evaluate and read the result as a condition (upstream truthiness).
    pub fn eval_bool(&self, scope: &dyn Resolve) -> Result<bool, ExprError> {
        self.eval(scope).map(|v| truthy(&v))
    }
}
