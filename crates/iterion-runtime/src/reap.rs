//! Reaper orchestration: for every resource a driver labelled, ask the
//! lease, ask the store, and let the one predicate
//! (`iterion_sandbox::reaper::reapable`, facts §5.5) decide. Liveness
//! first; any doubt keeps.
//!
//! The lease of a local run is its owner process: alive when the pid
//! exists and its `/proc` start time equals the recorded one; provably gone
//! when the pid is absent or belongs to a newer process; unknown (kept)
//! when the check errors or the owner lives on another host. A run whose
//! owner is provably gone while the run still says `running` is first
//! marked interrupted (`failed_resumable` + `INTERRUPTED`, event
//! `run_interrupted`), which makes it terminal and its resources reapable.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use iterion_core::driver::{ManagedResource, ResourceKind};
use iterion_core::store::{Failure, RunOwner, RunRecord, Transition};
use iterion_core::{
    Driver, DriverName, EventDraft, EventKind, FailureCode, RunId, RunStatus, RunStore,
};
pub use iterion_sandbox::reaper::LeaseState;
use iterion_sandbox::reaper::{ReapVerdict, RunLookup, reapable};

use crate::owner;

/// What the reaper decided about one resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReapDecision {
    /// Driver that owns it.
    pub driver: DriverName,
    /// The resource.
    pub resource: ManagedResource,
    /// Lease answer.
    pub lease: LeaseState,
    /// Store answer (after any interruption mark).
    pub lookup: RunLookup,
    /// The predicate's verdict.
    pub verdict: ReapVerdict,
    /// The run was marked interrupted by this pass (or would be, dry run).
    pub interrupted: bool,
    /// The resource was removed (false in a dry run).
    pub removed: bool,
    /// An error of the interruption mark or the removal.
    pub error: Option<String>,
}

impl ReapDecision {
    /// The decision as one JSON object (`iterion sandbox reap --json`):
    /// `driver`, `kind`, `name`, `run_id`, `lease`, `run`, `action`
    /// (`reap`/`keep`), `reason`, `interrupted`, `removed`, `error`.
    pub fn to_json(&self) -> serde_json::Value {
        let lease = match self.lease {
            LeaseState::Held => "held",
            LeaseState::NotHeld => "not_held",
            LeaseState::CheckFailed => "check_failed",
        };
        let run = match self.lookup {
            RunLookup::Found(status) => status.as_str().to_owned(),
            RunLookup::Absent => "absent".to_owned(),
            RunLookup::Error => "error".to_owned(),
        };
        let (action, reason) = match self.verdict {
            ReapVerdict::Reap(r) => ("reap", r),
            ReapVerdict::Keep(r) => ("keep", r),
        };
        serde_json::json!({
            "driver": self.driver.as_str(),
            "kind": self.resource.kind,
            "name": self.resource.name,
            "run_id": self.resource.run_id,
            "lease": lease,
            "run": run,
            "action": action,
            "reason": reason,
            "interrupted": self.interrupted,
            "removed": self.removed,
            "error": self.error,
        })
    }
}

/// Lease of the process that labelled a resource: held while it lives
/// (a zombie, already SIGKILLed but not yet waited for, does not count).
fn resource_lease(resource: &ManagedResource) -> LeaseState {
    match &resource.owner {
        None => LeaseState::NotHeld,
        Some(o) => match owner_lease(o) {
            LeaseState::Held if owner::is_zombie(o.pid) => LeaseState::NotHeld,
            lease => lease,
        },
    }
}

/// Lease of a recorded owner on this host.
pub fn owner_lease(owner: &RunOwner) -> LeaseState {
    match owner::hostname() {
        Ok(host) if host == owner.host => {}
        // Another host's process cannot be checked from here: doubt.
        Ok(_) | Err(_) => return LeaseState::CheckFailed,
    }
    match owner::proc_start_time(owner.pid) {
        Ok(Some(start)) if start == owner.start_time => LeaseState::Held,
        // The pid now belongs to a newer process: the owner is gone.
        Ok(Some(_)) | Ok(None) => LeaseState::NotHeld,
        Err(_) => LeaseState::CheckFailed,
    }
}

/// A lease that speaks before the owner record (cloud mode: the run's KV
/// lease, so a run some runner holds is kept whatever its recorded owner
/// says). `None`: no opinion, the owner record decides.
#[async_trait::async_trait]
pub trait LeaseProbe: Send + Sync {
    /// The lease of `run`, if this probe knows it.
    async fn lease(&self, run: &RunId) -> Option<LeaseState>;
}

/// One pass over every driver's managed resources.
pub async fn reap_once(
    drivers: &[Arc<dyn Driver>],
    store: &dyn RunStore,
    dry_run: bool,
) -> Vec<ReapDecision> {
    reap_once_with(drivers, store, dry_run, None).await
}

/// [`reap_once`], asking `probe` for each run's lease first (lease-first).
pub async fn reap_once_with(
    drivers: &[Arc<dyn Driver>],
    store: &dyn RunStore,
    dry_run: bool,
    probe: Option<&dyn LeaseProbe>,
) -> Vec<ReapDecision> {
    let mut decisions = Vec::new();
    for driver in drivers {
        let resources = match driver.list_managed().await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(driver = %driver.name(), code = e.code(), error = %e,
                    "listing managed resources failed; nothing reaped on this driver");
                continue;
            }
        };
        for resource in resources {
            let decision = decide(driver.as_ref(), store, resource, dry_run, probe).await;
            decisions.push(decision);
        }
    }
    decisions
}

async fn decide(
    driver: &dyn Driver,
    store: &dyn RunStore,
    resource: ManagedResource,
    dry_run: bool,
    probe: Option<&dyn LeaseProbe>,
) -> ReapDecision {
    let mut decision = judge(driver.name(), store, resource, dry_run, probe).await;
    if matches!(decision.verdict, ReapVerdict::Reap(_)) && !dry_run {
        match driver.remove_managed(&decision.resource).await {
            Ok(()) => {
                decision.removed = true;
                reaped_event(store, &decision, driver.name().as_str()).await;
            }
            Err(e) => decision.error = Some(format!("{} ({})", e, e.code())),
        }
    }
    decision
}

/// Lease, store, interruption mark and the one predicate's verdict for one
/// resource; removes nothing.
async fn judge(
    driver: DriverName,
    store: &dyn RunStore,
    resource: ManagedResource,
    dry_run: bool,
    probe: Option<&dyn LeaseProbe>,
) -> ReapDecision {
    let mut decision = ReapDecision {
        driver,
        lease: LeaseState::CheckFailed,
        lookup: RunLookup::Error,
        verdict: ReapVerdict::Keep("undecided"),
        interrupted: false,
        removed: false,
        error: None,
        resource,
    };
    let run_id = decision.resource.run_id.clone();
    if run_id.is_empty() {
        decision.lease = LeaseState::NotHeld;
        decision.verdict = reapable("", decision.lease, RunLookup::Absent);
    } else {
        let (lease, lookup, record) = match RunId::parse(run_id.as_str()) {
            // A label no run id can have: not provably absent, keep.
            Err(_) => (LeaseState::CheckFailed, RunLookup::Error, None),
            Ok(id) => {
                // Lease first: a lease the probe knows wins over the owner.
                let probed = match probe {
                    Some(p) => p.lease(&id).await,
                    None => None,
                };
                match (store.load_run(&id).await, probed) {
                    (Err(_), _) => (LeaseState::CheckFailed, RunLookup::Error, None),
                    (Ok(Some(r)), Some(lease)) => (lease, RunLookup::Found(r.status), Some(r)),
                    (Ok(None), Some(lease)) => (lease, RunLookup::Absent, None),
                    (Ok(Some(r)), None) => {
                        let lease = r.owner.as_ref().map_or(LeaseState::NotHeld, owner_lease);
                        (lease, RunLookup::Found(r.status), Some(r))
                    }
                    // Not in this store: absent only if no live process of
                    // another store still owns it (the resource's owner label).
                    (Ok(None), None) => {
                        (resource_lease(&decision.resource), RunLookup::Absent, None)
                    }
                }
            }
        };
        decision.lease = lease;
        decision.lookup = lookup;
        if let Some(record) = record
            && lease == LeaseState::NotHeld
            && record.status == RunStatus::Running
        {
            decision.interrupted = true;
            if dry_run {
                decision.lookup = RunLookup::Found(RunStatus::FailedResumable);
            } else {
                match mark_interrupted(store, &record, "owner process is gone").await {
                    Ok(status) => decision.lookup = RunLookup::Found(status),
                    Err(e) => {
                        decision.interrupted = false;
                        decision.lookup = RunLookup::Error;
                        decision.error = Some(e);
                    }
                }
            }
        }
        decision.verdict = reapable(&run_id, decision.lease, decision.lookup);
    }
    decision
}

/// `sandbox_reaped` on the run, when this store knows it.
async fn reaped_event(store: &dyn RunStore, decision: &ReapDecision, by: &str) {
    if let (Ok(id), ReapVerdict::Reap(reason)) =
        (RunId::parse(&decision.resource.run_id), &decision.verdict)
        && matches!(decision.lookup, RunLookup::Found(_))
    {
        let draft: EventDraft = EventKind::SandboxReaped {
            driver: by.to_owned(),
            resource: decision.resource.name.clone(),
            run_id: decision.resource.run_id.clone(),
            reason: (*reason).to_owned(),
        }
        .into();
        if let Err(e) = store.append_event(&id, draft, None).await {
            tracing::warn!(run = %id, error = %e, "sandbox_reaped event failed");
        }
    }
}

// The marker is the owner lease's (`crate::owner`), shared with the
// process registry without either depending on the reaper.
pub use crate::owner::{OWNER_MARKER, mark_owner};

/// The per-run directories under `roots` (children named like a run id;
/// anything else is not ours and is not listed). An unreadable marker
/// leaves the owner unknown, which keeps the directory unless this store
/// proves the run over.
fn host_dirs(roots: &[PathBuf]) -> Vec<ManagedResource> {
    let mut found = Vec::new();
    for root in roots {
        let Ok(entries) = std::fs::read_dir(root) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            // A symlink is never a run's directory, and never followed.
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            if !is_dir || RunId::parse(&name).is_err() {
                continue;
            }
            let path = entry.path();
            let owner = std::fs::read(path.join(OWNER_MARKER))
                .ok()
                .and_then(|b| serde_json::from_slice::<RunOwner>(&b).ok());
            found.push(ManagedResource {
                kind: ResourceKind::HostDir,
                id: path.to_string_lossy().into_owned(),
                name: path.to_string_lossy().into_owned(),
                run_id: name,
                owner,
            });
        }
    }
    found
}

/// One pass over the per-run host directories under `roots` (the state
/// dirs, the file-secret dirs): the same lease, store and predicate as the
/// engine resources, so only a run that is provably over loses its
/// directory (issue 19 #7: a TERMed or killed run's directories, file
/// secrets included, were never removed by anyone).
pub async fn reap_host_dirs(
    roots: &[PathBuf],
    store: &dyn RunStore,
    dry_run: bool,
) -> Vec<ReapDecision> {
    reap_host_dirs_with(roots, store, dry_run, None).await
}

/// [`reap_host_dirs`], lease-first with `probe`.
pub async fn reap_host_dirs_with(
    roots: &[PathBuf],
    store: &dyn RunStore,
    dry_run: bool,
    probe: Option<&dyn LeaseProbe>,
) -> Vec<ReapDecision> {
    let mut decisions = Vec::new();
    for dir in host_dirs(roots) {
        // No marker: nothing says whether another store's live run owns
        // it; only this store's proof of a terminal run may reap it.
        let unowned = dir.owner.is_none();
        let mut decision = judge(DriverName::Noop, store, dir, dry_run, probe).await;
        // A live process's directory for a run this store does not know is
        // another store's running run: host dirs carry no store label, and
        // a reaper never judges (nor lists) another store's live resources.
        if decision.lease == LeaseState::Held && !matches!(decision.lookup, RunLookup::Found(_)) {
            continue;
        }
        if unowned && !matches!(decision.lookup, RunLookup::Found(_)) {
            decision.lease = LeaseState::CheckFailed;
            decision.verdict = reapable(&decision.resource.run_id, decision.lease, decision.lookup);
        }
        if matches!(decision.verdict, ReapVerdict::Reap(_)) && !dry_run {
            // A killed run's run-files tmpfs is detached first, and what
            // it left running on the host (MCP servers) is ended.
            crate::runfiles::release(&Path::new(&decision.resource.id).join("artifact-files"));
            crate::procs::release(Path::new(&decision.resource.id), &decision.resource.run_id);
            match std::fs::remove_dir_all(&decision.resource.id) {
                Ok(()) => {
                    decision.removed = true;
                    reaped_event(store, &decision, "host").await;
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => decision.removed = true,
                Err(e) => decision.error = Some(format!("remove {}: {e}", decision.resource.id)),
            }
        }
        decisions.push(decision);
    }
    decisions
}

/// The period of a long-lived process's reaper (facts §4, §5.5: upstream's
/// Kubernetes orphan reaper): Go duration syntax, `0` scans once at boot.
pub const REAP_INTERVAL_ENV: &str = "ITERION_SANDBOX_REAP_INTERVAL";
/// [`REAP_INTERVAL_ENV`] when unset or empty.
pub const DEFAULT_REAP_INTERVAL: Duration = Duration::from_secs(60);
/// The bound of one pass: a hung engine or API server never holds the
/// next tick (nor the end of the process) for long.
pub const REAP_PASS_BOUND: Duration = Duration::from_secs(30);

/// A reap interval no duration parser accepts. Upstream falls back to the
/// default; here an operator's typo is said, never silently replaced.
#[derive(Debug, thiserror::Error)]
#[error(
    "{REAP_INTERVAL_ENV}={value:?} is not a duration (Go syntax such as 60s or 5m; 0 scans once at boot)"
)]
pub struct ReapIntervalError {
    /// The value as written.
    pub value: String,
}

impl ReapIntervalError {
    /// Stable code.
    pub fn code(&self) -> &'static str {
        "SANDBOX_REAP_INTERVAL_INVALID"
    }
}

/// The period [`REAP_INTERVAL_ENV`] asks for in `env`: `Some(period)`, or
/// `None` for a boot scan only (`0`).
pub fn reap_interval(
    env: &BTreeMap<String, String>,
) -> Result<Option<Duration>, ReapIntervalError> {
    let Some(raw) = env.get(REAP_INTERVAL_ENV).filter(|v| !v.trim().is_empty()) else {
        return Ok(Some(DEFAULT_REAP_INTERVAL));
    };
    match iterion_core::duration::parse_go_duration(raw) {
        Some(d) if d.is_zero() => Ok(None),
        Some(d) => Ok(Some(d)),
        None => Err(ReapIntervalError { value: raw.clone() }),
    }
}

/// What a ticking reaper passes over.
#[derive(Clone)]
pub struct ReapTargets {
    /// The drivers whose labelled resources are judged (Docker, Podman,
    /// Kubernetes pods, Secrets and NetworkPolicies alike).
    pub drivers: Vec<Arc<dyn Driver>>,
    /// The store that says whether a run is over.
    pub store: Arc<dyn RunStore>,
    /// Roots of the per-run host directories.
    pub host_roots: Vec<PathBuf>,
}

/// The reaper of a long-lived process: one pass at once (the boot scan,
/// which `shutdown` does not cut short: a short run still collects the
/// orphans of earlier ones), then one every `every` (`None`: the boot scan
/// only) until `shutdown`.
/// Each pass is the same [`reap_once`] and [`reap_host_dirs`] as
/// `iterion sandbox reap`, bounded by [`REAP_PASS_BOUND`]. The caller
/// decides whether it runs at all (`reaper_enabled`: off under
/// `ITERION_SANDBOX_OVERRIDE=none`).
pub async fn reap_on_a_ticker(
    targets: ReapTargets,
    every: Option<Duration>,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let pass = || async {
        reap_once(&targets.drivers, targets.store.as_ref(), false).await;
        reap_host_dirs(&targets.host_roots, targets.store.as_ref(), false).await;
    };
    if tokio::time::timeout(REAP_PASS_BOUND, pass()).await.is_err() {
        tracing::warn!("the boot reaper pass took over {REAP_PASS_BOUND:?}; abandoned");
    }
    let Some(every) = every else {
        return;
    };
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = shutdown.cancelled() => return,
        }
        tokio::select! {
            r = tokio::time::timeout(REAP_PASS_BOUND, pass()) => if r.is_err() {
                tracing::warn!("a reaper pass took over {REAP_PASS_BOUND:?}; abandoned");
            },
            () = shutdown.cancelled() => return,
        }
    }
}

/// Mark a running run whose owner is gone as interrupted (the reaper, and a
/// cloud runner taking over a run whose holder's lease expired). Returns
/// the status the store now holds (a concurrent finish wins the CAS, and
/// its status is what the caller then reads).
pub async fn mark_interrupted(
    store: &dyn RunStore,
    record: &RunRecord,
    reason: &str,
) -> Result<RunStatus, String> {
    let reason = reason.to_owned();
    let draft: EventDraft = EventKind::RunInterrupted {
        reason: reason.clone(),
    }
    .into();
    let transition = Transition {
        from: RunStatus::Running,
        expected_revision: Some(record.revision),
        to: FailureCode::Interrupted.status(),
        failure: Some(Failure::new(FailureCode::Interrupted, reason)),
    };
    match store.transition(&record.id, transition).await {
        Ok(r) => {
            if let Err(e) = store.append_event(&record.id, draft, None).await {
                tracing::warn!(run = %record.id, error = %e, "run_interrupted event failed");
            }
            Ok(r.status)
        }
        Err(e) => match store.load_run(&record.id).await {
            Ok(Some(r)) if r.status != RunStatus::Running => Ok(r.status),
            _ => Err(format!(
                "marking run interrupted failed: {e} ({})",
                e.code()
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reap_interval_is_parsed_or_refused_by_name() {
        let env = |v: Option<&str>| -> BTreeMap<String, String> {
            v.map(|v| (REAP_INTERVAL_ENV.to_owned(), v.to_owned()))
                .into_iter()
                .collect()
        };
        assert_eq!(
            reap_interval(&env(None)).unwrap(),
            Some(DEFAULT_REAP_INTERVAL)
        );
        assert_eq!(
            reap_interval(&env(Some(" "))).unwrap(),
            Some(DEFAULT_REAP_INTERVAL)
        );
        assert_eq!(
            reap_interval(&env(Some("0"))).unwrap(),
            None,
            "boot scan only"
        );
        assert_eq!(reap_interval(&env(Some("0s"))).unwrap(), None);
        assert_eq!(
            reap_interval(&env(Some("1m30s"))).unwrap(),
            Some(Duration::from_secs(90))
        );
        for bad in ["60", "-5s", "soon", "5 m"] {
            let e = reap_interval(&env(Some(bad))).unwrap_err();
            assert_eq!(e.code(), "SANDBOX_REAP_INTERVAL_INVALID");
            assert!(e.to_string().contains(REAP_INTERVAL_ENV), "{e}");
        }
    }

    #[test]
    fn lease_of_self_other_host_and_ghost() {
        let me = owner::current_owner().expect("owner");
        assert_eq!(owner_lease(&me), LeaseState::Held);
        let elsewhere = RunOwner {
            host: format!("{}-elsewhere", me.host),
            ..me.clone()
        };
        assert_eq!(owner_lease(&elsewhere), LeaseState::CheckFailed);
        let ghost = RunOwner {
            pid: 999_999_999,
            ..me.clone()
        };
        assert_eq!(owner_lease(&ghost), LeaseState::NotHeld);
        let recycled = RunOwner {
            start_time: me.start_time.wrapping_add(7),
            ..me
        };
        assert_eq!(owner_lease(&recycled), LeaseState::NotHeld);
    }
}
