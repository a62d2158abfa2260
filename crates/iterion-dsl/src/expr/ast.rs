//! The parsed form of an expression: the tree ([`Node`], its operators
//! [`Op`] and builtins [`Func`]), the namespaces a path may name, and the
//! nesting limits. What the parser in `expr/mod.rs` builds and the
//! evaluator in `expr/eval.rs` walks, so neither has to reach into the
//! other for it. Owns no syntax (no lexer, no grammar) and no semantics
//! (no evaluation, no truthiness).

use serde_json::Value;

/// Deepest nesting accepted, as upstream (`maxExprDepth`).
pub const MAX_DEPTH: usize = 256;

/// Stack left before a nesting level grows a new segment, and its size.
pub(crate) const STACK_RED_ZONE: usize = 128 * 1024;
pub(crate) const STACK_GROW: usize = 2 * 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Or,
    And,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

impl Op {
    pub(crate) fn text(self) -> &'static str {
        match self {
            Op::Or => "||",
            Op::And => "&&",
            Op::Eq => "==",
            Op::Ne => "!=",
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
            Op::Add => "+",
            Op::Sub => "-",
            Op::Mul => "*",
            Op::Div => "/",
            Op::Rem => "%",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Func {
    Length,
    Concat,
    Unique,
    Contains,
    Join,
    If,
}

impl Func {
    pub(crate) fn named(name: &str) -> Option<Self> {
        Some(match name {
            "length" => Func::Length,
            "concat" => Func::Concat,
            "unique" => Func::Unique,
            "contains" => Func::Contains,
            "join" => Func::Join,
            "if" => Func::If,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    Lit(Value),
    Path {
        namespace: String,
        path: Vec<String>,
    },
    Not(Box<Node>),
    Neg(Box<Node>),
    /// `first op x op y …` for one precedence level, left-associative.
    Chain {
        first: Box<Node>,
        rest: Vec<(Op, Node)>,
    },
    Call {
        func: Func,
        args: Vec<Node>,
    },
}

/// Whether `ns` is one of the language's namespaces (any other leading
/// identifier reads the `input` namespace).
pub(crate) fn is_namespace(ns: &str) -> bool {
    matches!(
        ns,
        "vars" | "input" | "outputs" | "artifacts" | "loop" | "run"
    )
}
