//! The cross-backend integration tests, one module per crate under test:
//! `agent` (the claw loop, the in-box runner and the Claude Code CLI on the
//! host and in containers behind the real egress proxy), `readback` (the
//! ADR-143 drain through the real engines into both stores), `runtime`
//! (real workflows on the host and in containers, against a run store) and
//! `studio` (the page and its JSON API over a real SQLite store, raw HTTP).
//! Backends come from `scripts/test.sh`; a missing one fails.

mod agent;
mod readback;
mod runtime;
mod studio;
