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
//! `admit` returns the [`Admitted`] verdict (the policy booter decides the
//! run's sandbox there, once: `iterion_sandbox::decision`), `boot` executes
//! what was admitted (with a [`RunObserver`] so driver lines land in the
//! run log) and returns [`Booted::Sandbox`] (or [`Booted::Host`] for an
//! opt-out or a degraded `auto`); a refusal is a [`BootError`] the one
//! classifier (`iterion_sandbox::classify`) turns into a status and code;
//! `teardown` drains and cleans up. CLI flags reach it as typed
//! [`SandboxFlags`]. The engine does everything else.

pub mod admission;
pub mod agents;
pub mod ask_user;
pub mod attachments;
pub mod boot;
pub mod bounds;
mod branches;
pub mod compute;
pub mod engine;
pub mod events;
mod exec;
pub mod graph;
pub mod hostgit;
pub mod human;
pub mod interrupt;
pub mod owner;
pub mod procs;
pub mod progress;
pub mod reap;
pub mod redact;
pub mod resume;
pub mod routing;
pub mod runfiles;
pub mod sandbox_boot;
pub mod secret_egress;
pub mod secrets;
mod settings;
pub mod template;
mod tool;
pub mod vars;
mod walk;
mod workspace_copy;
pub mod worktree;

pub use boot::{
    Admitted, BootContext, BootError, Booted, ExecEgress, ExecSecrets, HostBooter, Keep,
    SandboxBooter,
};
pub use engine::{Engine, EngineSettings, RunOptions, RunOutcome, RuntimeError};
pub use events::{Emitter, EventTap, RunObserver};
pub use interrupt::Interrupt;
pub use iterion_sandbox::admission::AdmissionVerdict;
pub use iterion_sandbox::precedence::SandboxFlags;
pub use sandbox_boot::{Decided, HostDrivers, PolicyBooter, RunRequest, SandboxHost};
