//! Scaffolding of the cloud-mode tests: a real `nats-server -js` per test
//! (Debian's, a temporary store dir, a free loopback port; restartable), a
//! private PostgreSQL instance for the one test that restarts it (the
//! shared cluster is never restarted), real `iterion runner` processes,
//! and the checks every chaos test ends with: each run terminal exactly
//! once, no two runners holding one run at once (the lease history in the
//! run's events), nothing of the runs' left on the engine.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{Engine, PgSchema, Sandbox, leftovers, wait_until};

/// A free loopback port (bound, noted, released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// A private `nats-server -js`.
pub struct Natsd {
    /// Its port.
    pub port: u16,
    /// Its JetStream store dir (kept across restarts).
    pub dir: tempfile::TempDir,
    child: Option<Child>,
}

impl Natsd {
    /// Start one and wait until it accepts connections.
    pub fn start() -> Natsd {
        let dir = tempfile::Builder::new()
            .prefix("iterion-nats-")
            .tempdir()
            .expect("tempdir");
        let mut n = Natsd {
            port: free_port(),
            dir,
            child: None,
        };
        n.spawn();
        n
    }

    fn spawn(&mut self) {
        let log = std::fs::File::create(self.dir.path().join("nats.log")).expect("log");
        let child = Command::new("nats-server")
            .args([
                "-js",
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-sd",
            ])
            .arg(self.dir.path().join("js"))
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("nats-server (scripts/setup.sh installs Debian's nats-server)");
        self.child = Some(child);
        let port = self.port;
        assert!(
            wait_until(Duration::from_secs(20), || {
                std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
            }),
            "nats-server did not listen on {port}"
        );
    }

    /// `nats://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Stop it (SIGTERM, by pid) and wait for it.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(20);
            while c.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Start it again on the same port and store.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }
}

impl Drop for Natsd {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A private PostgreSQL 15 instance (initdb into a temp dir as the
/// postgres user, its own port), for the test that restarts it.
pub struct PrivatePg {
    /// Data dir.
    pub dir: tempfile::TempDir,
    /// Port.
    pub port: u16,
}

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

fn as_postgres(cmd: &str) -> std::process::Output {
    Command::new("su")
        .args(["postgres", "-c", cmd])
        .output()
        .expect("su postgres")
}

impl PrivatePg {
    /// initdb and start.
    pub fn start() -> PrivatePg {
        let dir = tempfile::Builder::new()
            .prefix("iterion-pg-")
            .tempdir()
            .expect("tempdir");
        let status = Command::new("chown")
            .args(["postgres:postgres"])
            .arg(dir.path())
            .status()
            .expect("chown");
        assert!(status.success());
        let data = dir.path().display().to_string();
        let out = as_postgres(&format!(
            "{PG_BIN}/initdb -D {data}/data -U iterion -A trust --no-sync >/dev/null"
        ));
        assert!(out.status.success(), "initdb: {out:?}");
        let pg = PrivatePg {
            dir,
            port: free_port(),
        };
        pg.pg_ctl("start");
        pg
    }

    fn pg_ctl(&self, action: &str) {
        let data = self.dir.path().display().to_string();
        let out = as_postgres(&format!(
            "{PG_BIN}/pg_ctl -D {data}/data -w -t 60 -m fast -l {data}/log -o \"-p {} -k {data} -c listen_addresses=127.0.0.1 -c fsync=off\" {action}",
            self.port
        ));
        assert!(out.status.success(), "pg_ctl {action}: {out:?}");
    }

    /// `postgres://iterion@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://iterion@127.0.0.1:{}/postgres", self.port)
    }

    /// Stop (fast: connections are cut).
    pub fn stop(&self) {
        self.pg_ctl("stop");
    }

    /// Start after a stop.
    pub fn start_again(&self) {
        self.pg_ctl("start");
    }
}

impl Drop for PrivatePg {
    fn drop(&mut self) {
        let data = self.dir.path().display().to_string();
        let _ = as_postgres(&format!("{PG_BIN}/pg_ctl -D {data}/data -m immediate stop"));
    }
}

/// A spawned `iterion runner`.
pub struct RunnerProc {
    /// `ITERION_RUNNER_ID`.
    pub id: String,
    /// The process.
    pub child: Child,
    /// Its stderr log.
    pub log: PathBuf,
}

impl RunnerProc {
    /// SIGKILL it (by pid) and reap it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM it and wait (bounded) for its exit code.
    pub fn term(&mut self, limit: Duration) -> Option<i32> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + limit;
        loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                return s.code();
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("runner {} did not drain within {limit:?}", self.id);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for RunnerProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One cloud deployment: NATS, a PostgreSQL store, runners on one engine.
pub struct Cloud {
    /// Workspace, env and engine.
    pub sb: Sandbox,
    /// The NATS server.
    pub nats: Natsd,
    /// Keeps the test schema (shared cluster) alive, when one is used.
    pub schema: Option<PgSchema>,
    /// Runners started.
    pub runners: Vec<RunnerProc>,
    /// Runs submitted.
    pub submitted: Vec<String>,
}

impl Cloud {
    /// NATS + a fresh schema of the shared PostgreSQL.
    pub fn new(engine: Engine, tag: &str) -> Cloud {
        let schema = PgSchema::new(tag);
        let url = schema.url();
        Self::with_store(engine, url, Some(schema))
    }

    /// NATS + the store at `store_url`.
    pub fn with_store(engine: Engine, store_url: String, schema: Option<PgSchema>) -> Cloud {
        let nats = Natsd::start();
        let sb = Sandbox::new(engine);
        let work = sb.dir.path().join("runner-work");
        let sb = sb
            .with_env("ITERION_MODE", "cloud")
            .with_env("ITERION_STORE", &store_url)
            .with_env("ITERION_NATS_URL", &nats.url())
            .with_env("ITERION_SANDBOX_HOST", "local")
            .with_env("ITERION_RUNNER_WORKDIR", &work.to_string_lossy())
            .with_env("ITERION_LOCK_TTL", "4s")
            .with_env("ITERION_HEARTBEAT_INTERVAL", "1s")
            .with_env("ITERION_RUNNER_ACK_WAIT", "8s")
            .with_env("ITERION_RUNNER_NAK_DELAY", "1s")
            .with_env("ITERION_RUNNER_DRAIN_GRACE", "30s")
            .with_env("ITERION_RUNNER_REAP_INTERVAL", "3s")
            .with_env("ITERION_LOG_LEVEL", "info");
        Cloud {
            sb,
            nats,
            schema,
            runners: Vec::new(),
            submitted: Vec::new(),
        }
    }

    /// Set a variable for every later command of this deployment.
    pub fn set_env(&mut self, k: &str, v: &str) {
        self.sb.env.push((k.to_owned(), v.to_owned()));
    }

    /// Start a runner named `id` with extra env.
    pub fn runner(&mut self, id: &str, extra: &[(&str, &str)]) -> usize {
        let log = self.sb.dir.path().join(format!("runner-{id}.log"));
        let mut cmd = self.sb.command(&["runner"]);
        cmd.env("ITERION_RUNNER_ID", id)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log"));
        for (k, v) in extra {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawn iterion runner");
        self.runners.push(RunnerProc {
            id: id.to_owned(),
            child,
            log,
        });
        self.runners.len() - 1
    }

    /// `iterion submit FILE --json ARGS…`; the run id.
    pub fn submit(&mut self, file: &Path, extra: &[&str]) -> String {
        let f = file.to_string_lossy().into_owned();
        let mut args = vec!["submit", f.as_str(), "--json"];
        args.extend_from_slice(extra);
        let out = self.sb.iterion(&args);
        assert_eq!(out.status.code(), Some(0), "submit: {out:?}");
        let doc: Value = serde_json::from_slice(&out.stdout).expect("submit json");
        assert_eq!(doc["status"], "queued", "{doc}");
        let id = doc["run_id"].as_str().expect("run_id").to_owned();
        if !self.submitted.contains(&id) {
            self.submitted.push(id.clone());
        }
        id
    }

    /// The run's events (`iterion events ID --json`).
    pub fn events(&self, run: &str) -> Vec<Value> {
        let out = self.sb.iterion(&["events", run, "--json"]);
        assert!(out.status.success(), "events {run}: {out:?}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Every run (`iterion runs --json`), by id.
    pub fn statuses(&self) -> std::collections::BTreeMap<String, String> {
        let out = self.sb.iterion(&["runs", "--json"]);
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        doc["runs"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|r| {
                        (
                            r["id"].as_str().unwrap_or("").to_owned(),
                            r["status"].as_str().unwrap_or("").to_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Wait (bounded) until every submitted run is in one of `done`.
    pub fn wait_all(&self, limit: Duration, done: &[&str]) {
        let ok = wait_until(limit, || {
            let s = self.statuses();
            self.submitted
                .iter()
                .all(|id| s.get(id).is_some_and(|st| done.contains(&st.as_str())))
        });
        assert!(
            ok,
            "runs not settled within {limit:?}: {:?}\n{}",
            self.statuses(),
            self.runner_logs()
        );
    }

    /// The runners' logs, for failure messages.
    pub fn runner_logs(&self) -> String {
        self.runners
            .iter()
            .map(|r| {
                let text = std::fs::read_to_string(&r.log).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(40).collect();
                format!(
                    "--- runner {} ---\n{}",
                    r.id,
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// (runner id, log) of every runner.
    pub fn logs(&self) -> Vec<(String, String)> {
        self.runners
            .iter()
            .map(|r| {
                (
                    r.id.clone(),
                    std::fs::read_to_string(&r.log).unwrap_or_default(),
                )
            })
            .collect()
    }

    /// What this test's runs left on the engine.
    pub fn leftovers(&self) -> Vec<String> {
        self.submitted
            .iter()
            .flat_map(|id| leftovers(self.sb.engine, id))
            .collect()
    }
}

/// The lease history of one run (its `run_claimed`/`run_released`): claims
/// in KV-revision order; each claim but the last is released before the
/// next one (or its runner was killed by the test before the next claim);
/// revisions only grow. `killed`: runner ids the test SIGKILLed.
pub fn check_lease_history(run: &str, events: &[Value], killed: &[&str]) -> Result<usize, String> {
    check_lease_history_with_logs(run, events, killed, &[])
}

/// When the store itself was down, a runner cannot record `run_released`:
/// then its own log must show the delivery settled (lease let go) before
/// the next claim. `logs`: (runner id, log text).
pub fn settled_in_log(
    log: &str,
    run: &str,
    delivery: u64,
    attempt: u64,
) -> Option<time::OffsetDateTime> {
    log.lines()
        .filter(|l| {
            l.contains("delivery settled")
                && l.contains(run)
                && l.contains(&format!("delivery={delivery} "))
                && l.contains(&format!("attempt={attempt} "))
        })
        .find_map(|l| {
            let ts = l.split_whitespace().next()?;
            time::OffsetDateTime::parse(ts, &time::format_description::well_known::Rfc3339).ok()
        })
}

/// [`check_lease_history`], accepting a release the runner's log proves
/// when the store could not record it.
pub fn check_lease_history_with_logs(
    run: &str,
    events: &[Value],
    killed: &[&str],
    logs: &[(String, String)],
) -> Result<usize, String> {
    let claims: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "run_claimed")
        .collect();
    let mut last_rev = 0;
    for (i, c) in claims.iter().enumerate() {
        let rev = c["data"]["lease_revision"].as_u64().unwrap_or(0);
        if rev <= last_rev {
            return Err(format!(
                "{run}: claim {i} at revision {rev} after {last_rev}"
            ));
        }
        last_rev = rev;
        let runner = c["data"]["runner_id"].as_str().unwrap_or("");
        let seq = c["seq"].as_u64().unwrap_or(0);
        let next_seq = claims
            .get(i + 1)
            .and_then(|n| n["seq"].as_u64())
            .unwrap_or(u64::MAX);
        let released = events.iter().any(|e| {
            e["type"] == "run_released"
                && e["data"]["runner_id"] == runner
                && e["data"]["delivery"] == c["data"]["delivery"]
                && e["data"]["attempt"] == c["data"]["attempt"]
                && e["seq"].as_u64().is_some_and(|s| s > seq && s < next_seq)
        });
        let next_at = claims.get(i + 1).and_then(|n| {
            time::OffsetDateTime::parse(
                n["timestamp"].as_str()?,
                &time::format_description::well_known::Rfc3339,
            )
            .ok()
        });
        let logged = logs.iter().any(|(id, log)| {
            id == runner
                && settled_in_log(
                    log,
                    run,
                    c["data"]["delivery"].as_u64().unwrap_or(0),
                    c["data"]["attempt"].as_u64().unwrap_or(0),
                )
                .is_some_and(|at| next_at.is_none_or(|n| at <= n))
        });
        if !released && !logged && !killed.contains(&runner) {
            return Err(format!(
                "{run}: claim {i} by {runner} was not released before the next claim (and its runner was not killed): {claims:?}"
            ));
        }
    }
    Ok(claims.len())
}

/// Count the events of `kind`.
pub fn count(events: &[Value], kind: &str) -> usize {
    events.iter().filter(|e| e["type"] == kind).count()
}

/// A small async NATS client for what the CLI has no verb for: the DLQ's
/// contents, the queue's depth, raw publishes (malformed messages,
/// duplicates past the dedup), streams made by someone else.
pub struct Js {
    rt: tokio::runtime::Runtime,
    js: async_nats::jetstream::Context,
}

impl Js {
    /// Connect to `url`.
    pub fn connect(url: &str) -> Js {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("rt");
        let js = rt.block_on(async {
            let c = async_nats::connect(url).await.expect("connect nats");
            async_nats::jetstream::new(c)
        });
        Js { rt, js }
    }

    /// The messages a stream holds (payload as JSON, else as a string).
    pub fn messages(&self, stream: &str) -> Vec<Value> {
        self.rt.block_on(async {
            let Ok(mut s) = self.js.get_stream(stream).await else {
                return Vec::new();
            };
            let state = s.info().await.expect("info").state.clone();
            let mut out = Vec::new();
            if state.messages == 0 {
                return out;
            }
            for seq in state.first_sequence..=state.last_sequence {
                if let Ok(m) = s.get_raw_message(seq).await {
                    let v = serde_json::from_slice(&m.payload).unwrap_or_else(|_| {
                        Value::String(String::from_utf8_lossy(&m.payload).into())
                    });
                    out.push(v);
                }
            }
            out
        })
    }

    /// Wait (bounded) until `stream` exists (a runner or submit made it).
    pub fn wait_stream(&self, stream: &str) {
        let ok = wait_until(Duration::from_secs(60), || {
            self.rt
                .block_on(async { self.js.get_stream(stream).await.is_ok() })
        });
        assert!(ok, "stream {stream} never appeared");
    }

    /// Messages held by a stream.
    pub fn depth(&self, stream: &str) -> u64 {
        self.rt.block_on(async {
            match self.js.get_stream(stream).await {
                Ok(mut s) => s.info().await.map(|i| i.state.messages).unwrap_or(0),
                Err(_) => 0,
            }
        })
    }

    /// Publish raw bytes on `subject` with an optional message id; waits
    /// for the stream's ack.
    pub fn publish(&self, subject: &str, payload: &[u8], msg_id: Option<&str>) {
        self.rt.block_on(async {
            let mut p = async_nats::jetstream::message::PublishMessage::build()
                .payload(payload.to_vec().into());
            if let Some(id) = msg_id {
                p = p.message_id(id);
            }
            self.js
                .send_publish(subject.to_owned(), p)
                .await
                .expect("publish")
                .await
                .expect("publish ack");
        });
    }

    /// Create a stream as someone else would.
    pub fn create_stream(&self, config: async_nats::jetstream::stream::Config) {
        self.rt.block_on(async {
            self.js.create_stream(config).await.expect("create stream");
        });
    }

    /// A stream's config.
    pub fn stream_config(&self, name: &str) -> async_nats::jetstream::stream::Config {
        self.rt.block_on(async {
            let mut s = self.js.get_stream(name).await.expect("stream");
            s.info().await.expect("info").config.clone()
        })
    }
}

/// A workflow of one tool node, sandboxed on the busybox image.
pub fn tool_workflow(name: &str, command: &str) -> String {
    format!(
        "tool work:\n  command: `{command}`\n\nworkflow {name}:\n  entry: work\n  sandbox:\n    image: \"{}\"\n    host_state: none\n  work -> done\n",
        crate::support::busybox()
    )
}
