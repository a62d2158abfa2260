//! `store_conformance!`: the one suite every [`RunStore`] backend runs.
//!
//! The macro mounts one `#[tokio::test]` per check; each check is a plain
//! async function here taking a [`StoreFixture`], so a failure points at the
//! contract clause, not at a backend. A backend supplies two things: a
//! `fresh` async expression building an isolated, empty store (its own
//! directory or schema) and an `open` closure reopening a store from its
//! [`StoreFixture::locator`] — used for second connections and by the
//! killed-writer child process, which re-executes the test binary with
//! [`WRITER_ENV`] set. The mounting crate needs `tokio` (the checks are
//! `#[tokio::test]`s) and must not set `harness = false` on that test.
//!
//! ```ignore
//! iterion_testkit::store_conformance!(
//!     fresh: async { /* -> StoreFixture */ },
//!     open: |locator: String| async move { /* -> Result<Arc<dyn RunStore>, StoreError> */ },
//! );
//! ```

// Test code: a failed expectation is the assertion.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::any::Any;
use std::collections::BTreeSet;
use std::io::BufRead;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
pub use futures_util::future::BoxFuture;
use serde_json::json;
use sha2::{Digest, Sha256};

use iterion_core::ByteStream;
use iterion_core::event::EventDraft;
use iterion_core::failure::{Disposition, FailureCode, RunStatus};
use iterion_core::id::{NodeId, RunId};
use iterion_core::mode::Trust;
use iterion_core::store::{
    Admission, AdmissionDecision, DrainRecord, DrainStatus, Failure, NewLogLine, NewRun,
    PageRequest, PutOutcome, Reopen, RunFilePath, RunOwner, Transition,
};
pub use iterion_core::{RunStore, StoreError};

mod queued;
pub use queued::{runs_claim_is_compare_and_set, runs_submit_records_the_submission};

/// Env var that turns the test binary into the killed-writer child: its
/// value is the store locator.
pub const WRITER_ENV: &str = "ITERION_STORE_CONFORMANCE_WRITER";
/// Env var naming the run the child appends to.
pub const WRITER_RUN_ENV: &str = "ITERION_STORE_CONFORMANCE_RUN";

/// A fresh, isolated store under test.
pub struct StoreFixture {
    /// The store.
    pub store: Arc<dyn RunStore>,
    /// What `open` needs to reach the same store from another connection or
    /// process (a directory, or a URL + schema).
    pub locator: String,
    /// Keeps the backing resources (temp dir, schema) alive.
    pub guard: Box<dyn Any + Send + Sync>,
}

/// Reopens a store from its locator.
pub type OpenFn =
    Arc<dyn Fn(String) -> BoxFuture<'static, Result<Arc<dyn RunStore>, StoreError>> + Send + Sync>;

/// Mount the conformance suite. See the module docs.
#[macro_export]
macro_rules! store_conformance {
    (fresh: $fresh:expr, open: $open:expr $(,)?) => {
        fn __store_conformance_open() -> $crate::store::OpenFn {
            ::std::sync::Arc::new(move |locator: String| {
                let fut = ($open)(locator);
                ::std::boxed::Box::pin(fut)
                    as $crate::store::BoxFuture<
                        'static,
                        ::std::result::Result<
                            ::std::sync::Arc<dyn $crate::store::RunStore>,
                            $crate::store::StoreError,
                        >,
                    >
            })
        }
        $crate::store_conformance!(@checks $fresh;
            runs_create_and_load,
            runs_transition_cas,
            runs_reopen_claims_the_run,
            runs_submit_records_the_submission,
            runs_claim_is_compare_and_set,
            runs_failure_and_admission,
            runs_pagination_is_stable,
            events_append_and_read,
            events_idempotent_at_seq,
            events_payloads_round_trip,
            events_gapless_under_concurrency,
            events_follow_until_terminal,
            logs_append_read_follow,
            files_put_list_get,
            files_cap_keeps_nothing,
            files_paths_are_confined,
            files_failed_stream_keeps_nothing,
            drain_record_round_trip,
            unknown_run_is_not_found,
        );

        #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn store_conformance_killed_writer_loses_nothing_acknowledged() {
            let fx = $fresh.await;
            let child = concat!(module_path!(), "::store_conformance_writer_child");
            $crate::store::killed_writer_loses_nothing_acknowledged(
                &fx,
                __store_conformance_open(),
                child,
            )
            .await;
        }

        /// Not a check: the child process of the killed-writer check. Does
        /// nothing unless the parent set the writer env var.
        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn store_conformance_writer_child() {
            $crate::store::writer_child(__store_conformance_open()).await;
        }
    };
    (@checks $fresh:expr; $($name:ident),* $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                let fx = $fresh.await;
                $crate::store::$name(&fx, __store_conformance_open()).await;
            }
        )*
    };
}

/// Guard against a hang, not a timing assertion: every awaited condition
/// here is expected within milliseconds.
const HANG_GUARD: Duration = Duration::from_secs(60);

fn new_run(id: &str) -> NewRun {
    NewRun {
        id: RunId::parse(id).expect("valid run id"),
        workflow: "review".into(),
        file: "flows/review.iter".into(),
        trust: Trust::Untrusted,
        owner: Some(RunOwner {
            host: "host-a".into(),
            pid: 4242,
            start_time: 987_654,
        }),
    }
}

fn draft(kind: &str, data: serde_json::Value) -> EventDraft {
    EventDraft {
        kind: kind.into(),
        node_id: None,
        data,
    }
}

fn bytes_stream(chunks: Vec<Vec<u8>>) -> ByteStream {
    Box::pin(futures_util::stream::iter(
        chunks.into_iter().map(|c| Ok(Bytes::from(c))),
    ))
}

async fn read_all(mut s: ByteStream) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(chunk) = s.next().await {
        out.extend_from_slice(&chunk.expect("file chunk"));
    }
    out
}

fn path(p: &str) -> RunFilePath {
    RunFilePath::parse(p).expect("valid run file path")
}

fn to(from: RunStatus, to: RunStatus) -> Transition {
    Transition {
        from,
        expected_revision: None,
        to,
        failure: None,
    }
}

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

/// Append assigns gapless seqs from 1; read after a seq, with a limit.
pub async fn events_append_and_read(fx: &StoreFixture, _open: OpenFn) {
    let s = &fx.store;
    let run = s.create_run(new_run("ev")).await.expect("create");
    let mut appended = Vec::new();
    for i in 0..5 {
        let mut d = draft(
            "node_started",
            json!({"kind": "tool", "i": i, "nested": {"a": [1, 2.5, null]}}),
        );
        if i % 2 == 0 {
            d = d.for_node(NodeId::new(format!("n{i}")));
        }
        let rec = s.append_event(&run.id, d, None).await.expect("append");
        assert_eq!(rec.seq, i + 1);
        assert_eq!(rec.run_id, run.id);
        appended.push(rec);
    }
    let all = s.events_after(&run.id, 0, 0).await.expect("read all");
    assert_eq!(all, appended, "read back exactly what was acknowledged");
    for w in all.windows(2) {
        assert!(w[0].timestamp <= w[1].timestamp);
    }
    let tail = s.events_after(&run.id, 2, 0).await.expect("after 2");
    assert_eq!(
        tail.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![3, 4, 5]
    );
    let limited = s.events_after(&run.id, 1, 2).await.expect("limit");
    assert_eq!(
        limited.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![2, 3]
    );
    assert!(
        s.events_after(&run.id, 5, 0)
            .await
            .expect("none")
            .is_empty()
    );

    // Per-run sequences are independent.
    let other = s.create_run(new_run("ev-other")).await.expect("create");
    let rec = s
        .append_event(&other.id, draft("run_started", json!({})), None)
        .await
        .expect("append other");
    assert_eq!(rec.seq, 1);
}

/// Payloads and log lines come back exactly: extreme numbers, unicode,
/// escapes and NUL (process output can hold anything), deep nesting, a
/// large string.
pub async fn events_payloads_round_trip(fx: &StoreFixture, _open: OpenFn) {
    let s = &fx.store;
    let run = s.create_run(new_run("payloads")).await.expect("create");
    let nest = |levels: usize| {
        let mut v = json!("bottom");
        for _ in 0..levels {
            v = json!({ "d": [v] });
        }
        v
    };
    let deep = nest(45); // 90 levels of arrays/objects
    let too_deep = s
        .append_event(&run.id, draft("payload", nest(64)), None)
        .await;
    assert!(
        matches!(too_deep, Err(StoreError::InvalidPayload { .. })),
        "a payload no reader can parse back is refused at append: {too_deep:?}"
    );
    let payloads = vec![
        json!({}),
        serde_json::Value::Null,
        json!([]),
        json!({"u64": u64::MAX, "i64": i64::MIN, "neg": -1, "zero": 0}),
        json!({"f": 0.1, "big": 1e308, "tiny": 5e-324, "neg": -2.5}),
        json!({"s": "caf\u{e9} \u{1F980} \"quoted\" back\\slash \n\t nul:\u{0} end"}),
        json!({"keys": {"z": 1, "a": 2, "\u{0}": 3, "": 4}}),
        deep,
        json!({"large": "x".repeat(200_000)}),
    ];
    for (i, data) in payloads.iter().enumerate() {
        let rec = s
            .append_event(&run.id, draft("payload", data.clone()), None)
            .await
            .unwrap_or_else(|e| panic!("payload {i} refused: {e}"));
        assert_eq!(&rec.data, data);
    }
    let back = s.events_after(&run.id, 0, 0).await.expect("read");
    let datas: Vec<_> = back.into_iter().map(|e| e.data).collect();
    assert_eq!(datas, payloads, "payloads come back exactly");
    // Re-appending the same payload at its seq is idempotent (equality is
    // on the JSON value, whatever the backend's text form).
    s.append_event(&run.id, draft("payload", payloads[4].clone()), Some(5))
        .await
        .expect("idempotent re-append of a float payload");

    let tricky = "bin\u{0}ary \u{1b}[31mred\u{1b}[0m \r tail \u{FFFD}";
    s.append_logs(
        &run.id,
        vec![NewLogLine {
            stream: "stdout".into(),
            node_id: Some("n".into()),
            line: tricky.into(),
        }],
    )
    .await
    .expect("log line with NUL and escapes");
    let lines = s.logs_after(&run.id, 0, 0).await.expect("read logs");
    assert_eq!(lines[0].line, tricky);
}

/// `at_seq`: same event → the stored one; different → `SeqConflict`;
/// past the next seq → `SeqGap`.
pub async fn events_idempotent_at_seq(fx: &StoreFixture, _open: OpenFn) {
    let s = &fx.store;
    let run = s.create_run(new_run("idem")).await.expect("create");
    let e1 = draft("run_started", json!({"workflow": "review"}));
    let first = s
        .append_event(&run.id, e1.clone(), Some(1))
        .await
        .expect("append at 1");
    assert_eq!(first.seq, 1);
    let again = s
        .append_event(&run.id, e1.clone(), Some(1))
        .await
        .expect("idempotent re-append");
    assert_eq!(again, first, "the stored event comes back unchanged");
    let conflict = s
        .append_event(
            &run.id,
            draft("run_started", json!({"workflow": "other"})),
            Some(1),
        )
        .await;
    assert!(
        matches!(conflict, Err(StoreError::SeqConflict { seq: 1, .. })),
        "{conflict:?}"
    );
    let node_conflict = s
        .append_event(&run.id, e1.clone().for_node(NodeId::new("x")), Some(1))
        .await;
    assert!(matches!(node_conflict, Err(StoreError::SeqConflict { .. })));
    let gap = s.append_event(&run.id, e1.clone(), Some(3)).await;
    assert!(
        matches!(
            gap,
            Err(StoreError::SeqGap {
                seq: 3,
                next: 2,
                ..
            })
        ),
        "{gap:?}"
    );
    let zero = s.append_event(&run.id, e1.clone(), Some(0)).await;
    assert!(zero.is_err(), "seq 0 is never valid");
    let second = s
        .append_event(&run.id, draft("node_started", json!({})), Some(2))
        .await
        .expect("append at the next seq");
    assert_eq!(second.seq, 2);
    let third = s
        .append_event(&run.id, draft("node_finished", json!({})), None)
        .await
        .expect("append");
    assert_eq!(third.seq, 3);
    assert_eq!(
        s.events_after(&run.id, 0, 0).await.expect("read").len(),
        3,
        "refused appends left nothing"
    );
}

/// 8 concurrent appenders (half through a second, independently opened
/// store: another connection pool / file handle) get gapless, unique seqs.
pub async fn events_gapless_under_concurrency(fx: &StoreFixture, open: OpenFn) {
    const WRITERS: u64 = 8;
    const EACH: u64 = 25;
    let run = fx.store.create_run(new_run("conc")).await.expect("create");
    let second = open(fx.locator.clone()).await.expect("second handle");
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let s = if w % 2 == 0 {
            fx.store.clone()
        } else {
            second.clone()
        };
        let id = run.id.clone();
        tasks.push(tokio::spawn(async move {
            let mut seqs = Vec::new();
            for i in 0..EACH {
                let rec = s
                    .append_event(&id, draft("tick", json!({"w": w, "i": i})), None)
                    .await
                    .expect("concurrent append");
                seqs.push(rec.seq);
            }
            seqs
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        let seqs = t.await.expect("join");
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "per-writer order");
        all.extend(seqs);
    }
    all.sort_unstable();
    assert_eq!(all, (1..=WRITERS * EACH).collect::<Vec<_>>());
    let stored = fx.store.events_after(&run.id, 0, 0).await.expect("read");
    assert_eq!(
        stored.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=WRITERS * EACH).collect::<Vec<_>>()
    );
    for w in 0..WRITERS {
        let is: Vec<_> = stored
            .iter()
            .filter(|e| e.data["w"] == w)
            .map(|e| e.data["i"].as_u64().expect("i"))
            .collect();
        assert_eq!(is, (0..EACH).collect::<Vec<_>>(), "writer {w} in order");
    }
}

/// A follower sees what was there, then what is appended after it started,
/// and ends once the run is terminal.
pub async fn events_follow_until_terminal(fx: &StoreFixture, open: OpenFn) {
    let s = fx.store.clone();
    let run = s.create_run(new_run("follow")).await.expect("create");
    s.append_event(&run.id, draft("run_started", json!({})), None)
        .await
        .expect("append");
    let mut follower = s.follow_events(&run.id, 0);
    let first = tokio::time::timeout(HANG_GUARD, follower.next())
        .await
        .expect("follower hung")
        .expect("an item")
        .expect("ok");
    assert_eq!(first.seq, 1);

    // Appends from another handle (another connection; for a file store,
    // the path other processes take) must reach the follower too.
    let writer = open(fx.locator.clone()).await.expect("second handle");
    let id = run.id.clone();
    let appender = tokio::spawn(async move {
        writer
            .transition(&id, to(RunStatus::Queued, RunStatus::Running))
            .await
            .expect("running");
        for i in 0..5 {
            tokio::time::sleep(Duration::from_millis(20)).await;
            writer
                .append_event(&id, draft("tick", json!({"i": i})), None)
                .await
                .expect("append");
        }
        writer
            .transition(&id, to(RunStatus::Running, RunStatus::Finished))
            .await
            .expect("finished");
        writer
            .append_event(&id, draft("run_finished", json!({"duration_ms": 1})), None)
            .await
            .expect("append after terminal");
    });
    let rest: Vec<_> = tokio::time::timeout(HANG_GUARD, follower.collect::<Vec<_>>())
        .await
        .expect("follower did not end after the run became terminal");
    appender.await.expect("appender");
    let seqs: Vec<u64> = rest
        .into_iter()
        .map(|r| r.expect("follow item").seq)
        .collect();
    // The final event raced the terminal status; it may or may not be seen,
    // but everything before the terminal transition must be, in order.
    assert!(seqs.len() == 5 || seqs.len() == 6, "{seqs:?}");
    assert_eq!(seqs[..5], [2, 3, 4, 5, 6]);

    // Following a terminal run replays and ends.
    let replay: Vec<_> =
        tokio::time::timeout(HANG_GUARD, s.follow_events(&run.id, 3).collect::<Vec<_>>())
            .await
            .expect("replay hung");
    let seqs: Vec<u64> = replay.into_iter().map(|r| r.expect("item").seq).collect();
    assert_eq!(seqs, vec![4, 5, 6, 7]);

    let missing: Vec<_> = tokio::time::timeout(
        HANG_GUARD,
        s.follow_events(&RunId::parse("ghost").expect("id"), 0)
            .collect::<Vec<_>>(),
    )
    .await
    .expect("ghost follow hung");
    assert!(matches!(
        missing.as_slice(),
        [Err(StoreError::RunNotFound(_))]
    ));
}

/// Log lines keep stream, node and order; follow works like events.
pub async fn logs_append_read_follow(fx: &StoreFixture, _open: OpenFn) {
    let s = fx.store.clone();
    let run = s.create_run(new_run("logs")).await.expect("create");
    let line = |stream: &str, node: Option<&str>, text: &str| NewLogLine {
        stream: stream.into(),
        node_id: node.map(str::to_owned),
        line: text.into(),
    };
    let last = s
        .append_logs(
            &run.id,
            vec![
                line("system", None, "docker run -d iterion-sandbox-slim:local"),
                line("stdout", Some("build"), "compiling…"),
                line("stderr", Some("build"), "warning: unused \u{1F980}"),
            ],
        )
        .await
        .expect("append logs");
    assert_eq!(last, 3);
    let all = s.logs_after(&run.id, 0, 0).await.expect("read");
    assert_eq!(all.len(), 3);
    assert_eq!(all[1].stream, "stdout");
    assert_eq!(all[1].node_id.as_deref(), Some("build"));
    assert_eq!(all[2].line, "warning: unused \u{1F980}");
    assert_eq!(all.iter().map(|l| l.seq).collect::<Vec<_>>(), vec![1, 2, 3]);
    assert_eq!(s.logs_after(&run.id, 1, 1).await.expect("limit")[0].seq, 2);
    assert_eq!(
        s.append_logs(&run.id, vec![]).await.expect("empty batch"),
        3
    );

    let follower = s.follow_logs(&run.id, 2);
    let id = run.id.clone();
    let w = s.clone();
    let writer = tokio::spawn(async move {
        w.append_logs(&id, vec![line("stdout", None, "later")])
            .await
            .expect("append");
        w.transition(&id, to(RunStatus::Queued, RunStatus::Cancelled))
            .await
            .expect("cancel");
    });
    let got: Vec<_> = tokio::time::timeout(HANG_GUARD, follower.collect::<Vec<_>>())
        .await
        .expect("log follower hung");
    writer.await.expect("writer");
    let lines: Vec<String> = got.into_iter().map(|l| l.expect("line").line).collect();
    assert_eq!(lines, vec!["warning: unused \u{1F980}", "later"]);
}

/// Put streams a file (multi-chunk), list reports size + sha256 sorted by
/// path, get streams it back, a second put replaces it.
pub async fn files_put_list_get(fx: &StoreFixture, _open: OpenFn) {
    let s = &fx.store;
    let run = s.create_run(new_run("files")).await.expect("create");
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let chunks: Vec<Vec<u8>> = big.chunks(65_536).map(<[u8]>::to_vec).collect();
    let out = s
        .put_file(
            &run.id,
            &path("reports/big.bin"),
            bytes_stream(chunks),
            8 << 20,
        )
        .await
        .expect("put big");
    let PutOutcome::Stored(rec) = out else {
        panic!("big file under the cap was not stored: {out:?}")
    };
    assert_eq!(rec.size, big.len() as u64);
    assert_eq!(rec.sha256, hex::encode(Sha256::digest(&big)));
    s.put_file(
        &run.id,
        &path("a.txt"),
        bytes_stream(vec![b"hello".to_vec()]),
        5,
    )
    .await
    .expect("put at exactly the cap");
    s.put_file(&run.id, &path("empty"), bytes_stream(vec![]), 0)
        .await
        .expect("put empty");

    let listed = s.list_files(&run.id).await.expect("list");
    let names: Vec<&str> = listed.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(names, vec!["a.txt", "empty", "reports/big.bin"]);
    assert_eq!(listed[0].size, 5);
    assert_eq!(listed[0].sha256, hex::encode(Sha256::digest(b"hello")));
    assert_eq!(listed[1].size, 0);
    assert_eq!(
        read_all(
            s.get_file(&run.id, &path("reports/big.bin"))
                .await
                .expect("get")
        )
        .await,
        big
    );
    assert!(
        read_all(s.get_file(&run.id, &path("empty")).await.expect("get"))
            .await
            .is_empty()
    );

    s.put_file(
        &run.id,
        &path("a.txt"),
        bytes_stream(vec![b"good".to_vec(), b"bye".to_vec()]),
        100,
    )
    .await
    .expect("replace");
    assert_eq!(
        read_all(s.get_file(&run.id, &path("./a.txt")).await.expect("get")).await,
        b"goodbye"
    );
    let listed = s.list_files(&run.id).await.expect("list");
    assert_eq!(listed.len(), 3);
    assert_eq!(listed[0].size, 7);

    let missing = s.get_file(&run.id, &path("nope.txt")).await;
    assert!(matches!(missing, Err(StoreError::FileNotFound(_))));
    // Files are per run.
    let other = s.create_run(new_run("files-other")).await.expect("create");
    assert!(s.list_files(&other.id).await.expect("list").is_empty());
    assert!(matches!(
        s.get_file(&other.id, &path("a.txt")).await,
        Err(StoreError::FileNotFound(_))
    ));
}

/// Over the cap: `CapExceeded`, nothing listed, nothing readable, and an
/// earlier good version of the same path is left as it was.
pub async fn files_cap_keeps_nothing(fx: &StoreFixture, _open: OpenFn) {
    let s = &fx.store;
    let run = s.create_run(new_run("cap")).await.expect("create");
    let out = s
        .put_file(
            &run.id,
            &path("out/huge.log"),
            bytes_stream(vec![vec![b'x'; 600], vec![b'y'; 600], vec![b'z'; 600]]),
            1000,
        )
        .await
        .expect("put over cap");
    match out {
        PutOutcome::CapExceeded { read, cap } => {
            assert_eq!(cap, 1000);
            assert!(
                read > 1000 && read <= 1200,
                "stopped at the chunk that crossed: {read}"
            );
        }
        other => panic!("expected CapExceeded, got {other:?}"),
    }
    assert!(s.list_files(&run.id).await.expect("list").is_empty());
    assert!(matches!(
        s.get_file(&run.id, &path("out/huge.log")).await,
        Err(StoreError::FileNotFound(_))
    ));
    s.put_file(
        &run.id,
        &path("keep.txt"),
        bytes_stream(vec![b"v1".to_vec()]),
        10,
    )
    .await
    .expect("put");
    let over = s
        .put_file(
            &run.id,
            &path("keep.txt"),
            bytes_stream(vec![vec![0; 11]]),
            10,
        )
        .await
        .expect("put over cap");
    assert!(matches!(over, PutOutcome::CapExceeded { .. }));
    assert_eq!(
        read_all(s.get_file(&run.id, &path("keep.txt")).await.expect("get")).await,
        b"v1"
    );
    assert_eq!(s.list_files(&run.id).await.expect("list").len(), 1);
}

/// Absolute, `..`, NUL, backslash: refused before any backend sees them,
/// also through serde (a path read from an event or a request).
pub async fn files_paths_are_confined(fx: &StoreFixture, _open: OpenFn) {
    for bad in [
        "/etc/passwd",
        "../../etc/passwd",
        "a/../../b",
        "a\0b",
        "",
        "..",
        "a\\..\\b",
        "\\windows",
    ] {
        let err = RunFilePath::parse(bad).expect_err(bad);
        assert_eq!(err.code(), "STORE_UNSAFE_PATH");
        let via_serde: Result<RunFilePath, _> = serde_json::from_value(json!(bad));
        assert!(via_serde.is_err(), "{bad:?} accepted through serde");
    }
    assert_eq!(path("x/./y//z.txt").as_str(), "x/y/z.txt");
    // A normalized path that collides with an existing file's parent is a
    // typed error, never a write elsewhere.
    let s = &fx.store;
    let run = s.create_run(new_run("confined")).await.expect("create");
    s.put_file(
        &run.id,
        &path("a"),
        bytes_stream(vec![b"file".to_vec()]),
        10,
    )
    .await
    .expect("put a");
    let clash = s
        .put_file(&run.id, &path("a/b"), bytes_stream(vec![b"x".to_vec()]), 10)
        .await;
    assert!(
        matches!(clash, Err(StoreError::UnsafePath { .. })),
        "a file cannot also be a directory: {clash:?}"
    );
    s.put_file(&run.id, &path("d/x"), bytes_stream(vec![b"x".to_vec()]), 10)
        .await
        .expect("put d/x");
    let clash = s
        .put_file(&run.id, &path("d"), bytes_stream(vec![b"x".to_vec()]), 10)
        .await;
    assert!(
        matches!(clash, Err(StoreError::UnsafePath { .. })),
        "a directory cannot also be a file: {clash:?}"
    );
    assert_eq!(
        read_all(s.get_file(&run.id, &path("a")).await.expect("get")).await,
        b"file"
    );
}

/// A stream that fails midway stores nothing.
pub async fn files_failed_stream_keeps_nothing(fx: &StoreFixture, _open: OpenFn) {
    let s = &fx.store;
    let run = s.create_run(new_run("broken")).await.expect("create");
    let stream: ByteStream = Box::pin(futures_util::stream::iter(vec![
        Ok(Bytes::from_static(b"partial")),
        Err(std::io::Error::other("archive ended early")),
    ]));
    let r = s.put_file(&run.id, &path("p.txt"), stream, 100).await;
    assert!(r.is_err(), "{r:?}");
    assert!(s.list_files(&run.id).await.expect("list").is_empty());
}

/// The drain record keeps status, reason, declined members, staleness and
/// per-path metered bytes.
pub async fn drain_record_round_trip(fx: &StoreFixture, _open: OpenFn) {
    let s = &fx.store;
    let run = s.create_run(new_run("drain")).await.expect("create");
    assert!(s.get_drain(&run.id).await.expect("get").is_none());
    let partial = DrainRecord {
        status: DrainStatus::Partial,
        reason: Some("cap_exceeded".into()),
        declined: vec!["/iterion/artifact-files/huge.bin".into(), "link-out".into()],
        stale: true,
        metered: vec![
            ("/iterion/artifact-files".into(), 268_435_457),
            ("/work/out".into(), 12),
        ],
        updated_at: time::macros::datetime!(2026-03-04 05:06:07 UTC),
    };
    s.set_drain(&run.id, partial.clone()).await.expect("set");
    assert_eq!(s.get_drain(&run.id).await.expect("get"), Some(partial));
    let complete = DrainRecord {
        status: DrainStatus::Complete,
        reason: None,
        declined: vec![],
        stale: false,
        metered: vec![("/iterion/artifact-files".into(), 10)],
        updated_at: time::macros::datetime!(2026-03-04 05:06:08 UTC),
    };
    s.set_drain(&run.id, complete.clone())
        .await
        .expect("replace");
    assert_eq!(s.get_drain(&run.id).await.expect("get"), Some(complete));
}

/// Every per-run method on an unknown run says `RunNotFound`.
pub async fn unknown_run_is_not_found(fx: &StoreFixture, _open: OpenFn) {
    let s = &fx.store;
    let ghost = RunId::parse("ghost").expect("id");
    let nf = |r: Result<(), StoreError>, what: &str| {
        assert!(
            matches!(r, Err(StoreError::RunNotFound(_))),
            "{what}: {r:?}"
        );
    };
    nf(
        s.transition(&ghost, to(RunStatus::Queued, RunStatus::Running))
            .await
            .map(drop),
        "transition",
    );
    nf(
        s.record_admission(
            &ghost,
            Admission {
                decision: AdmissionDecision::Admitted,
                phase: "pre_model".into(),
                code: None,
                reason: "ok".into(),
                checked_at: time::OffsetDateTime::UNIX_EPOCH,
            },
            None,
        )
        .await
        .map(drop),
        "admission",
    );
    nf(
        s.append_event(&ghost, draft("x", json!({})), None)
            .await
            .map(drop),
        "append_event",
    );
    nf(s.events_after(&ghost, 0, 0).await.map(drop), "events_after");
    nf(s.append_logs(&ghost, vec![]).await.map(drop), "append_logs");
    nf(s.logs_after(&ghost, 0, 0).await.map(drop), "logs_after");
    nf(
        s.put_file(&ghost, &path("f"), bytes_stream(vec![]), 1)
            .await
            .map(drop),
        "put_file",
    );
    nf(s.list_files(&ghost).await.map(drop), "list_files");
    nf(s.get_file(&ghost, &path("f")).await.map(drop), "get_file");
    nf(s.get_drain(&ghost).await.map(drop), "get_drain");
    nf(
        s.set_drain(
            &ghost,
            DrainRecord {
                status: DrainStatus::Failed,
                reason: None,
                declined: vec![],
                stale: false,
                metered: vec![],
                updated_at: time::OffsetDateTime::UNIX_EPOCH,
            },
        )
        .await,
        "set_drain",
    );
}

/// Kill a writer process (SIGKILL, by pid) mid-append while this process
/// appends to the same run concurrently (two processes, one seq); reopen:
/// every event either process acknowledged is there under the seq it was
/// acknowledged with, nothing torn, appends continue gapless.
pub async fn killed_writer_loses_nothing_acknowledged(
    fx: &StoreFixture,
    open: OpenFn,
    child_test: &str,
) {
    const ACKS_BEFORE_KILL: u64 = 60;
    let run = fx
        .store
        .create_run(new_run("killed"))
        .await
        .expect("create");
    // libtest filters by the path without the crate name.
    let filter = child_test
        .split_once("::")
        .map(|(_, rest)| rest)
        .unwrap_or(child_test)
        .to_owned();
    let exe = std::env::current_exe().expect("test binary path");
    let locator = fx.locator.clone();
    let run_id = run.id.to_string();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let parent = {
        let (store, id, stop) = (fx.store.clone(), run.id.clone(), stop.clone());
        tokio::spawn(async move {
            let mut acked = Vec::new();
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                i += 1;
                let rec = store
                    .append_event(&id, draft("parent", json!({"i": i})), None)
                    .await
                    .expect("parent append while the child writes");
                acked.push(rec.seq);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            acked
        })
    };
    let acked = tokio::task::spawn_blocking(move || {
        let mut child = std::process::Command::new(exe)
            .args([
                filter.as_str(),
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(WRITER_ENV, locator)
            .env(WRITER_RUN_ENV, run_id)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("spawn writer child");
        let pid = child.id();
        let stdout = child.stdout.take().expect("child stdout");
        let mut acked = Vec::new();
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line.expect("child stdout line");
            if let Some(seq) = line.strip_prefix("ACK ") {
                acked.push(seq.trim().parse::<u64>().expect("acked seq"));
                if acked.len() as u64 == ACKS_BEFORE_KILL {
                    // SIGKILL by pid: no destructor, no flush, mid-append.
                    child.kill().expect("kill writer child");
                    break;
                }
            }
        }
        let status = child.wait().expect("reap child");
        assert!(
            acked.len() as u64 == ACKS_BEFORE_KILL,
            "writer child (pid {pid}) stopped early with {status}: acked {acked:?}"
        );
        acked
    })
    .await
    .expect("child driver");
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let parent_acked = parent.await.expect("parent appender");
    assert!(
        !parent_acked.is_empty(),
        "the parent never wrote alongside the child"
    );

    let reopened = open(fx.locator.clone()).await.expect("reopen after kill");
    let events = reopened
        .events_after(&run.id, 0, 0)
        .await
        .expect("read after kill");
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as u64).collect::<Vec<_>>(),
        "gapless after kill"
    );
    let kind_at = |seq: u64| events.get(seq as usize - 1).map(|e| e.kind.as_str());
    for seq in &acked {
        assert_eq!(
            kind_at(*seq),
            Some("tick"),
            "child's acknowledged seq {seq} lost"
        );
    }
    for seq in &parent_acked {
        assert_eq!(
            kind_at(*seq),
            Some("parent"),
            "parent's acknowledged seq {seq} lost"
        );
    }
    // Nothing torn, nothing doubled: the child's events are whole and its
    // counter runs 1, 2, 3… in seq order.
    let ticks: Vec<&_> = events.iter().filter(|e| e.kind == "tick").collect();
    for (k, e) in ticks.iter().enumerate() {
        assert_eq!(e.data["n"], k as u64 + 1, "child event at seq {}", e.seq);
        assert_eq!(e.data["pad"].as_str().map(str::len), Some(512));
    }
    assert_eq!(
        events.len(),
        ticks.len() + parent_acked.len(),
        "only the two writers' events"
    );
    let next = reopened
        .append_event(&run.id, draft("after_kill", json!({})), None)
        .await
        .expect("append after kill");
    assert_eq!(next.seq, seqs.len() as u64 + 1);
}

/// Body of the writer child: append forever, printing each acknowledged seq.
pub async fn writer_child(open: OpenFn) {
    let (Ok(locator), Ok(run)) = (std::env::var(WRITER_ENV), std::env::var(WRITER_RUN_ENV)) else {
        return;
    };
    use std::io::Write;
    let store = open(locator).await.expect("child opens store");
    let run = RunId::parse(run).expect("child run id");
    let pad = "p".repeat(512);
    let mut n: u64 = 0;
    loop {
        n += 1;
        let rec = store
            .append_event(&run, draft("tick", json!({"n": n, "pad": pad})), None)
            .await
            .expect("child append");
        let mut out = std::io::stdout().lock();
        writeln!(out, "ACK {}", rec.seq).expect("child stdout");
        out.flush().expect("child flush");
    }
}
