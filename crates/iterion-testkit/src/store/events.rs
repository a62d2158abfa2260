//! The event and log checks: append, read, idempotence, payloads, gapless
//! sequence numbers under concurrency, follow until terminal.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::json;

use iterion_core::StoreError;
use iterion_core::failure::RunStatus;
use iterion_core::id::{NodeId, RunId};
use iterion_core::store::NewLogLine;

use super::fixture::*;

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
