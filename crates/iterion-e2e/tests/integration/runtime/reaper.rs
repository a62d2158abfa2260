//! Reaper verdicts with a fake driver's resources against the store.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use iterion_core::driver::{EngineInfo, ManagedResource, ResourceKind, RunInfo};
use iterion_core::store::{NewRun, RunOwner, Transition};
use iterion_core::{
    Capabilities, Driver, DriverError, DriverName, DriverObserver, FailureCode, LaunchPlan,
    Prepared, RunId, RunStatus, RunStore, SandboxRun, Trust,
};
use iterion_runtime::reap::reap_once;
use iterion_sandbox::reaper::{LeaseState, ReapVerdict, RunLookup};

#[derive(Default)]
struct FakeDriver {
    resources: Vec<ManagedResource>,
    removed: Mutex<Vec<String>>,
}

#[async_trait]
impl Driver for FakeDriver {
    fn name(&self) -> DriverName {
        DriverName::Docker
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }
    async fn prepare(
        &self,
        _: &LaunchPlan,
        _: &dyn DriverObserver,
    ) -> Result<Prepared, DriverError> {
        unimplemented!()
    }
    async fn start(
        &self,
        _: Prepared,
        _: &RunInfo,
        _: &dyn DriverObserver,
    ) -> Result<Box<dyn SandboxRun>, DriverError> {
        unimplemented!()
    }
    async fn ping(&self) -> Result<EngineInfo, DriverError> {
        unimplemented!()
    }
    async fn image_present(&self, _: &str) -> Result<bool, DriverError> {
        Ok(false)
    }
    async fn list_managed(&self) -> Result<Vec<ManagedResource>, DriverError> {
        Ok(self.resources.clone())
    }
    async fn remove_managed(&self, r: &ManagedResource) -> Result<(), DriverError> {
        self.removed.lock().unwrap().push(r.name.clone());
        Ok(())
    }
}

fn container(name: &str, run_id: &str) -> ManagedResource {
    ManagedResource {
        kind: ResourceKind::Container,
        id: format!("id-{name}"),
        name: name.into(),
        run_id: run_id.into(),
        owner: None,
    }
}

async fn running_run(store: &dyn RunStore, id: &str, owner: RunOwner) -> RunId {
    let id = RunId::parse(id).unwrap();
    let rec = store
        .create_run(NewRun {
            id: id.clone(),
            workflow: "w".into(),
            file: "w.iter".into(),
            trust: Trust::Trusted,
            owner: Some(owner),
        })
        .await
        .unwrap();
    store
        .transition(
            &id,
            Transition {
                from: RunStatus::Queued,
                expected_revision: Some(rec.revision),
                to: RunStatus::Running,
                failure: None,
            },
        )
        .await
        .unwrap();
    id
}

#[tokio::test]
async fn gone_owner_is_interrupted_then_reaped_live_owner_kept() {
    let (store, _dir) = crate::runtime::support::store();
    let me = iterion_runtime::owner::current_owner().unwrap();
    let ghost = RunOwner {
        pid: 999_999_999, // above any pid_max: provably no such process
        ..me.clone()
    };
    let dead = running_run(store.as_ref(), "dead-run", ghost).await;
    let alive = running_run(store.as_ref(), "live-run", me.clone()).await;
    let recycled = running_run(
        store.as_ref(),
        "recycled-run",
        RunOwner {
            start_time: me.start_time + 1, // our pid, another process's start
            ..me.clone()
        },
    )
    .await;
    let driver = Arc::new(FakeDriver {
        resources: vec![
            container("c-dead", dead.as_str()),
            container("c-live", alive.as_str()),
            container("c-recycled", recycled.as_str()),
            container("c-absent", "never-existed"),
            container("c-unlabelled", ""),
            container("c-bad-label", "Not A Run Id"),
        ],
        ..FakeDriver::default()
    });
    let drivers: Vec<Arc<dyn Driver>> = vec![driver.clone()];

    // Dry run: decisions, no side effects.
    let dry = reap_once(&drivers, store.as_ref(), true).await;
    assert!(driver.removed.lock().unwrap().is_empty());
    assert!(dry[0].interrupted && matches!(dry[0].verdict, ReapVerdict::Reap(_)));
    let rec = store.load_run(&dead).await.unwrap().unwrap();
    assert_eq!(rec.status, RunStatus::Running);

    let decisions = reap_once(&drivers, store.as_ref(), false).await;
    let by_name = |n: &str| decisions.iter().find(|d| d.resource.name == n).unwrap();

    let d = by_name("c-dead");
    assert_eq!(d.lease, LeaseState::NotHeld);
    assert!(d.interrupted);
    assert_eq!(d.lookup, RunLookup::Found(RunStatus::FailedResumable));
    assert_eq!(d.verdict, ReapVerdict::Reap("run terminal"));
    let rec = store.load_run(&dead).await.unwrap().unwrap();
    assert_eq!(rec.status, RunStatus::FailedResumable);
    assert_eq!(rec.failure.unwrap().code, FailureCode::Interrupted);
    let kinds: Vec<String> = store
        .events_after(&dead, 0, 0)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(kinds, ["run_interrupted", "sandbox_reaped"]);

    assert_eq!(
        d.to_json(),
        serde_json::json!({
            "driver": "docker", "kind": "container", "name": "c-dead",
            "run_id": "dead-run", "lease": "not_held", "run": "failed_resumable",
            "action": "reap", "reason": "run terminal", "interrupted": true,
            "removed": true, "error": null,
        })
    );

    let l = by_name("c-live");
    assert_eq!(l.lease, LeaseState::Held);
    assert_eq!(l.verdict, ReapVerdict::Keep("lease held"));
    assert_eq!(
        store.load_run(&alive).await.unwrap().unwrap().status,
        RunStatus::Running
    );

    assert!(by_name("c-recycled").interrupted);
    assert_eq!(by_name("c-absent").verdict, ReapVerdict::Reap("run absent"));
    assert_eq!(
        by_name("c-unlabelled").verdict,
        ReapVerdict::Reap("empty run id")
    );
    assert!(matches!(
        by_name("c-bad-label").verdict,
        ReapVerdict::Keep(_)
    ));

    let mut removed = driver.removed.lock().unwrap().clone();
    removed.sort();
    assert_eq!(
        removed,
        ["c-absent", "c-dead", "c-recycled", "c-unlabelled"]
    );
}

/// A resource of a run this store has never heard of belongs to another
/// store on the same engine (another project's `.iterion`, a test's private
/// store) when its creator labelled it: kept while that creator lives,
/// reaped once it is provably gone.
#[tokio::test]
async fn another_stores_live_run_is_kept_and_its_dead_one_reaped() {
    let (store, _dir) = crate::runtime::support::store();
    let me = iterion_runtime::owner::current_owner().unwrap();
    let owned = |name: &str, run: &str, owner: RunOwner| ManagedResource {
        owner: Some(owner),
        ..container(name, run)
    };
    let driver = Arc::new(FakeDriver {
        resources: vec![
            owned("c-other-live", "other-store-run", me.clone()),
            owned(
                "c-other-dead",
                "other-store-dead",
                RunOwner {
                    pid: 999_999_999,
                    ..me.clone()
                },
            ),
            owned(
                "c-other-host",
                "other-host-run",
                RunOwner {
                    host: format!("{}-elsewhere", me.host),
                    ..me.clone()
                },
            ),
        ],
        ..FakeDriver::default()
    });
    let drivers: Vec<Arc<dyn Driver>> = vec![driver.clone()];
    let decisions = reap_once(&drivers, store.as_ref(), false).await;
    let by_name = |n: &str| decisions.iter().find(|d| d.resource.name == n).unwrap();

    let live = by_name("c-other-live");
    assert_eq!(
        (live.lease, live.lookup),
        (LeaseState::Held, RunLookup::Absent)
    );
    assert!(matches!(live.verdict, ReapVerdict::Keep(_)));
    assert!(matches!(
        by_name("c-other-host").verdict,
        ReapVerdict::Keep(_)
    ));
    assert_eq!(
        by_name("c-other-dead").verdict,
        ReapVerdict::Reap("run absent")
    );
    assert_eq!(*driver.removed.lock().unwrap(), ["c-other-dead"]);
}

/// Per-run host directories (state, file secrets) go through the same
/// predicate (issue 19 #7): a dead or finished run's are removed, a live
/// run's and an unprovable one's are kept, anything not named like a run
/// (or a symlink) is never touched.
#[tokio::test]
async fn per_run_host_dirs_are_reaped_with_the_same_predicate() {
    use iterion_runtime::reap::{OWNER_MARKER, reap_host_dirs};
    let (store, _dir) = crate::runtime::support::store();
    let me = iterion_runtime::owner::current_owner().unwrap();
    let ghost = RunOwner {
        pid: 999_999_999,
        ..me.clone()
    };
    let dead = running_run(store.as_ref(), "dead-run", ghost.clone()).await;
    let alive = running_run(store.as_ref(), "live-run", me.clone()).await;
    let roots = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("keep.txt"), "not ours").unwrap();
    let make = |root: usize, name: &str, owner: Option<&RunOwner>| {
        let dir = roots[root].path().join(name);
        std::fs::create_dir_all(dir.join("artifact-files")).unwrap();
        std::fs::write(dir.join("artifact-files/x"), "payload").unwrap();
        if let Some(o) = owner {
            std::fs::write(dir.join(OWNER_MARKER), serde_json::to_vec(o).unwrap()).unwrap();
        }
        dir
    };
    let d_dead = make(0, dead.as_str(), Some(&ghost));
    let d_secret_dead = make(1, dead.as_str(), Some(&ghost));
    let d_live = make(0, alive.as_str(), Some(&me));
    let d_other_live = make(1, "other-store-live", Some(&me));
    let d_other_dead = make(1, "other-store-dead", Some(&ghost));
    let d_unmarked = make(0, "unmarked-absent", None);
    let d_not_a_run = make(0, "Not A Run", Some(&ghost));
    let link = roots[0].path().join("linked-run");
    std::os::unix::fs::symlink(outside.path(), &link).unwrap();
    let roots: Vec<_> = roots.iter().map(|r| r.path().to_path_buf()).collect();

    let dry = reap_host_dirs(&roots, store.as_ref(), true).await;
    assert!(dry.iter().all(|d| !d.removed));
    assert!(d_dead.exists() && d_other_dead.exists());

    let decisions = reap_host_dirs(&roots, store.as_ref(), false).await;
    let verdict = |dir: &std::path::Path| {
        decisions
            .iter()
            .find(|d| d.resource.id == dir.to_string_lossy())
            .map(|d| d.verdict.clone())
    };
    assert!(matches!(verdict(&d_dead), Some(ReapVerdict::Reap(_))));
    assert!(matches!(
        verdict(&d_secret_dead),
        Some(ReapVerdict::Reap(_))
    ));
    assert!(matches!(
        verdict(&d_other_dead),
        Some(ReapVerdict::Reap("run absent"))
    ));
    assert!(matches!(
        verdict(&d_live),
        Some(ReapVerdict::Keep("lease held"))
    ));
    assert_eq!(
        verdict(&d_other_live),
        None,
        "another store's live run: neither judged nor listed"
    );
    assert!(matches!(verdict(&d_unmarked), Some(ReapVerdict::Keep(_))));
    assert_eq!(
        verdict(&d_not_a_run),
        None,
        "not named like a run: not listed"
    );
    assert_eq!(verdict(&link), None, "a symlink is never a run's directory");
    for gone in [&d_dead, &d_secret_dead, &d_other_dead] {
        assert!(!gone.exists(), "{gone:?} kept");
    }
    for kept in [&d_live, &d_other_live, &d_unmarked, &d_not_a_run] {
        assert!(kept.join("artifact-files/x").exists(), "{kept:?} touched");
    }
    assert!(outside.path().join("keep.txt").exists());
    // The dead run was interrupted by the pass (terminal now) and says
    // what was reaped.
    let rec = store.load_run(&dead).await.unwrap().unwrap();
    assert_eq!(rec.status, RunStatus::FailedResumable);
    let reaped = store
        .events_after(&dead, 0, 0)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "sandbox_reaped")
        .count();
    assert_eq!(reaped, 2);
    let j = decisions
        .iter()
        .find(|d| d.resource.id == d_dead.to_string_lossy())
        .unwrap()
        .to_json();
    assert_eq!(j["kind"], "host_dir");
}
