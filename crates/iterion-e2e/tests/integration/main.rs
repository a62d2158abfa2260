//! The cross-backend integration tests, one module per crate under test:
//! `readback` (the ADR-143 drain through the real engines into both
//! stores) and `runtime` (real workflows on the host and in containers,
//! against a run store). Backends come from `scripts/test.sh`; a missing
//! one fails.

mod readback;
mod runtime;
