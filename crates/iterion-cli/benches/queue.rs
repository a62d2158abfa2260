//! Cloud mode's throughput and queue latency (issue 13), measured with the
//! real binary: N trivial sandboxed runs (one busybox `true` on the test
//! dockerd) executed back to back by `iterion run` (the baseline), then
//! submitted with `iterion submit` and drained by 1, 2 and 4 `iterion
//! runner` processes on a private `nats-server -js` and the PostgreSQL
//! store. Prints, side by side: wall time, runs/min and its ratio to the
//! baseline, and submit→claimed latency p50/p95 (a run's `created_at`, set
//! by submit, to its `run_claimed` event). Not a test: it asserts nothing
//! about speed. `ITERION_BENCH_RUNS` (default 8) sets N.

#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)] // a bench's scaffolding panics by design

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

const BIN: &str = env!("CARGO_BIN_EXE_iterion");

fn var(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

struct Env {
    dir: tempfile::TempDir,
    pg_base: String,
    docker: String,
}

impl Env {
    fn cmd(&self, store: &str, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.args(args)
            .current_dir(self.dir.path())
            .env("ITERION_STORE", store)
            .env("DOCKER_HOST", &self.docker)
            .env("ITERION_SANDBOX_HOST", "local")
            .env_remove("ITERION_SANDBOX_DEFAULT")
            .env_remove("ITERION_SANDBOX_OVERRIDE")
            .env("ITERION_RUNNER_WORKDIR", self.dir.path().join("work"));
        c
    }

    fn schema(&self, tag: &str) -> (String, String) {
        let name = format!("bench_{tag}_{}", std::process::id());
        let sep = if self.pg_base.contains('?') { '&' } else { '?' };
        (format!("{}{sep}schema={name}", self.pg_base), name)
    }

    fn drop_schema(&self, name: &str) {
        let _ = Command::new("psql")
            .args([
                &self.pg_base,
                "-qc",
                &format!("DROP SCHEMA IF EXISTS {name} CASCADE"),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

fn ts(v: &Value) -> OffsetDateTime {
    OffsetDateTime::parse(v.as_str().expect("timestamp"), &Rfc3339).expect("rfc3339")
}

fn json_lines(out: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(out)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

struct Row {
    label: String,
    wall: Duration,
    latencies_ms: Vec<f64>,
}

fn baseline(env: &Env, wf: &Path, n: usize) -> Row {
    let (store, name) = env.schema("base");
    let start = Instant::now();
    for _ in 0..n {
        let out = env
            .cmd(&store, &["run", &wf.to_string_lossy(), "--json"])
            .env("ITERION_MODE", "local")
            .output()
            .expect("iterion run");
        assert!(out.status.success(), "iterion run failed: {out:?}");
    }
    let wall = start.elapsed();
    env.drop_schema(&name);
    Row {
        label: "iterion run, back to back".into(),
        wall,
        latencies_ms: Vec::new(),
    }
}

fn cloud(env: &Env, wf: &Path, n: usize, runners: usize) -> Row {
    let (store, name) = env.schema(&format!("r{runners}"));
    let port = free_port();
    let js = env.dir.path().join(format!("nats-{runners}"));
    let mut nats = Command::new("nats-server")
        .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
        .arg(&js)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nats-server");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "nats-server did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let url = format!("nats://127.0.0.1:{port}");
    let cloud_cmd = |args: &[&str]| {
        let mut c = env.cmd(&store, args);
        c.env("ITERION_MODE", "cloud").env("ITERION_NATS_URL", &url);
        c
    };
    let mut procs: Vec<Child> = (0..runners)
        .map(|i| {
            let log = env.dir.path().join(format!("runner-{runners}-{i}.log"));
            cloud_cmd(&["runner"])
                .env("ITERION_RUNNER_ID", format!("bench-{i}"))
                .env("ITERION_LOG_LEVEL", "info")
                .stderr(std::fs::File::create(log).expect("log"))
                .spawn()
                .expect("runner")
        })
        .collect();
    // Every runner is pulling before the first submit.
    let deadline = Instant::now() + Duration::from_secs(60);
    for i in 0..runners {
        let log = env.dir.path().join(format!("runner-{runners}-{i}.log"));
        while !std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("runner started")
        {
            assert!(Instant::now() < deadline, "runner {i} did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let mut ids = Vec::new();
    for _ in 0..n {
        let out = cloud_cmd(&["submit", &wf.to_string_lossy(), "--json"])
            .output()
            .expect("submit");
        assert!(out.status.success(), "submit failed: {out:?}");
        let doc: Value = serde_json::from_slice(&out.stdout).expect("json");
        ids.push(doc["run_id"].as_str().expect("id").to_owned());
    }
    let deadline = Instant::now() + Duration::from_secs(600);
    let runs = loop {
        let out = cloud_cmd(&["runs", "--json"]).output().expect("runs");
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        let runs: Vec<Value> = doc["runs"].as_array().cloned().unwrap_or_default();
        let done = runs
            .iter()
            .filter(|r| r["status"] == "finished" || r["status"] == "failed")
            .count();
        if done == n {
            break runs;
        }
        assert!(Instant::now() < deadline, "runs did not finish");
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut first_submit: Option<OffsetDateTime> = None;
    let mut last_end: Option<OffsetDateTime> = None;
    let mut latencies = Vec::new();
    for r in &runs {
        let id = r["id"].as_str().expect("id");
        assert_eq!(r["status"], "finished", "{r}");
        let created = ts(&r["started"]);
        first_submit = Some(first_submit.map_or(created, |f| f.min(created)));
        let out = cloud_cmd(&["events", id, "--json"])
            .output()
            .expect("events");
        let events = json_lines(&out.stdout);
        let claimed = events
            .iter()
            .find(|e| e["type"] == "run_claimed")
            .map(|e| ts(&e["timestamp"]))
            .expect("claimed");
        let ended = events
            .iter()
            .rev()
            .find(|e| e["type"] == "run_released")
            .map(|e| ts(&e["timestamp"]))
            .expect("released");
        last_end = Some(last_end.map_or(ended, |l| l.max(ended)));
        latencies.push((claimed - created).as_seconds_f64() * 1000.0);
    }
    for p in &mut procs {
        let _ = Command::new("kill")
            .args(["-TERM", &p.id().to_string()])
            .status();
    }
    for p in &mut procs {
        let _ = p.wait();
    }
    let _ = nats.kill();
    let _ = nats.wait();
    env.drop_schema(&name);
    let wall = (last_end.expect("end") - first_submit.expect("start")).unsigned_abs();
    Row {
        label: format!("{runners} runner{}", if runners == 1 { "" } else { "s" }),
        wall,
        latencies_ms: latencies,
    }
}

fn main() {
    // `cargo bench` passes `--bench`; nothing to parse.
    let n: usize = var("ITERION_BENCH_RUNS", "8")
        .parse()
        .expect("ITERION_BENCH_RUNS");
    let env = Env {
        dir: tempfile::Builder::new()
            .prefix("iterion-bench-queue-")
            .tempdir()
            .expect("tempdir"),
        pg_base: std::env::var("ITERION_TEST_POSTGRES_URL")
            .expect("ITERION_TEST_POSTGRES_URL (scripts/bench.sh sets it)"),
        docker: var(
            "ITERION_TEST_DOCKER_HOST",
            "unix:///run/iterion-test-docker.sock",
        ),
    };
    let image = var("ITERION_TEST_BUSYBOX_IMAGE", "iterion-test/busybox:local");
    let wf = env.dir.path().join("trivial.iter");
    std::fs::write(
        &wf,
        format!(
            "tool work:\n  command: `true`\n\nworkflow trivial:\n  entry: work\n  sandbox:\n    image: \"{image}\"\n    host_state: none\n  work -> done\n"
        ),
    )
    .expect("workflow");
    let mut rows = vec![baseline(&env, &wf, n)];
    for runners in [1, 2, 4] {
        rows.push(cloud(&env, &wf, n, runners));
    }
    let base = rows[0].wall.as_secs_f64();
    println!("\n{n} trivial sandboxed runs (dockerd, busybox), PostgreSQL store");
    println!(
        "{:<28} {:>8} {:>9} {:>16} {:>14} {:>14}",
        "mode", "wall s", "runs/min", "vs iterion run", "claim p50 ms", "claim p95 ms"
    );
    for row in &rows {
        let secs = row.wall.as_secs_f64();
        let mut lat = row.latencies_ms.clone();
        lat.sort_by(f64::total_cmp);
        let (p50, p95) = if lat.is_empty() {
            ("-".to_owned(), "-".to_owned())
        } else {
            (
                format!("{:.0}", percentile(&lat, 0.5)),
                format!("{:.0}", percentile(&lat, 0.95)),
            )
        };
        println!(
            "{:<28} {:>8.2} {:>9.1} {:>15.2}x {:>14} {:>14}",
            row.label,
            secs,
            n as f64 * 60.0 / secs,
            base / secs,
            p50,
            p95
        );
    }
}
