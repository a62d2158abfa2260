//! The run-record checks: create, reopen, compare-and-set transitions,
//! failure and admission, pagination.

use std::collections::BTreeSet;

use iterion_core::StoreError;
use iterion_core::failure::{Disposition, FailureCode, RunStatus};
use iterion_core::id::RunId;
use iterion_core::mode::Trust;
use iterion_core::store::{
    Admission, AdmissionDecision, Failure, PageRequest, Reopen, RunOwner, Transition,
};

use super::fixture::*;

/// Create, reload, refuse a duplicate id, report absence as `None`.
pub async fn runs_create_and_load(fx: &StoreFixture, _open: OpenFn) {
    let s = &fx.store;
    let created = s.create_run(new_run("run-a")).await.expect("create");
    assert_eq!(created.status, RunStatus::Queued);
    assert_eq!(created.revision, 1);
    assert_eq!(created.workflow, "review");
    assert_eq!(created.trust, Trust::Untrusted);
    assert!(created.failure.is_none() && created.admission.is_none());
    let loaded = s
        .load_run(&created.id)
        .await
        .expect("load")
        .expect("present");
    assert_eq!(loaded, created);
    let dup = s.create_run(new_run("run-a")).await;
    assert!(matches!(dup, Err(StoreError::RunExists(_))), "{dup:?}");
    let absent = s
        .load_run(&RunId::parse("nope").expect("id"))
        .await
        .expect("load absent");
    assert!(absent.is_none());
    assert!(!s.describe().is_empty());
}

/// `reopen_run` (resume): a failed run goes back to `running` with the
/// resuming process as its owner and no failure, by compare-and-set; a
/// stale claim, a finished run and a running one are refused.
pub async fn runs_reopen_claims_the_run(fx: &StoreFixture, _open: OpenFn) {
    let s = &fx.store;
    let run = s.create_run(new_run("reopen")).await.expect("create");
    s.transition(&run.id, to(RunStatus::Queued, RunStatus::Running))
        .await
        .expect("start");
    let failed = s
        .transition(
            &run.id,
            Transition {
                failure: Some(Failure::new(FailureCode::NodeFailed, "boom")),
                ..to(RunStatus::Running, RunStatus::Failed)
            },
        )
        .await
        .expect("fail");
    let me = RunOwner {
        host: "host-b".into(),
        pid: 7,
        start_time: 11,
    };
    let claim = |from, revision| Reopen {
        from,
        expected_revision: Some(revision),
        owner: Some(me.clone()),
    };
    let stale = s
        .reopen_run(&run.id, claim(RunStatus::Failed, run.revision))
        .await;
    assert!(
        matches!(stale, Err(StoreError::StaleTransition { .. })),
        "{stale:?}"
    );
    let running = s
        .reopen_run(&run.id, claim(RunStatus::Failed, failed.revision))
        .await
        .expect("reopen");
    assert_eq!(running.status, RunStatus::Running);
    assert_eq!(running.failure, None);
    assert_eq!(running.owner, Some(me.clone()));
    assert!(running.revision > failed.revision);
    let again = s
        .reopen_run(&run.id, claim(RunStatus::Running, running.revision))
        .await;
    assert!(
        matches!(again, Err(StoreError::IllegalTransition { .. })),
        "{again:?}"
    );
    let finished = s
        .transition(&run.id, to(RunStatus::Running, RunStatus::Finished))
        .await
        .expect("finish");
    let done = s
        .reopen_run(&run.id, claim(RunStatus::Finished, finished.revision))
        .await;
    assert!(
        matches!(done, Err(StoreError::IllegalTransition { .. })),
        "{done:?}"
    );
    let loaded = s.load_run(&run.id).await.expect("load").expect("present");
    assert_eq!(loaded.owner, Some(me));
}

/// Transitions are compare-and-set on status and revision and follow
/// `RunStatus::can_transition_to`.
pub async fn runs_transition_cas(fx: &StoreFixture, _open: OpenFn) {
    let s = &fx.store;
    let run = s.create_run(new_run("cas")).await.expect("create");
    let running = s
        .transition(&run.id, to(RunStatus::Queued, RunStatus::Running))
        .await
        .expect("queued -> running");
    assert_eq!(running.status, RunStatus::Running);
    assert!(running.revision > run.revision);

    // Stale: the caller still believes the run is queued.
    let stale = s
        .transition(&run.id, to(RunStatus::Queued, RunStatus::Running))
        .await;
    assert!(
        matches!(
            stale,
            Err(StoreError::StaleTransition {
                actual_status: RunStatus::Running,
                ..
            })
        ),
        "{stale:?}"
    );
    // Stale: right status, old revision.
    let stale_rev = s
        .transition(
            &run.id,
            Transition {
                expected_revision: Some(run.revision),
                ..to(RunStatus::Running, RunStatus::PausedOperator)
            },
        )
        .await;
    assert!(
        matches!(stale_rev, Err(StoreError::StaleTransition { .. })),
        "{stale_rev:?}"
    );
    // Illegal regardless of state.
    let illegal = s
        .transition(&run.id, to(RunStatus::Running, RunStatus::Queued))
        .await;
    assert!(
        matches!(illegal, Err(StoreError::IllegalTransition { .. })),
        "{illegal:?}"
    );
    // Right revision: accepted.
    let paused = s
        .transition(
            &run.id,
            Transition {
                expected_revision: Some(running.revision),
                ..to(RunStatus::Running, RunStatus::PausedOperator)
            },
        )
        .await
        .expect("running -> paused with the current revision");
    assert_eq!(paused.status, RunStatus::PausedOperator);
    let finished = s
        .transition(&run.id, to(RunStatus::PausedOperator, RunStatus::Running))
        .await
        .and(
            s.transition(&run.id, to(RunStatus::Running, RunStatus::Finished))
                .await,
        )
        .expect("to finished");
    assert_eq!(finished.status, RunStatus::Finished);
    for next in RunStatus::ALL {
        let r = s.transition(&run.id, to(RunStatus::Finished, next)).await;
        assert!(
            matches!(r, Err(StoreError::IllegalTransition { .. })),
            "finished -> {next}: {r:?}"
        );
    }
    let loaded = s.load_run(&run.id).await.expect("load").expect("present");
    assert_eq!(loaded.status, RunStatus::Finished);
    assert_eq!(loaded.revision, finished.revision, "refusals bump nothing");

    // Under contention exactly one of N identical CAS attempts wins.
    let race = s.create_run(new_run("cas-race")).await.expect("create");
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let s = s.clone();
        let id = race.id.clone();
        tasks.push(tokio::spawn(async move {
            s.transition(
                &id,
                Transition {
                    expected_revision: Some(1),
                    ..to(RunStatus::Queued, RunStatus::Running)
                },
            )
            .await
        }));
    }
    let mut wins = 0;
    for t in tasks {
        match t.await.expect("join") {
            Ok(_) => wins += 1,
            Err(StoreError::StaleTransition { .. }) => {}
            Err(e) => panic!("unexpected error in CAS race: {e}"),
        }
    }
    assert_eq!(wins, 1, "exactly one CAS wins");
}

/// Failure code/disposition and the admission decision are persisted.
pub async fn runs_failure_and_admission(fx: &StoreFixture, _open: OpenFn) {
    let s = &fx.store;
    let run = s.create_run(new_run("adm")).await.expect("create");
    let admission = Admission {
        decision: AdmissionDecision::Denied,
        phase: "pre_model".into(),
        code: Some("untrusted_without_sandbox".into()),
        reason: "trust=untrusted and sandbox mode none (tier: cli flag)".into(),
        checked_at: time::macros::datetime!(2026-01-02 03:04:05.123456 UTC),
    };
    let with_adm = s
        .record_admission(&run.id, admission.clone(), Some(run.revision))
        .await
        .expect("record admission");
    assert_eq!(with_adm.admission.as_ref(), Some(&admission));
    assert!(with_adm.revision > run.revision);
    let stale = s
        .record_admission(&run.id, admission.clone(), Some(run.revision))
        .await;
    assert!(
        matches!(stale, Err(StoreError::StaleTransition { .. })),
        "{stale:?}"
    );

    let failed = s
        .transition(
            &run.id,
            Transition {
                expected_revision: Some(with_adm.revision),
                failure: Some(Failure::new(
                    FailureCode::LaunchFailed,
                    "refused at admission: stderr said \u{0}\u{1b}[31m\u{1F980}",
                )),
                ..to(RunStatus::Queued, RunStatus::Failed)
            },
        )
        .await
        .expect("queued -> failed");
    let loaded = s.load_run(&run.id).await.expect("load").expect("present");
    assert_eq!(loaded, failed);
    let f = loaded.failure.expect("failure persisted");
    assert_eq!(f.code, FailureCode::LaunchFailed);
    assert_eq!(f.disposition, Disposition::Deterministic);
    // Messages may quote process output, NUL and escapes included.
    assert_eq!(
        f.message,
        "refused at admission: stderr said \u{0}\u{1b}[31m\u{1F980}"
    );
    assert_eq!(loaded.admission, Some(admission));

    // A resumable failure re-queued sheds its failure; an explicit
    // disposition different from the code's own is kept as given.
    let r2 = s.create_run(new_run("resumable")).await.expect("create");
    s.transition(&r2.id, to(RunStatus::Queued, RunStatus::Running))
        .await
        .expect("run");
    let fr = s
        .transition(
            &r2.id,
            Transition {
                failure: Some(Failure {
                    code: FailureCode::SandboxSetupTimeout,
                    disposition: Disposition::Unknown,
                    message: "setup stalled".into(),
                }),
                ..to(RunStatus::Running, RunStatus::FailedResumable)
            },
        )
        .await
        .expect("failed_resumable");
    assert_eq!(
        fr.failure.as_ref().map(|f| f.disposition),
        Some(Disposition::Unknown)
    );
    let requeued = s
        .transition(&r2.id, to(RunStatus::FailedResumable, RunStatus::Queued))
        .await
        .expect("requeue");
    assert!(requeued.failure.is_none());
    assert_eq!(requeued.owner, new_run("resumable").owner);
}

/// Newest first; a page boundary survives inserts: no duplicates, no
/// pre-existing run skipped.
pub async fn runs_pagination_is_stable(fx: &StoreFixture, _open: OpenFn) {
    let s = &fx.store;
    let mut created = Vec::new();
    for i in 0..11 {
        created.push(
            s.create_run(new_run(&format!("page-{i:02}")))
                .await
                .expect("create")
                .id,
        );
    }
    let mut seen = Vec::new();
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let page = s
            .list_runs(PageRequest {
                cursor: cursor.clone(),
                limit: 4,
            })
            .await
            .expect("page");
        assert!(page.items.len() <= 4);
        seen.extend(page.items.iter().map(|r| r.id.clone()));
        // Runs created while paging come before the cursor and must not
        // shift what comes after it.
        s.create_run(new_run(&format!("late-{pages}")))
            .await
            .expect("create while paging");
        pages += 1;
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    let unique: BTreeSet<_> = seen.iter().cloned().collect();
    assert_eq!(
        unique.len(),
        seen.len(),
        "duplicates across pages: {seen:?}"
    );
    let mut expected = created.clone();
    expected.reverse();
    assert_eq!(seen, expected, "newest first, every pre-existing run once");

    let first = s
        .list_runs(PageRequest::default())
        .await
        .expect("default page");
    assert_eq!(first.items.len(), 11 + pages);
    assert!(first.next_cursor.is_none());
    assert!(first.items[0].id.as_str().starts_with("late-"));

    let bad = s
        .list_runs(PageRequest {
            cursor: Some("not a cursor".into()),
            limit: 2,
        })
        .await;
    assert!(matches!(bad, Err(StoreError::InvalidCursor)), "{bad:?}");
}
