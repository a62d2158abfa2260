//! The absent-run check and the killed-writer check (with its child process).

use std::io::BufRead;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use iterion_core::StoreError;
use iterion_core::failure::RunStatus;
use iterion_core::id::RunId;
use iterion_core::store::{Admission, AdmissionDecision, DrainRecord, DrainStatus};

use super::fixture::*;

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
