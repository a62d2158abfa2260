//! The run engine of iterion.
//!
//! Owns one run's life: admission (what this engine can execute, then the
//! sandbox policy's verdict), the `queued → running → terminal` state
//! machine under compare-and-set, boot and teardown through a
//! [`SandboxBooter`], the graph walk (routers, parallel branches and their
//! joins, loops, foreach: `walk`, `branches`, `graph`) with its resumable
//! [`progress`], human nodes and pause ([`human`]), [`resume`], tool-node
//! execution with bounded output, run and node bounds (timeouts, budgets:
//! [`bounds`]), the engine's side of the agent seam (`agents`), the single
//! event writer of a run, and the reaper's orchestration (lease + store + the
//! one predicate).
//!
//! It does not decide which sandbox a run gets (the booter does, with the
//! policy of `iterion-sandbox`), talk to a container engine (drivers do),
//! or parse `.iter` files (`iterion-dsl` does).
//!
//! Wiring a real sandbox is one type: implement [`SandboxBooter`] —
//! `admit` returns the policy's verdict (e.g. `untrusted_without_sandbox`),
//! `boot` resolves the mode, selects the driver (with a [`RunObserver`] so
//! driver lines land in the run log), starts the proxy, prepares and
//! starts, and returns [`Booted::Sandbox`] (or [`Booted::Host`] for an
//! opt-out or a degraded `auto`, after emitting `sandbox_skipped`); a
//! refusal is a [`BootError::Refused`] carrying its failure code;
//! `teardown` drains and cleans up. CLI flags reach it through
//! [`BootFlags`]. The engine does everything else.

pub mod admission;
pub mod agents;
pub mod boot;
pub mod bounds;
mod branches;
pub mod compute;
pub mod engine;
pub mod events;
mod exec;
pub mod graph;
pub mod human;
pub mod owner;
pub mod procs;
pub mod progress;
pub mod reap;
pub mod redact;
pub mod resume;
pub mod routing;
pub mod runfiles;
pub mod sandbox_boot;
pub mod secrets;
pub mod template;
mod tool;
mod walk;

pub use boot::{
    AdmissionVerdict, BootContext, BootError, BootFlags, Booted, ExecEgress, ExecSecrets,
    HostBooter, SandboxBooter,
};
pub use engine::{Engine, EngineSettings, RunOptions, RunOutcome, RuntimeError};
pub use events::{Emitter, EventTap, RunObserver};
pub use sandbox_boot::{DriverCatalog, PolicyBooter, SandboxFlags};
