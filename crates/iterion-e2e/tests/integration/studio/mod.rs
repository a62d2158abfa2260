//! The studio over a real SQLite store on a real loopback socket, driven
//! with raw HTTP/1.1 (no browser: those tests run the real `iterion`
//! binary, in `iterion-cli`'s `studio_e2e`).

#![allow(clippy::expect_used, clippy::unwrap_used)] // test scaffolding panics by design

mod http;
mod support;
