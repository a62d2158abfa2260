//! Cloud mode of iterion (issue 13): runs queued on NATS JetStream and
//! executed by a fleet of `iterion runner` processes on the PostgreSQL
//! store.
//!
//! What it owns: the cloud settings and their variables ([`config`]), the
//! queue message ([`message`]), the streams, consumer and KV bucket and the
//! refusal of an incompatible one ([`topology`]), the per-run lease in the
//! KV bucket ([`lease`]), what a finished delivery does to its message
//! ([`disposition`], reading the failure code's disposition from the one
//! core table), what a runner lets a queued run ask for ([`policy`]: the
//! trust cap, no host runs), the runner loop ([`runner`]), submitting ([`submit`]) and
//! cancelling ([`cancel`]).
//!
//! What it does not: execute a run (the runner hands each claimed run to a
//! [`runner::RunExecutor`], which the CLI implements with the very engine
//! and sandbox path of `iterion run`), store anything but through the
//! [`iterion_core::RunStore`] seam, or decide a run's status (the engine
//! does). Only what NATS server 2.9 serves is used: no stream metadata,
//! compression, subject transforms, multi-filter consumers, per-message
//! TTLs or consumer pauses (all 2.10+).

pub mod cancel;
pub mod config;
pub mod disposition;
mod error;
pub mod lease;
pub mod message;
pub mod policy;
pub mod runner;
pub mod submit;
pub mod topology;

pub use config::CloudSettings;
pub use error::QueueError;
pub use topology::Queue;
