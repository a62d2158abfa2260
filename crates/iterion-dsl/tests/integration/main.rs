//! Integration tests of the `.iter` language: fixtures (valid files compile
//! clean, each invalid file raises its code) with insta snapshots of the
//! human and JSON renderings, fuzzing of lexer+parser+rendering, a 5 MB
//! input, and hostile inputs bounded in diagnostics, output and allocation.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fixtures;
mod fuzz;
mod hostile;
mod hostile_inputs;
mod large;
mod ported;
mod upstream_corpus;
