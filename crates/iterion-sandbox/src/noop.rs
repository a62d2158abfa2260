//! The noop driver: host passthrough for runs that are not sandboxed
//! (never for an active mode). Filled in by the run-engine work.
