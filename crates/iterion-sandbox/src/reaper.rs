//! The one fail-safe reaper predicate shared by every driver's reaper
//! (facts §5.5, shared/SPEC.md §4): liveness first; only an empty run id,
//! a terminal status or a confirmed-absent run reaps; any doubt keeps.
//!
//! CONTRACT: keep these types and [`reapable`]'s signature.

use iterion_core::RunStatus;

/// What the lease (the owner's liveness) says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseState {
    /// The owner is alive.
    Held,
    /// The owner is provably gone (or there is none).
    NotHeld,
    /// The check itself failed.
    CheckFailed,
}

/// What the store says about the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunLookup {
    /// The run exists with this status.
    Found(RunStatus),
    /// The store confirms no such run.
    Absent,
    /// The store could not answer (transient).
    Error,
}

/// Verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReapVerdict {
    /// Remove the resource.
    Reap(&'static str),
    /// Keep it.
    Keep(&'static str),
}

/// The predicate.
pub fn reapable(run_id: &str, lease: LeaseState, lookup: RunLookup) -> ReapVerdict {
    if run_id.is_empty() {
        return ReapVerdict::Reap("empty run id");
    }
    match (lease, lookup) {
        (LeaseState::Held, _) => ReapVerdict::Keep("lease held"),
        (LeaseState::CheckFailed, _) => ReapVerdict::Keep("lease check errored"),
        (LeaseState::NotHeld, RunLookup::Absent) => ReapVerdict::Reap("run absent"),
        (LeaseState::NotHeld, RunLookup::Error) => ReapVerdict::Keep("transient store error"),
        (LeaseState::NotHeld, RunLookup::Found(s)) if s.is_terminal() => {
            ReapVerdict::Reap("run terminal")
        }
        (LeaseState::NotHeld, RunLookup::Found(_)) => ReapVerdict::Keep("run still active"),
    }
}
