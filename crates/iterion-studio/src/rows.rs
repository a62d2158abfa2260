//! The runs list's rows (a run, its sandbox mode once decided, its times
//! for humans) and the drain line of a run's files: what the server-side
//! pages and the live streams both render, in one place neither imports
//! the other for.

use std::fmt::Write as _;

use iterion_core::RunId;
use iterion_core::store::RunRecord;
use iterion_core::view::{FilesView, RunView, human_duration, human_time, run_duration_ms};
use serde::Serialize;

use crate::state::AppState;

/// Events read to find a run's sandbox mode (it is decided early).
const MODE_EVENTS: usize = 64;

/// One row of the runs list.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct RunRow {
    /// The run, as `iterion runs --json` shows it.
    pub run: RunView,
    /// Its sandbox mode, once decided.
    pub mode: Option<String>,
    /// When it started, for humans.
    pub started: String,
    /// How long it took, for humans (`-` while it runs).
    pub duration: String,
}

/// The rows of `runs`, each with its mode.
pub(crate) async fn rows(state: &AppState, runs: &[RunRecord]) -> Vec<RunRow> {
    let mut out = Vec::with_capacity(runs.len());
    for r in runs {
        let (started, duration) = row_times(r);
        out.push(RunRow {
            run: RunView::of(r),
            mode: mode_of(state, &r.id).await,
            started,
            duration,
        });
    }
    out
}

async fn mode_of(state: &AppState, run: &RunId) -> Option<String> {
    if let Ok(cache) = state.modes.lock()
        && let Some(m) = cache.get(run)
    {
        return m.clone();
    }
    let events = state.store.events_after(run, 0, MODE_EVENTS).await.ok()?;
    let card = crate::decision::decision(&events);
    if card.verdict() != crate::decision::Verdict::Undecided
        && let Ok(mut cache) = state.modes.lock()
    {
        // Bounded: a store with more runs than this re-reads a few.
        if cache.len() >= 50_000 {
            cache.clear();
        }
        cache.insert(run.clone(), card.mode.clone());
    }
    card.mode
}

/// Human spellings of a run's start and duration, for its row.
pub(crate) fn row_times(r: &RunRecord) -> (String, String) {
    (
        human_time(r.created_at),
        run_duration_ms(r).map_or_else(|| "-".to_owned(), human_duration),
    )
}

/// The drain line of a run's files, as `iterion files` words it.
pub(crate) fn drain_text(files: &FilesView) -> String {
    let Some(d) = &files.drain else {
        return "drain: none recorded".to_owned();
    };
    let mut s = format!("drain: {}", d.status.as_str());
    if let Some(r) = &d.reason {
        let _ = write!(s, " ({r})");
    }
    if !d.declined.is_empty() {
        let _ = write!(s, "; declined: {}", d.declined.join(", "));
    }
    if d.stale {
        s.push_str("; stale: what is stored may be out of date");
    }
    s
}
