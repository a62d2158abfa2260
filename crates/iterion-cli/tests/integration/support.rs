//! Shared scaffolding: run the real `iterion` binary with a private store
//! against one engine, and read back what the run left in the store.

#![allow(dead_code)]
#![allow(clippy::expect_used)] // test scaffolding: a failed step fails the test

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// One of the two real engines the suite runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// dockerd on its test socket.
    Docker,
    /// Podman's compat API on its test socket.
    Podman,
}

impl Engine {
    /// Both engines.
    pub const ALL: [Engine; 2] = [Engine::Docker, Engine::Podman];

    /// The `DOCKER_HOST` of this engine; panics (fails the test) when the
    /// test environment does not name it.
    pub fn host(self) -> String {
        let var = match self {
            Engine::Docker => "ITERION_TEST_DOCKER_HOST",
            Engine::Podman => "ITERION_TEST_PODMAN_HOST",
        };
        std::env::var(var).unwrap_or_else(|_| panic!("{var} is not set: run scripts/test.sh"))
    }

    /// The driver name the engine reports.
    pub fn driver(self) -> &'static str {
        match self {
            Engine::Docker => "docker",
            Engine::Podman => "podman",
        }
    }
}

/// The busybox test image.
pub fn busybox() -> String {
    std::env::var("ITERION_TEST_BUSYBOX_IMAGE")
        .unwrap_or_else(|_| "iterion-test/busybox:local".to_owned())
}

/// The Debian test image (bash, curl, git).
pub fn slim() -> String {
    std::env::var("ITERION_TEST_SLIM_IMAGE")
        .unwrap_or_else(|_| "iterion-sandbox-slim:local".to_owned())
}

/// A private workspace + store for one test.
pub struct Sandbox {
    /// Temp root (kept alive for the test).
    pub dir: tempfile::TempDir,
    /// A private directory on the host's memory filesystem, where this
    /// test's runs write their file secrets (`ITERION_SECRETS_DIR`).
    pub shm: tempfile::TempDir,
    /// The engine the runs use.
    pub engine: Engine,
    /// Extra env for every command.
    pub env: Vec<(String, String)>,
}

impl Sandbox {
    /// A fresh workspace and store using `engine`.
    pub fn new(engine: Engine) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("iterion-e2e-")
            .tempdir()
            .expect("tempdir");
        std::fs::create_dir_all(dir.path().join("ws")).expect("workspace");
        let shm = tempfile::Builder::new()
            .prefix("iterion-e2e-")
            .tempdir_in("/dev/shm")
            .expect("a private dir on /dev/shm");
        Self {
            dir,
            shm,
            engine,
            env: Vec::new(),
        }
    }

    /// The workspace directory (the run's cwd).
    pub fn workspace(&self) -> PathBuf {
        self.dir.path().join("ws")
    }

    /// Where this test's runs keep their file secrets (one directory per
    /// run under it).
    pub fn secrets_root(&self) -> PathBuf {
        use std::os::unix::fs::MetadataExt;
        let uid = std::fs::metadata("/proc/self").expect("/proc/self").uid();
        self.shm.path().join(format!("iterion-{uid}"))
    }

    /// The store directory.
    pub fn store(&self) -> PathBuf {
        self.dir.path().join("store")
    }

    /// Write a workflow file into the workspace.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.workspace().join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(&path, text).expect("write workflow");
        path
    }

    /// Give the workspace and everything in it to `uid:gid`, as a user's
    /// checkout is: a sandbox of iterion running as root then runs as that
    /// user and can write it (a root-owned checkout is read-only to the
    /// sandbox, issue 19 item 4).
    pub fn own_workspace(&self, uid: u32, gid: u32) {
        fn walk(p: &Path, uid: u32, gid: u32) {
            std::os::unix::fs::lchown(p, Some(uid), Some(gid)).expect("chown");
            if p.is_dir() && !p.is_symlink() {
                for e in std::fs::read_dir(p).expect("read dir").flatten() {
                    walk(&e.path(), uid, gid);
                }
            }
        }
        walk(&self.workspace(), uid, gid);
    }

    /// Add an env var to every command.
    pub fn with_env(mut self, k: &str, v: &str) -> Self {
        self.env.push((k.to_owned(), v.to_owned()));
        self
    }

    /// A `Command` for the `iterion` binary with this sandbox's env.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_iterion"));
        cmd.args(args)
            .current_dir(self.workspace())
            .env("ITERION_STORE", self.store())
            .env("DOCKER_HOST", self.engine.host())
            .env("ITERION_MODE", "local")
            .env_remove("ITERION_SANDBOX_DEFAULT")
            .env_remove("ITERION_SANDBOX_OVERRIDE")
            .env_remove("ITERION_SANDBOX_PREFLIGHT")
            .env_remove("ITERION_SANDBOX_DOCKER_BINDS")
            .env("ITERION_SECRETS_DIR", self.shm.path())
            .env("ITERION_SANDBOX_DEFAULT_IMAGE", busybox());
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd
    }

    /// Run `iterion ARGS`, returning its output.
    pub fn iterion(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("spawn iterion")
    }

    /// `iterion run FILE --json ARGS…`: the final JSON document and exit code.
    pub fn run(&self, file: &Path, extra: &[&str]) -> RunResult {
        let file = file.to_string_lossy().into_owned();
        let mut args = vec!["run", file.as_str(), "--json"];
        args.extend_from_slice(extra);
        run_result(self.iterion(&args))
    }

    /// `iterion resume --run-id RUN --json --no-interactive ARGS…`.
    pub fn resume(&self, run_id: &str, extra: &[&str]) -> RunResult {
        let mut args = vec!["resume", "--run-id", run_id, "--json", "--no-interactive"];
        args.extend_from_slice(extra);
        run_result(self.iterion(&args))
    }

    /// The run's events (`iterion events RUN --json`).
    pub fn events(&self, run_id: &str) -> Vec<Value> {
        Self::events_of(self.command(&["events", run_id, "--json"]))
    }

    /// The events of a run held by the directory store `store`.
    pub fn events_in(&self, store: &Path, run_id: &str) -> Vec<Value> {
        let mut cmd = self.command(&["events", run_id, "--json"]);
        cmd.env("ITERION_STORE", store);
        Self::events_of(cmd)
    }

    fn events_of(mut cmd: Command) -> Vec<Value> {
        let out = cmd.output().expect("spawn iterion events");
        assert!(
            out.status.success(),
            "events failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).expect("event json"))
            .collect()
    }

    /// The run's files (`iterion files RUN --json`).
    pub fn files(&self, run_id: &str) -> Value {
        let out = self.iterion(&["files", run_id, "--json"]);
        assert!(
            out.status.success(),
            "files failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("files json")
    }
}

/// Parse what `iterion run|resume --json` printed: the last JSON line.
fn run_result(out: Output) -> RunResult {
    parse_run_output(&out)
}

/// What `iterion run|resume --json` said.
#[derive(Debug)]
pub struct RunResult {
    /// Exit code.
    pub code: Option<i32>,
    /// The `{"run_id","status","failure_code"}` document.
    pub doc: Value,
    /// Raw stdout.
    pub stdout: String,
    /// Raw stderr (the human view).
    pub stderr: String,
}

impl RunResult {
    /// The run id.
    pub fn run_id(&self) -> String {
        self.doc["run_id"]
            .as_str()
            .unwrap_or_else(|| panic!("no run id; stdout={} stderr={}", self.stdout, self.stderr))
            .to_owned()
    }

    /// The terminal status.
    pub fn status(&self) -> &str {
        self.doc["status"].as_str().unwrap_or("")
    }

    /// The failure code, if any.
    pub fn failure_code(&self) -> Option<&str> {
        self.doc["failure_code"].as_str()
    }
}

/// Events of a type.
pub fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

/// Whether a container named `iterion-<run>` still exists on `engine`.
pub fn container_exists(engine: Engine, run_id: &str) -> bool {
    let out = Command::new("docker")
        .args([
            "-H",
            &engine.host(),
            "ps",
            "-a",
            "--filter",
            &format!("name=iterion-{run_id}"),
            "-q",
        ])
        .output()
        .expect("docker ps");
    !String::from_utf8_lossy(&out.stdout).trim().is_empty()
}

/// What `iterion run --json` printed, from a finished process's output (for
/// tests that build the command themselves, e.g. to drop an inherited var).
pub fn parse_run_output(out: &Output) -> RunResult {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let doc: Value = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or(Value::Null);
    RunResult {
        code: out.status.code(),
        doc,
        stdout,
        stderr,
    }
}

/// A fresh PostgreSQL schema of the test database for one test, named in
/// `ITERION_STORE` with `?schema=`; dropped (with everything the store put
/// in it) when the guard goes, so tests sharing the database never see each
/// other's runs.
pub struct PgSchema {
    /// `$ITERION_TEST_POSTGRES_URL`, without our parameter.
    pub base: String,
    /// The schema name.
    pub name: String,
}

impl PgSchema {
    /// A new, not yet created schema (the store creates it on first use).
    pub fn new(tag: &str) -> Self {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let base = std::env::var("ITERION_TEST_POSTGRES_URL").unwrap_or_else(|_| {
            panic!("ITERION_TEST_POSTGRES_URL is not set: run scripts/test.sh")
        });
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let name = format!(
            "e2e_{tag}_{}_{nanos}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        Self { base, name }
    }

    /// The `ITERION_STORE` URL naming this schema.
    pub fn url(&self) -> String {
        let sep = if self.base.contains('?') { '&' } else { '?' };
        format!("{}{sep}schema={}", self.base, self.name)
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        let (base, name) = (self.base.clone(), self.name.clone());
        let drop_it = async move {
            let (client, conn) = tokio_postgres::connect(&base, tokio_postgres::NoTls).await?;
            let driver = tokio::spawn(conn);
            // `name` is ours: [a-z0-9_] only, so it needs no escaping.
            client
                .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{name}\" CASCADE"))
                .await?;
            drop(client);
            let _ = driver.await;
            Ok::<(), tokio_postgres::Error>(())
        };
        let outcome = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(drop_it);
        if let Err(e) = outcome
            && !std::thread::panicking()
        {
            panic!("dropping test schema {}: {e}", self.name);
        }
    }
}

/// Whether schema `name` exists in the test database at `base`.
pub fn pg_schema_exists(base: &str, name: &str) -> bool {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(async {
            let (client, conn) = tokio_postgres::connect(base, tokio_postgres::NoTls)
                .await
                .expect("connect to ITERION_TEST_POSTGRES_URL (run scripts/test.sh)");
            tokio::spawn(conn);
            client
                .query_opt(
                    "SELECT 1 FROM information_schema.schemata WHERE schema_name = $1",
                    &[&name],
                )
                .await
                .expect("query schemata")
                .is_some()
        })
}

/// The event types, in order.
pub fn types(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or("").to_owned())
        .collect()
}

/// The one event of `kind` (fails the test unless exactly one).
pub fn one<'a>(events: &'a [Value], kind: &str) -> &'a Value {
    let found = of_type(events, kind);
    assert_eq!(found.len(), 1, "expected one {kind}: {:?}", types(events));
    found[0]
}

/// `node_finished.output` of `node`.
pub fn node_output<'a>(events: &'a [Value], node: &str) -> &'a Value {
    events
        .iter()
        .find(|e| e["type"] == "node_finished" && e["node_id"] == node)
        .map(|e| &e["data"]["output"])
        .unwrap_or_else(|| panic!("no node_finished for {node}: {:?}", types(events)))
}

/// `iterion run FILE --json EXTRA…` that must end `finished` (exit 0): its
/// result, run id and events (all printed when it does not).
pub fn run_to_finish(sb: &Sandbox, file: &Path, extra: &[&str]) -> (RunResult, String, Vec<Value>) {
    let res = sb.run(file, extra);
    let run_id = res.run_id();
    let events = sb.events(&run_id);
    assert_eq!(
        (res.code, res.status()),
        (Some(0), "finished"),
        "{:?}: {}\n{}",
        sb.engine,
        res.stderr,
        serde_json::to_string_pretty(&events).unwrap_or_default()
    );
    (res, run_id, events)
}

/// `iterion runs --json`.
pub fn runs(sb: &Sandbox) -> Vec<Value> {
    let out = sb.iterion(&["runs", "--json"]);
    assert!(
        out.status.success(),
        "runs failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).expect("runs json");
    doc["runs"].as_array().cloned().unwrap_or_default()
}

/// One run of `iterion runs --json`.
pub fn run_record(sb: &Sandbox, run_id: &str) -> Value {
    runs(sb)
        .into_iter()
        .find(|r| r["id"] == run_id)
        .unwrap_or_else(|| panic!("run {run_id} not in the store"))
}

/// Poll `cond` every 200 ms for at most `limit`.
pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if cond() {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A background `iterion run` whose only node is running.
pub struct Spawned {
    /// The `iterion run` process.
    pub child: Child,
    /// Its run.
    pub run_id: String,
}

/// Spawn `iterion run FILE --json` and wait (bounded) until its node has
/// started in the store.
pub fn spawn_until_node_started(sb: &Sandbox, file: &Path) -> Spawned {
    let file = file.to_string_lossy().into_owned();
    let mut child = sb
        .command(&["run", &file, "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn iterion run");
    let mut run_id = String::new();
    let mut exited = false;
    let started = wait_until(Duration::from_secs(60), || {
        if child.try_wait().ok().flatten().is_some() {
            exited = true;
            return true;
        }
        if run_id.is_empty() {
            if let Some(r) = runs(sb).first() {
                run_id = r["id"].as_str().unwrap_or("").to_owned();
            }
            if run_id.is_empty() {
                return false;
            }
        }
        let out = sb.iterion(&["events", &run_id, "--json"]);
        String::from_utf8_lossy(&out.stdout).contains("\"node_started\"")
    });
    if exited {
        let out = child.wait_with_output().expect("output");
        panic!(
            "iterion run exited before its node started (run {run_id:?}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(started, "node never started (run {run_id:?})");
    Spawned { child, run_id }
}

/// Spawn `iterion ARGS` (a `run` or `resume` of `run_id`, whose events
/// the directory store `store` holds) and wait (bounded) until its node
/// `node` has started.
pub fn spawn_until_node(
    sb: &Sandbox,
    args: &[&str],
    store: &Path,
    run_id: &str,
    node: &str,
) -> Child {
    let mut child = sb
        .command(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn iterion");
    let mut exited = false;
    let started = wait_until(Duration::from_secs(60), || {
        if child.try_wait().ok().flatten().is_some() {
            exited = true;
            return true;
        }
        sb.events_in(store, run_id)
            .iter()
            .any(|e| e["type"] == "node_started" && e["node_id"] == node)
    });
    if exited {
        let out = child.wait_with_output().expect("output");
        panic!(
            "iterion {args:?} exited before {node} started: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(started, "{node} of run {run_id} never started");
    child
}

/// Send `sig` (`-INT`, `-TERM`…) to `child` with kill(1).
pub fn signal(child: &Child, sig: &str) {
    let status = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill {sig} failed");
}

/// Wait (bounded) for a spawned `iterion run --json` and read its output.
pub fn wait_child(mut child: Child, limit: Duration) -> RunResult {
    let ok = wait_until(limit, || child.try_wait().expect("try_wait").is_some());
    if !ok {
        let _ = child.kill();
        panic!("iterion did not exit within {limit:?}");
    }
    parse_run_output(&child.wait_with_output().expect("output"))
}

/// Force-remove a run's container (cleanup after a failed assertion).
pub fn force_remove(engine: Engine, run_id: &str) {
    let _ = Command::new("docker")
        .args([
            "-H",
            &engine.host(),
            "rm",
            "-f",
            &format!("iterion-{run_id}"),
        ])
        .output();
}

/// What a run left on `engine` and on this host: its container, network,
/// volumes and nftables tables, by name. Empty when the run released
/// everything.
pub fn leftovers(engine: Engine, run_id: &str) -> Vec<String> {
    let mut left = Vec::new();
    let docker = |args: &[&str]| {
        let out = Command::new("docker")
            .args(["-H", &engine.host()])
            .args(args)
            .output()
            .expect("docker");
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let label = format!("label=iterion.io/run-id={run_id}");
    for id in docker(&["ps", "-aq", "--filter", &label]) {
        left.push(format!("container {id}"));
    }
    for id in docker(&["network", "ls", "-q", "--filter", &label]) {
        left.push(format!("network {id}"));
    }
    for id in docker(&["volume", "ls", "-q", "--filter", &label]) {
        left.push(format!("volume {id}"));
    }
    left.extend(
        nft_tables_of(run_id)
            .into_iter()
            .map(|t| format!("rule {t}")),
    );
    left
}

/// The nftables tables of a run (`table inet iterion-<run>`, `table netdev
/// iterion-<run>`), as `nft list tables` names them.
pub fn nft_tables_of(run_id: &str) -> Vec<String> {
    let out = Command::new("nft")
        .args(["list", "tables"])
        .output()
        .expect("nft list tables (scripts/setup.sh installs nftables)");
    assert!(out.status.success(), "nft list tables failed");
    let suffix = format!(" iterion-{run_id}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| l.ends_with(&suffix))
        .map(str::to_owned)
        .collect()
}

/// `iterion run FILE --sandbox none --json` on a pseudo-terminal (util-linux
/// `script`), with this sandbox's env, `input` typed on it: the output.
pub fn run_on_a_terminal(sb: &Sandbox, file: &Path, input: &[u8]) -> std::process::Output {
    use std::io::Write as _;
    let base = sb.command(&[]);
    let line = format!(
        "{} run {} --sandbox none --json",
        env!("CARGO_BIN_EXE_iterion"),
        file.display()
    );
    let mut cmd = std::process::Command::new("script");
    cmd.args(["-qec", &line, "/dev/null"])
        .current_dir(sb.workspace())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (k, v) in base.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let mut child = cmd.spawn().expect("script (util-linux) runs");
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}
