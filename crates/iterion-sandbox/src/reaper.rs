//! The one fail-safe reaper predicate shared by every driver's reaper
//! (facts §5.5, docs/reference/SPEC.md §4): liveness first; only an empty run id,
//! a terminal status or a confirmed-absent run reaps; any doubt keeps.
//!
//! CONTRACT: keep these types and [`reapable`]'s signature.
//!
//! [`this_process_owner`] is the one impure function here: it reads
//! `/proc` so every driver writes the same owner on what it creates.

use iterion_core::RunStatus;
use iterion_core::store::RunOwner;

/// The process running this code as a [`RunOwner`] (pid, its `/proc`
/// start time, the kernel's host name), computed once; `None` when `/proc`
/// cannot say (then drivers write no owner, and the reaper falls back to
/// the store alone).
pub fn this_process_owner() -> Option<RunOwner> {
    static OWNER: std::sync::OnceLock<Option<RunOwner>> = std::sync::OnceLock::new();
    OWNER
        .get_or_init(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
            let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
            // Fields are counted after the last ')' (the command may hold
            // spaces and parentheses); the start time is field 22.
            let start = stat.rsplit_once(')')?.1.split_whitespace().nth(19)?;
            Some(RunOwner {
                host: host.trim().to_owned(),
                pid: std::process::id(),
                start_time: start.parse().ok()?,
            })
        })
        .clone()
}

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

/// The whole reaper is off under `ITERION_SANDBOX_OVERRIDE=none`: the
/// runner is then itself the boundary and spawns no sibling (seed, guards).
pub fn reaper_enabled(sandbox_override: Option<&str>) -> bool {
    !sandbox_override.is_some_and(|v| v.trim().eq_ignore_ascii_case("none"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_process_is_its_own_owner() {
        let me = super::this_process_owner().expect("linux /proc");
        assert_eq!(me.pid, std::process::id());
        assert!(!me.host.is_empty());
        assert_eq!(RunOwner::decode(&me.encode()), Some(me));
    }

    #[test]
    fn reaper_off_under_override_none() {
        assert!(!super::reaper_enabled(Some("none")));
        assert!(!super::reaper_enabled(Some(" NONE ")));
        assert!(super::reaper_enabled(Some("auto")));
        assert!(super::reaper_enabled(Some("")));
        assert!(super::reaper_enabled(None));
    }

    use super::*;
    use proptest::prelude::*;

    #[test]
    fn every_row_of_the_predicate() {
        use LeaseState::*;
        use RunLookup::*;
        let rows = [
            ("", Held, Error, true),
            ("r", Held, Absent, false),
            ("r", Held, Found(RunStatus::Finished), false),
            ("r", CheckFailed, Absent, false),
            ("r", NotHeld, Absent, true),
            ("r", NotHeld, Error, false),
            ("r", NotHeld, Found(RunStatus::Failed), true),
            ("r", NotHeld, Found(RunStatus::FailedResumable), true),
            ("r", NotHeld, Found(RunStatus::Cancelled), true),
            ("r", NotHeld, Found(RunStatus::Running), false),
            ("r", NotHeld, Found(RunStatus::PausedWaitingHuman), false),
            ("r", NotHeld, Found(RunStatus::Queued), false),
        ];
        for (id, lease, lookup, reaps) in rows {
            let verdict = reapable(id, lease, lookup);
            assert_eq!(
                matches!(verdict, ReapVerdict::Reap(_)),
                reaps,
                "{id:?} {lease:?} {lookup:?} -> {verdict:?}"
            );
        }
    }

    fn lease() -> impl Strategy<Value = LeaseState> {
        prop::sample::select(vec![
            LeaseState::Held,
            LeaseState::NotHeld,
            LeaseState::CheckFailed,
        ])
    }

    fn lookup() -> impl Strategy<Value = RunLookup> {
        prop_oneof![
            Just(RunLookup::Absent),
            Just(RunLookup::Error),
            prop::sample::select(RunStatus::ALL.to_vec()).prop_map(RunLookup::Found),
        ]
    }

    proptest! {
        /// Any doubt keeps: a reap needs an empty id, or no lease plus a
        /// terminal status or a confirmed-absent run.
        #[test]
        fn reaps_only_on_certainty(id in "[a-z0-9-]{0,8}", l in lease(), k in lookup()) {
            if let ReapVerdict::Reap(_) = reapable(&id, l, k) {
                let certain = id.is_empty()
                    || (l == LeaseState::NotHeld
                        && matches!(k, RunLookup::Absent)
                        || matches!(k, RunLookup::Found(s) if s.is_terminal() && l == LeaseState::NotHeld));
                prop_assert!(certain);
            }
        }

        #[test]
        fn held_or_unknown_lease_never_reaps_a_named_run(
            id in "[a-z0-9]{1,8}",
            l in prop::sample::select(vec![LeaseState::Held, LeaseState::CheckFailed]),
            k in lookup(),
        ) {
            prop_assert!(matches!(reapable(&id, l, k), ReapVerdict::Keep(_)));
        }
    }
}
