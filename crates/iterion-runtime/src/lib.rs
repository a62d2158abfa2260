//! The run engine of iterion.
//!
//! Owns one run's life: admission (what this engine can execute, then the
//! sandbox policy's verdict), the `queued → running → terminal` state
//! machine under compare-and-set, boot and teardown through a
//! [`SandboxBooter`], tool-node execution with bounded output, edge
//! evaluation and loop bounds, the single event writer of a run, and the
//! reaper's orchestration (lease + store + the one predicate).
//!
//! It does not decide which sandbox a run gets (the booter does, with the
//! policy of `iterion-sandbox`), talk to a container engine (drivers do),
//! or parse `.iter` files (`iterion-dsl` does).

pub mod admission;
pub mod boot;
pub mod engine;
pub mod events;
pub mod owner;
pub mod reap;
pub mod routing;
pub mod template;

pub use boot::{
    AdmissionVerdict, BootContext, BootError, BootFlags, Booted, HostBooter, SandboxBooter,
};
pub use engine::{Engine, EngineSettings, RunOptions, RunOutcome, RuntimeError};
pub use events::{Emitter, EventTap, RunObserver};
