//! The `.iter` workflow language: lexer → parser → AST → compiler → [`ir`].
//!
//! Owns the grammar of upstream Iterion v1 and its diagnostics (codes,
//! spans, hints). Does no IO beyond what its callers hand it as text, and
//! knows nothing of drivers or stores.

pub mod ir;
