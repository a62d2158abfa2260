//! Event append/read throughput of both stores, side by side with a
//! baseline measured in the same process: raw appends of the same JSON
//! lines to a JSONL file, `fsync` per batch (batch = 1 event, the same
//! durability an acknowledged store append has; and batch = 64 for scale).
//!
//! `cargo bench -p iterion-store-postgres --bench events` (needs
//! `ITERION_TEST_POSTGRES_URL`; run scripts/test.sh first). Events per case:
//! `ITERION_BENCH_EVENTS` (default 2000).
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

async fn bench_store(name: &'static str, store: Arc<dyn RunStore>, n: usize, rows: &mut Vec<Row>) {
    // Single writer.
    let run = new_run(store.as_ref(), "single").await;
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
    let run8 = new_run(store.as_ref(), "eight").await;
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

fn bench_jsonl(dir: &std::path::Path, n: usize, rows: &mut Vec<Row>) {
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

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    let n: usize = std::env::var("ITERION_BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let url = std::env::var("ITERION_TEST_POSTGRES_URL")
        .expect("ITERION_TEST_POSTGRES_URL is not set: run scripts/test.sh (it starts PostgreSQL)");
    let tmp = tempfile::tempdir().unwrap();
    let mut rows = Vec::new();

    bench_jsonl(&tmp.path().join(""), n, &mut rows);

    let sqlite = SqliteStore::open(&tmp.path().join("store")).unwrap();
    bench_store("sqlite", Arc::new(sqlite), n, &mut rows).await;

    let r: [u8; 6] = rand::random();
    let schema = format!("bench_{}", hex::encode(r));
    let pg = PostgresStore::connect(&url, Some(&schema))
        .await
        .expect("PostgreSQL at ITERION_TEST_POSTGRES_URL does not answer: run scripts/test.sh");
    bench_store("postgres", Arc::new(pg), n, &mut rows).await;
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

    let baseline = |case: &str| -> f64 {
        let want = if case.starts_with("read") {
            "read all".to_owned()
        } else if case.contains(&format!("{WRITERS} writers")) {
            format!("append, {WRITERS} writers, fsync/1")
        } else {
            "append, 1 writer, fsync/1".to_owned()
        };
        rows.iter()
            .find(|r| r.backend == "jsonl" && r.case == want)
            .map(Row::rate)
            .unwrap_or(f64::NAN)
    };
    println!(
        "events per case: {n} (ITERION_BENCH_EVENTS); baseline = JSONL file, fsync per batch, same process"
    );
    println!(
        "{:<9} {:<32} {:>7} {:>9} {:>12} {:>14}",
        "backend", "case", "events", "secs", "events/s", "vs jsonl"
    );
    for r in &rows {
        let ratio = if r.backend == "jsonl" {
            String::from("baseline")
        } else {
            format!("{:.3}x", r.rate() / baseline(&r.case))
        };
        println!(
            "{:<9} {:<32} {:>7} {:>9.3} {:>12.0} {:>14}",
            r.backend,
            r.case,
            r.events,
            r.secs,
            r.rate(),
            ratio
        );
    }
}
