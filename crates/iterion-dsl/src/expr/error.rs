//! Why an expression does not parse or evaluate: the one error type the
//! parser and the evaluator both return, with its stable codes. Owns no
//! parsing and no evaluation.

use super::ast::MAX_DEPTH;

/// Why an expression does not parse or evaluate. `offset` is a character
/// offset into the expression text (0-based).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExprError {
    /// Malformed text.
    #[error("{message} (at character {offset})")]
    Syntax {
        /// Where.
        offset: usize,
        /// What is wrong.
        message: String,
    },
    /// A call to a function the language does not have.
    #[error(
        "unknown function `{name}` (at character {offset}); functions are length, concat, unique, contains, join and if"
    )]
    UnknownFunction {
        /// The name written.
        name: String,
        /// Where.
        offset: usize,
    },
    /// Nesting past [`MAX_DEPTH`].
    #[error("expression nested deeper than {MAX_DEPTH} levels (at character {offset})")]
    TooDeep {
        /// Where.
        offset: usize,
    },
    /// Evaluation failed (type mismatch, overflow, division by zero, bad
    /// argument count).
    #[error("{message}")]
    Eval {
        /// What failed.
        message: String,
    },
}

impl ExprError {
    /// Stable code: C040 for anything found at parse time.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Syntax { .. } | Self::UnknownFunction { .. } | Self::TooDeep { .. } => "C040",
            Self::Eval { .. } => "EXPR_EVAL",
        }
    }

    /// Character offset of a parse error.
    pub fn offset(&self) -> Option<usize> {
        match self {
            Self::Syntax { offset, .. }
            | Self::UnknownFunction { offset, .. }
            | Self::TooDeep { offset } => Some(*offset),
            Self::Eval { .. } => None,
        }
    }
}

pub(crate) fn eval_err(message: impl Into<String>) -> ExprError {
    ExprError::Eval {
        message: message.into(),
    }
}
