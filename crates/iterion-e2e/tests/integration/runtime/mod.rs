//! Integration tests of the run engine: real workflows on the host through
//! the noop driver, against a run store.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod agents;
mod booting;
mod bounds;
mod decided;
mod docker;
mod dsl;
mod graph;
mod memstore;
mod reaper;
mod resume;
mod runs;
mod support;
