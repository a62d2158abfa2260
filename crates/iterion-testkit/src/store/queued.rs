//! The cloud-mode clauses of the store contract (issue 13): a submitted
//! run and its submission are created together or not at all, and a
//! runner's claim on a queued run is a compare-and-set that exactly one of
//! several concurrent claimants wins.

use std::collections::BTreeMap;

use iterion_core::StoreError;
use iterion_core::failure::RunStatus;
use iterion_core::id::RunId;
use iterion_core::store::{Claim, RunOwner, Submission};

use super::fixture::{OpenFn, StoreFixture, new_run, to};

fn submission(source: &str) -> Submission {
    let mut settings = serde_json::Map::new();
    settings.insert("sandbox".into(), serde_json::json!("auto"));
    Submission {
        version: Submission::VERSION,
        source: source.to_owned(),
        vars: BTreeMap::from([("who".to_owned(), "wörld \u{0} \"q\"".to_owned())]),
        settings,
        timeout_ms: Some(90_000),
        // Stores keep microseconds.
        submitted_at: time::OffsetDateTime::from_unix_timestamp(1_700_000_000).expect("ts"),
    }
}

fn runner(pid: u32) -> RunOwner {
    RunOwner {
        host: "runner-host".into(),
        pid,
        start_time: 55,
    }
}

/// `submit_run` creates a `queued` run and its submission together; the
/// submission reads back as written (unicode, NUL, quotes); a taken id is
/// refused and keeps the first submission; a run created without one has
/// none, and so has an absent run.
pub async fn runs_submit_records_the_submission(fx: &StoreFixture, _open: OpenFn) {
    let s = &fx.store;
    let first = submission("workflow w:\n  entry: a\n");
    let rec = s
        .submit_run(new_run("sub-a"), first.clone())
        .await
        .expect("submit");
    assert_eq!(rec.status, RunStatus::Queued);
    assert_eq!(rec.revision, 1);
    let loaded = s
        .load_submission(&rec.id)
        .await
        .expect("load submission")
        .expect("present");
    assert_eq!(loaded, first);

    let dup = s
        .submit_run(new_run("sub-a"), submission("something else"))
        .await;
    assert!(matches!(dup, Err(StoreError::RunExists(_))), "{dup:?}");
    let kept = s
        .load_submission(&rec.id)
        .await
        .expect("load")
        .expect("kept");
    assert_eq!(kept, first, "a refused submit must change nothing");

    // A run created by `iterion run` (no submission), and a taken id that
    // was not submitted: the submit is refused and leaves no submission.
    let local = s.create_run(new_run("local-a")).await.expect("create");
    assert_eq!(s.load_submission(&local.id).await.expect("load"), None);
    let over = s.submit_run(new_run("local-a"), submission("x")).await;
    assert!(matches!(over, Err(StoreError::RunExists(_))), "{over:?}");
    assert_eq!(s.load_submission(&local.id).await.expect("load"), None);
    let ghost = RunId::parse("ghost-sub").expect("id");
    assert_eq!(s.load_submission(&ghost).await.expect("load"), None);
}

/// `claim_run` makes a runner the owner of a queued run by compare-and-set
/// on its revision, the status staying `queued`; a stale revision, a run
/// that left `queued` and an absent run are refused; of several claimants
/// racing on one revision exactly one wins.
pub async fn runs_claim_is_compare_and_set(fx: &StoreFixture, open: OpenFn) {
    let s = &fx.store;
    let rec = s
        .submit_run(new_run("claim-a"), submission("w"))
        .await
        .expect("submit");
    let claim = |pid, revision| Claim {
        expected_revision: Some(revision),
        owner: runner(pid),
    };
    let stale = s.claim_run(&rec.id, claim(1, rec.revision + 7)).await;
    assert!(
        matches!(stale, Err(StoreError::StaleTransition { .. })),
        "{stale:?}"
    );
    let claimed = s
        .claim_run(&rec.id, claim(1, rec.revision))
        .await
        .expect("claim");
    assert_eq!(claimed.status, RunStatus::Queued);
    assert_eq!(claimed.owner, Some(runner(1)));
    assert!(claimed.revision > rec.revision);
    let started = s
        .transition(&rec.id, to(RunStatus::Queued, RunStatus::Running))
        .await
        .expect("start");
    let late = s.claim_run(&rec.id, claim(2, started.revision)).await;
    assert!(
        matches!(
            late,
            Err(StoreError::StaleTransition {
                actual_status: RunStatus::Running,
                ..
            })
        ),
        "{late:?}"
    );
    let ghost = RunId::parse("ghost-claim").expect("id");
    let nf = s.claim_run(&ghost, claim(3, 1)).await;
    assert!(matches!(nf, Err(StoreError::RunNotFound(_))), "{nf:?}");

    // Racing claimants over separate connections: one winner.
    let race = s
        .submit_run(new_run("claim-race"), submission("w"))
        .await
        .expect("submit");
    let mut tasks = Vec::new();
    for pid in 10..18u32 {
        let store = open(fx.locator.clone()).await.expect("reopen");
        let id = race.id.clone();
        let revision = race.revision;
        tasks.push(tokio::spawn(async move {
            store.claim_run(&id, claim(pid, revision)).await
        }));
    }
    let mut winners = Vec::new();
    for t in tasks {
        match t.await.expect("join") {
            Ok(r) => winners.push(r.owner),
            Err(StoreError::StaleTransition { .. }) => {}
            Err(e) => panic!("unexpected claim error: {e:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one claimant wins: {winners:?}");
    let held = s.load_run(&race.id).await.expect("load").expect("present");
    assert_eq!(held.owner, winners[0]);
}
