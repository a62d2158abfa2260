//! Integration tests of the embedded store: the shared conformance suite
//! plus the bad inputs only a file-backed store has.

#![allow(clippy::expect_used, clippy::unwrap_used)] // test code: a failed expectation is the assertion

mod bad_input;
mod conformance;
mod private;
