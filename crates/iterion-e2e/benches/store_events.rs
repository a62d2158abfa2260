//! Event append/read throughput of both stores, side by side with a
//! baseline measured in the same process: raw appends of the same JSON
//! lines to a JSONL file, `fsync` per batch (batch = 1 event, the same
//! durability an acknowledged store append has; and batch = 64 for scale).
//!
//! `cargo bench -p iterion-e2e --bench store_events` (needs
//! `ITERION_TEST_POSTGRES_URL`; run scripts/test.sh first). Events per case:
//! `ITERION_BENCH_EVENTS` per round (default 1000).
#![allow(clippy::expect_used, clippy::unwrap_used)] // a bench: failing loudly is the point

use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use iterion_core::event::{EventDraft, EventRecord};
use iterion_core::store::NewRun;
use iterion_core::{RunId, RunStore, Trust};
use iterion_store_postgres::PostgresStore;
use iterion_store_sqlite::SqliteStore;
use serde_json::json;

const WRITERS: usize = 8;

fn draft(w: usize, i: usize) -> EventDraft {
    EventDraft {
        kind: "network_blocked".into(),
        node_id: None,
        data: json!({
            "host": "registry.npmjs.org", "port": 443, "reason": "blocked-by-allowlist",
            "rule": "deny *.npmjs.org", "node_id": "install", "writer": w, "i": i,
        }),
    }
}

struct Row {
    backend: &'static str,
    case: String,
    events: usize,
    secs: f64,
}

impl Row {
    fn rate(&self) -> f64 {
        self.events as f64 / self.secs
    }
}

async fn new_run(store: &dyn RunStore, id: &str) -> RunId {
    let id = RunId::parse(id).unwrap();
    store
        .create_run(NewRun {
            id: id.clone(),
            workflow: "bench".into(),
            file: "bench.iter".into(),
            trust: Trust::Trusted,
            owner: None,
        })
        .await
        .unwrap();
    id
}

async fn bench_store(
    name: &'static str,
    store: Arc<dyn RunStore>,
    n: usize,
    round: usize,
    rows: &mut Vec<Row>,
) {
    // Single writer.
    let run = new_run(store.as_ref(), &format!("single-{round}")).await;
    let t = Instant::now();
    for i in 0..n {
        store.append_event(&run, draft(0, i), None).await.unwrap();
    }
    rows.push(Row {
        backend: name,
        case: "append, 1 writer".into(),
        events: n,
        secs: t.elapsed().as_secs_f64(),
    });

    // 8 concurrent writers on one run (seq contention).
    let run8 = new_run(store.as_ref(), &format!("eight-{round}")).await;
    let t = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let (s, r) = (store.clone(), run8.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..n / WRITERS {
                s.append_event(&r, draft(w, i), None).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    rows.push(Row {
        backend: name,
        case: format!("append, {WRITERS} writers"),
        events: n / WRITERS * WRITERS,
        secs: t.elapsed().as_secs_f64(),
    });

    // Read everything back (3 passes).
    let t = Instant::now();
    let mut read = 0;
    for _ in 0..3 {
        let events: Vec<EventRecord> = store.events_after(&run, 0, 0).await.unwrap();
        read += events.len();
    }
    rows.push(Row {
        backend: name,
        case: "read all".into(),
        events: read,
        secs: t.elapsed().as_secs_f64(),
    });
}

fn bench_jsonl(dir: &std::path::Path, n: usize, round: usize, rows: &mut Vec<Row>) {
    let dir = dir.join(format!("round-{round}"));
    std::fs::create_dir_all(&dir).unwrap();
    let line = |w: usize, i: usize| {
        let d = draft(w, i);
        serde_json::to_string(&json!({"seq": i + 1, "timestamp": "2026-11-29T08:00:00Z", "type": d.kind, "run_id": "single", "data": d.data})).unwrap()
    };
    for batch in [1usize, 64] {
        let path = dir.join(format!("single-{batch}.jsonl"));
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap();
        let t = Instant::now();
        for i in 0..n {
            writeln!(f, "{}", line(0, i)).unwrap();
            if (i + 1) % batch == 0 {
                f.sync_data().unwrap();
            }
        }
        f.sync_data().unwrap();
        rows.push(Row {
            backend: "jsonl",
            case: format!("append, 1 writer, fsync/{batch}"),
            events: n,
            secs: t.elapsed().as_secs_f64(),
        });
    }
    // 8 writer threads sharing the file (a mutex stands in for seq allocation).
    let f = Arc::new(Mutex::new(
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("eight.jsonl"))
            .unwrap(),
    ));
    let t = Instant::now();
    let threads: Vec<_> = (0..WRITERS)
        .map(|w| {
            let f = f.clone();
            std::thread::spawn(move || {
                for i in 0..n / WRITERS {
                    let mut g = f.lock().unwrap();
                    writeln!(g, "{}", line(w, i)).unwrap();
                    g.sync_data().unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    rows.push(Row {
        backend: "jsonl",
        case: format!("append, {WRITERS} writers, fsync/1"),
        events: n / WRITERS * WRITERS,
        secs: t.elapsed().as_secs_f64(),
    });
    let t = Instant::now();
    let mut read = 0;
    for _ in 0..3 {
        let f = std::io::BufReader::new(std::fs::File::open(dir.join("single-1.jsonl")).unwrap());
        for l in f.lines() {
            let _: serde_json::Value = serde_json::from_str(&l.unwrap()).unwrap();
            read += 1;
        }
    }
    rows.push(Row {
        backend: "jsonl",
        case: "read all".into(),
        events: read,
        secs: t.elapsed().as_secs_f64(),
    });
}

/// Rounds: every case runs once per round, the rounds interleave the
/// backends, and the median per case is reported — the machine is shared
/// and fsync latency drifts, so side by side beats back to back.
const ROUNDS: usize = 5;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    // `cargo bench` passes --bench; `cargo test --all-targets` runs this
    // binary without it: then a quick smoke pass keeps it honest and cheap.
    let bench_mode = std::env::args().any(|a| a == "--bench");
    let rounds = if bench_mode { ROUNDS } else { 1 };
    let n: usize = std::env::var("ITERION_BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if bench_mode { 1000 } else { 16 });
    let url = std::env::var("ITERION_TEST_POSTGRES_URL")
        .expect("ITERION_TEST_POSTGRES_URL is not set: run scripts/test.sh (it starts PostgreSQL)");
    let tmp = tempfile::tempdir().unwrap();
    let sqlite: Arc<dyn RunStore> = Arc::new(SqliteStore::open(&tmp.path().join("store")).unwrap());
    let r: [u8; 6] = rand::random();
    let schema = format!("bench_{}", hex::encode(r));
    let pg: Arc<dyn RunStore> =
        Arc::new(PostgresStore::connect(&url, Some(&schema)).await.expect(
            "PostgreSQL at ITERION_TEST_POSTGRES_URL does not answer: run scripts/test.sh",
        ));

    let mut rows = Vec::new();
    for round in 0..rounds {
        bench_jsonl(tmp.path(), n, round, &mut rows);
        bench_store("sqlite", sqlite.clone(), n, round, &mut rows).await;
        bench_store("postgres", pg.clone(), n, round, &mut rows).await;
    }
    {
        let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        client
            .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
            .await
            .unwrap();
    }

    // Median rate per (backend, case), in first-seen order.
    let mut cases: Vec<(&'static str, String, usize)> = Vec::new();
    for r in &rows {
        if !cases
            .iter()
            .any(|(b, c, _)| *b == r.backend && *c == r.case)
        {
            cases.push((r.backend, r.case.clone(), r.events));
        }
    }
    let rate = |backend: &str, case: &str| -> f64 {
        median(
            rows.iter()
                .filter(|r| r.backend == backend && r.case == case)
                .map(Row::rate)
                .collect(),
        )
    };
    let baseline = |case: &str| -> f64 {
        let want = if case.starts_with("read") {
            "read all".to_owned()
        } else if case.contains(&format!("{WRITERS} writers")) {
            format!("append, {WRITERS} writers, fsync/1")
        } else {
            "append, 1 writer, fsync/1".to_owned()
        };
        rate("jsonl", &want)
    };
    println!(
        "events per case and round: {n} (ITERION_BENCH_EVENTS), {rounds} interleaved rounds, median events/s"
    );
    println!(
        "baseline = raw JSONL appends to a file in this process, fsync per batch (batch 1 = per event)"
    );
    println!(
        "{:<9} {:<32} {:>7} {:>12} {:>10}",
        "backend", "case", "events", "events/s", "vs jsonl"
    );
    for (backend, case, events) in &cases {
        let r = rate(backend, case);
        let ratio = if *backend == "jsonl" {
            String::from("baseline")
        } else {
            format!("{:.2}x", r / baseline(case))
        };
        println!("{backend:<9} {case:<32} {events:>7} {r:>12.0} {ratio:>10}");
    }
}
