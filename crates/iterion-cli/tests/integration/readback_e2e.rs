//! Issue 8 end to end (ADR-143, facts §10): files a node writes into
//! `$ITERION_ARTIFACT_FILES_DIR` and into a declared read-back path come back
//! through the real `iterion` binary — `iterion files --json`, `iterion files
//! --get`, the event stream — on dockerd and Podman, with host binds and
//! bindless (`ITERION_SANDBOX_DOCKER_BINDS=none`, per-run named volumes).
//!
//! Covered here: exact listings with sha256 (nested dirs, a 50 MiB file,
//! unicode names, an empty file), a container killed mid-run still drained
//! (R12's "not promised" is about a pod that is *gone*; a stopped container
//! keeps its volumes and the archive API still serves them), a member over the
//! cap declined with the rest kept (R8, one attempt; the two-attempt sum is
//! metered by the store's drain record and is exercised through the real
//! docker driver in `crates/iterion-e2e/tests/integration/readback/attempts.rs`,
//! because `iterion run` drains once), a hostile tree (symlinks out, a
//! symlinked dir, a hardlink, a fifo, a device node) declined by name with
//! nothing written outside the store's run file area, the R6/R13 direction
//! check of `ITERION_ARTIFACT_FILES_DIR` on the real wiring, the PostgreSQL
//! twin (R10) and the human `iterion files` view.

#![allow(clippy::expect_used, clippy::unwrap_used)] // test helpers: a failed step fails the test

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::support::{Engine, RunResult, Sandbox, of_type, parse_run_output};

/// How the local engine serves storage the driver owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Binds {
    /// Host binds (the default on a local engine).
    Bind,
    /// `ITERION_SANDBOX_DOCKER_BINDS=none`: per-run named volumes.
    Bindless,
}

const RUN_FILES: &str = "/iterion/artifact-files";
const BIG: usize = 50 * 1024 * 1024;

fn sandbox(engine: Engine, binds: Binds) -> Sandbox {
    let sb = Sandbox::new(engine);
    match binds {
        Binds::Bind => sb,
        Binds::Bindless => sb.with_env("ITERION_SANDBOX_DOCKER_BINDS", "none"),
    }
}

/// `iterion run FILE --json ARGS…` with no inherited read-back settings.
fn run(sb: &Sandbox, file: &Path, extra: &[&str]) -> RunResult {
    let file = file.to_string_lossy().into_owned();
    let mut args = vec!["run", file.as_str(), "--json"];
    args.extend_from_slice(extra);
    parse_run_output(
        &clean(sb, sb.command(&args))
            .output()
            .expect("spawn iterion"),
    )
}

/// Drop read-back settings a developer's shell may carry, unless the test
/// set them itself.
fn clean(sb: &Sandbox, mut cmd: Command) -> Command {
    for var in ["ITERION_SANDBOX_READBACK_CAP", "ITERION_ARTIFACT_FILES_DIR"] {
        if !sb.env.iter().any(|(k, _)| k == var) {
            cmd.env_remove(var);
        }
    }
    cmd
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The deterministic 50 MiB body the node writes with `yes iterion | head`.
fn big_body() -> Vec<u8> {
    b"iterion\n".iter().copied().cycle().take(BIG).collect()
}

/// `path → (size, sha256, status)` of `iterion files --json`.
fn listing(files: &Value) -> Vec<(String, u64, String, String)> {
    let mut rows: Vec<_> = files["files"]
        .as_array()
        .expect("files array")
        .iter()
        .map(|f| {
            (
                f["path"].as_str().expect("path").to_owned(),
                f["size"].as_u64().expect("size"),
                f["sha256"].as_str().expect("sha256").to_owned(),
                f["status"].as_str().expect("status").to_owned(),
            )
        })
        .collect();
    rows.sort();
    rows
}

fn expected(rows: &[(&str, &[u8])]) -> Vec<(String, u64, String, String)> {
    let mut rows: Vec<_> = rows
        .iter()
        .map(|(p, body)| {
            (
                (*p).to_owned(),
                body.len() as u64,
                sha256_hex(body),
                "stored".to_owned(),
            )
        })
        .collect();
    rows.sort();
    rows
}

/// `iterion files RUN --get PATH -o OUT`, returning OUT's bytes.
fn get(sb: &Sandbox, run_id: &str, path: &str) -> Vec<u8> {
    let out = sb.dir.path().join("fetched");
    let _ = std::fs::remove_file(&out);
    let res = sb.iterion(&[
        "files",
        run_id,
        "--get",
        path,
        "-o",
        out.to_str().expect("utf-8 temp path"),
    ]);
    assert!(
        res.status.success(),
        "files --get {path} failed: {}",
        String::from_utf8_lossy(&res.stderr)
    );
    std::fs::read(&out).expect("fetched file")
}

fn assert_finished(res: &RunResult) {
    assert_eq!(
        (res.code, res.status()),
        (Some(0), "finished"),
        "run did not finish: {:?}\nstderr: {}",
        res.doc,
        res.stderr
    );
}

/// The `output` of the named node's `node_finished` event.
fn node_output<'a>(events: &'a [Value], node: &str) -> &'a Value {
    &of_type(events, "node_finished")
        .into_iter()
        .find(|e| e["node_id"] == node)
        .unwrap_or_else(|| panic!("no node_finished for {node}: {events:#?}"))["data"]["output"]
}

const ALL_WORKFLOW: &str = r#"
schema probe:
  dir: string
  writable: bool

tool write:
  command: `set -e
D="$ITERION_ARTIFACT_FILES_DIR"
mkdir -p "$D/a/b/c" "$D/résumé" /out/deep/er
printf 'top' > "$D/top.txt"
printf 'nested leaf' > "$D/a/b/c/leaf.txt"
printf 'unicode body' > "$D/résumé/naïve-文件.txt"
: > "$D/empty.txt"
yes iterion | head -c 52428800 > "$D/big.bin"
printf 'declared' > /out/deep/er/result.json
printf 'top of out' > /out/top.txt
W=false; [ -d "$D" ] && [ -w "$D" ] && W=true
printf '{"dir": "%s", "writable": %s}' "$D" "$W"`
  output: probe

workflow readback_all:
  entry: write
  sandbox:
    image: "iterion-test/busybox:local"
    host_state: none
    read_back: ["/out"]
  write -> done
"#;

/// Every file comes back exactly (path, size, sha256), the drain is
/// complete, `--get` returns the bytes, and the run-files variable names the
/// kept storage (R6/R13 on the real wiring).
fn every_file_comes_back(engine: Engine, binds: Binds) {
    let sb = sandbox(engine, binds);
    let wf = sb.write("all.iter", ALL_WORKFLOW);
    let res = run(&sb, &wf, &[]);
    assert_finished(&res);
    let id = res.run_id();

    let events = sb.events(&id);
    assert_eq!(
        node_output(&events, "write"),
        &serde_json::json!({"dir": RUN_FILES, "writable": true}),
        "{engine:?}/{binds:?}: ITERION_ARTIFACT_FILES_DIR must name the kept run-files storage"
    );
    let drained = of_type(&events, "sandbox_runfiles_drained");
    assert_eq!(drained.len(), 1, "{events:#?}");
    assert_eq!(drained[0]["data"]["driver"], engine.driver());
    assert_eq!(drained[0]["data"]["files"], 7);
    assert!(of_type(&events, "sandbox_runfiles_drain_failed").is_empty());
    let started = of_type(&events, "sandbox_started");
    assert_eq!(
        started[0]["data"]["driver"],
        engine.driver(),
        "{started:#?}"
    );
    let dropped = of_type(&events, "sandbox_host_binds_dropped");
    match binds {
        Binds::Bind => assert!(dropped.is_empty(), "{dropped:#?}"),
        // Bindless: the workspace and run-files binds become volumes; the
        // promise is kept, so nothing is withdrawn.
        Binds::Bindless => {
            for d in &dropped {
                assert_eq!(d["data"]["withdrawn_env"], serde_json::json!([]), "{d:#}");
            }
        }
    }

    let big = big_body();
    let files = sb.files(&id);
    assert_eq!(
        listing(&files),
        expected(&[
            ("top.txt", b"top"),
            ("a/b/c/leaf.txt", b"nested leaf"),
            ("résumé/naïve-文件.txt", "unicode body".as_bytes()),
            ("empty.txt", b""),
            ("big.bin", &big),
            (".iterion-readback/out/deep/er/result.json", b"declared"),
            (".iterion-readback/out/top.txt", b"top of out"),
        ]),
        "{engine:?}/{binds:?}"
    );
    assert_eq!(files["drain"]["status"], "complete", "{files:#}");
    assert_eq!(files["drain"]["declined"], serde_json::json!([]));
    assert_eq!(files["drain"]["stale"], false);

    assert_eq!(
        get(&sb, &id, "résumé/naïve-文件.txt"),
        "unicode body".as_bytes()
    );
    assert_eq!(
        get(&sb, &id, ".iterion-readback/out/deep/er/result.json"),
        b"declared"
    );
    let out = sb.iterion(&["files", &id]);
    assert!(out.status.success());
    insta::assert_snapshot!("files_complete", String::from_utf8_lossy(&out.stdout));
    let fetched = get(&sb, &id, "big.bin");
    assert!(fetched == big, "big.bin differs after --get");
    assert!(!crate::support::container_exists(engine, &id));
}

#[test]
fn docker_bind_every_file_comes_back() {
    every_file_comes_back(Engine::Docker, Binds::Bind);
}

#[test]
fn docker_bindless_every_file_comes_back() {
    every_file_comes_back(Engine::Docker, Binds::Bindless);
}

#[test]
fn podman_bind_every_file_comes_back() {
    every_file_comes_back(Engine::Podman, Binds::Bind);
}

#[test]
fn podman_bindless_every_file_comes_back() {
    every_file_comes_back(Engine::Podman, Binds::Bindless);
}

const KILLED_WORKFLOW: &str = r#"
tool write:
  command: `set -e
mkdir -p "$ITERION_ARTIFACT_FILES_DIR/before" /out
printf 'written before the kill' > "$ITERION_ARTIFACT_FILES_DIR/before/kill.txt"
printf 'declared before the kill' > /out/kill.txt
echo '{"written": true}'`

tool sleeper:
  command: `sleep 300`

workflow killed:
  entry: write
  sandbox:
    image: "iterion-test/busybox:local"
    host_state: none
    read_back: ["/out"]
  write -> sleeper
  sleeper -> done
"#;

/// Poll until `f` answers, failing the test after `limit`.
fn wait_for<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Kills the child on drop so a failing assertion never leaves a run behind.
struct Running(Child);

impl Running {
    /// Poll like [`wait_for`]; on timeout, kill the run and fail with its
    /// stderr (what it was stuck on).
    fn wait_for<T>(&mut self, what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
        let start = Instant::now();
        loop {
            if let Some(v) = f() {
                return v;
            }
            if start.elapsed() >= limit {
                let _ = self.0.kill();
                let mut stderr = String::new();
                if let Some(mut s) = self.0.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut s, &mut stderr);
                }
                panic!("timed out waiting for {what}; iterion run said:\n{stderr}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start the killed workflow, wait until its `sleeper` node runs, hand the
/// container to `act` (the engine CLI's arguments before the container
/// name), and return the run id, the final JSON document and iterion's
/// stderr once the run has ended.
fn run_then(sb: &Sandbox, act: &[&str]) -> (String, Value, String) {
    run_then_with(sb, &|_| {}, act)
}

/// [`run_then`], calling `observe(container)` while the sleeper runs.
fn run_then_with(sb: &Sandbox, observe: &dyn Fn(&str), act: &[&str]) -> (String, Value, String) {
    let wf = sb.write("killed.iter", KILLED_WORKFLOW);
    let file = wf.to_string_lossy().into_owned();
    let mut cmd = clean(sb, sb.command(&["run", &file, "--json"]));
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = Running(cmd.spawn().expect("spawn iterion run"));

    let id = child.wait_for("the run id", Duration::from_secs(60), || {
        let out = sb.iterion(&["runs", "--json"]);
        let doc: Value = serde_json::from_slice(&out.stdout).ok()?;
        doc["runs"][0]["id"].as_str().map(str::to_owned)
    });
    let container = child.wait_for("the sleeper node", Duration::from_secs(60), || {
        let out = sb.iterion(&["events", &id, "--json"]);
        let events: Vec<Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        let sleeping = of_type(&events, "node_started")
            .iter()
            .any(|e| e["node_id"] == "sleeper");
        let container = of_type(&events, "sandbox_started")
            .first()
            .and_then(|e| e["data"]["container"].as_str().map(str::to_owned));
        container.filter(|_| sleeping)
    });
    observe(&container);
    let acted = Command::new("docker")
        .args(["-H", &sb.engine.host()])
        .args(act)
        .arg(&container)
        .output()
        .expect("docker");
    assert!(
        acted.status.success(),
        "docker {act:?} {container}: {}",
        String::from_utf8_lossy(&acted.stderr)
    );
    let status = wait_for("the run to end", Duration::from_secs(90), || {
        child.0.try_wait().expect("wait iterion")
    });
    let (mut stdout, mut stderr) = (String::new(), String::new());
    if let Some(mut s) = child.0.stdout.take() {
        std::io::Read::read_to_string(&mut s, &mut stdout).expect("stdout");
    }
    if let Some(mut s) = child.0.stderr.take() {
        std::io::Read::read_to_string(&mut s, &mut stderr).expect("stderr");
    }
    let doc: Value = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or(Value::Null);
    assert_eq!(status.code(), Some(1), "{doc}\n{stderr}");
    assert_eq!(doc["run_id"], id.as_str());
    (id, doc, stderr)
}

/// The container is killed by the engine while a later node sleeps: the run
/// fails with a typed code (SANDBOX_LOST, resumable), and what the first
/// node wrote is still drained from the stopped container (its bind or its
/// volumes) at teardown.
fn killed_container_is_still_drained(engine: Engine, binds: Binds) {
    let sb = sandbox(engine, binds);
    let (id, doc, stderr) = run_then(&sb, &["kill"]);
    assert_eq!(doc["status"], "failed_resumable", "{doc}\n{stderr}");
    assert_eq!(doc["failure_code"], "SANDBOX_LOST", "{doc}\n{stderr}");

    let files = sb.files(&id);
    assert_eq!(
        listing(&files),
        expected(&[
            ("before/kill.txt", b"written before the kill"),
            (
                ".iterion-readback/out/kill.txt",
                b"declared before the kill"
            ),
        ]),
        "{engine:?}/{binds:?}: {files:#}"
    );
    assert_eq!(files["drain"]["status"], "complete", "{files:#}");
    let events = sb.events(&id);
    assert_eq!(
        of_type(&events, "sandbox_runfiles_drained").len(),
        1,
        "{events:#?}"
    );
    assert!(!crate::support::container_exists(engine, &id));
}

/// R7: the container is removed (not only stopped) mid-run, so nothing can
/// be drained. The run says so — `sandbox_runfiles_drain_failed` with
/// `container_gone`, and the stored set is marked failed — rather than
/// showing an empty set that would read as "the tool wrote nothing".
fn removed_container_is_a_failed_drain_not_an_empty_set(engine: Engine, binds: Binds) {
    let sb = sandbox(engine, binds);
    let (id, doc, stderr) = run_then(&sb, &["rm", "-f"]);
    assert_eq!(doc["failure_code"], "SANDBOX_LOST", "{doc}\n{stderr}");
    let events = sb.events(&id);
    let failed = of_type(&events, "sandbox_runfiles_drain_failed");
    assert_eq!(failed.len(), 1, "{events:#?}");
    assert_eq!(
        failed[0]["data"],
        serde_json::json!({
            "driver": engine.driver(),
            "reason": "container_gone",
            "declined": [],
            "stale": false,
        })
    );
    assert!(of_type(&events, "sandbox_runfiles_drained").is_empty());
    let files = sb.files(&id);
    assert_eq!(files["files"], serde_json::json!([]));
    assert_eq!(files["drain"]["status"], "failed", "{files:#}");
    assert_eq!(files["drain"]["reason"], "container_gone");
    let out = sb.iterion(&["files", &id]);
    assert!(out.status.success());
    insta::assert_snapshot!(
        "files_failed_container_gone",
        String::from_utf8_lossy(&out.stdout)
    );
    // The run's volumes went with its cleanup, the container with `rm -f`.
    let volumes = Command::new("docker")
        .args(["-H", &engine.host(), "volume", "ls", "-q", "--filter"])
        .arg(format!("label=iterion.io/run-id={id}"))
        .output()
        .expect("docker volume ls");
    let logs = sb.iterion(&["logs", &id]);
    assert_eq!(
        String::from_utf8_lossy(&volumes.stdout).trim(),
        "",
        "volumes left behind; run log:\n{}",
        String::from_utf8_lossy(&logs.stdout)
    );
}

#[test]
fn docker_bindless_removed_container_is_a_failed_drain() {
    removed_container_is_a_failed_drain_not_an_empty_set(Engine::Docker, Binds::Bindless);
}

#[test]
fn podman_bind_removed_container_is_a_failed_drain() {
    removed_container_is_a_failed_drain_not_an_empty_set(Engine::Podman, Binds::Bind);
}

#[test]
fn docker_bind_killed_container_is_still_drained() {
    killed_container_is_still_drained(Engine::Docker, Binds::Bind);
}

#[test]
fn docker_bindless_killed_container_is_still_drained() {
    killed_container_is_still_drained(Engine::Docker, Binds::Bindless);
}

#[test]
fn podman_bind_killed_container_is_still_drained() {
    killed_container_is_still_drained(Engine::Podman, Binds::Bind);
}

#[test]
fn podman_bindless_killed_container_is_still_drained() {
    killed_container_is_still_drained(Engine::Podman, Binds::Bindless);
}

const CAP_WORKFLOW: &str = r#"
tool write:
  command: `set -e
D="$ITERION_ARTIFACT_FILES_DIR"
mkdir -p "$D/logs" /out
printf 'small and kept' > "$D/logs/small.txt"
yes over | head -c 3000 > "$D/over-cap.bin"
printf 'declared and kept' > /out/ok.txt
yes over | head -c 3000 > /out/over-cap.bin
echo '{}'`

workflow capped:
  entry: write
  sandbox:
    image: "iterion-test/busybox:local"
    host_state: none
    read_back: ["/out"]
  write -> done
"#;

/// R8 on one attempt: a member over `ITERION_SANDBOX_READBACK_CAP` is
/// declined by name in the event and in `iterion files`; the rest is kept
/// and the run still finishes (a dropped member, never a dropped run).
fn over_cap_member_is_declined(engine: Engine, binds: Binds) {
    let sb = sandbox(engine, binds).with_env("ITERION_SANDBOX_READBACK_CAP", "2KiB");
    let wf = sb.write("capped.iter", CAP_WORKFLOW);
    let res = run(&sb, &wf, &[]);
    assert_finished(&res);
    let id = res.run_id();

    let events = sb.events(&id);
    let failed = of_type(&events, "sandbox_runfiles_drain_failed");
    assert_eq!(failed.len(), 1, "{events:#?}");
    let mut declined: Vec<String> = failed[0]["data"]["declined"]
        .as_array()
        .expect("declined")
        .iter()
        .map(|v| v.as_str().expect("name").to_owned())
        .collect();
    declined.sort();
    assert_eq!(
        declined,
        ["/iterion/artifact-files/over-cap.bin", "/out/over-cap.bin"]
    );
    assert_eq!(failed[0]["data"]["reason"], "cap_exceeded");
    assert_eq!(failed[0]["data"]["stale"], false);
    assert_eq!(failed[0]["data"]["driver"], engine.driver());

    let files = sb.files(&id);
    assert_eq!(
        listing(&files),
        expected(&[
            ("logs/small.txt", b"small and kept"),
            (".iterion-readback/out/ok.txt", b"declared and kept"),
        ])
    );
    assert_eq!(files["drain"]["status"], "partial", "{files:#}");
    assert_eq!(files["drain"]["reason"], "cap_exceeded");

    // The human view a reviewer reads: sizes, hashes, statuses and the drain
    // line. The content is deterministic, so nothing needs redacting but
    // the order of the declined names (archive order).
    let out = sb.iterion(&["files", &id]);
    assert!(out.status.success());
    let human = String::from_utf8_lossy(&out.stdout).replace(
        "/out/over-cap.bin, /iterion/artifact-files/over-cap.bin",
        "/iterion/artifact-files/over-cap.bin, /out/over-cap.bin",
    );
    insta::assert_snapshot!("files_partial_over_cap", human);
}

#[test]
fn docker_bind_over_cap_member_is_declined() {
    over_cap_member_is_declined(Engine::Docker, Binds::Bind);
}

#[test]
fn podman_bindless_over_cap_member_is_declined() {
    over_cap_member_is_declined(Engine::Podman, Binds::Bindless);
}

/// Issue 19 item 8: sparse terabytes in the run-files dir, one at the top
/// and one nested, between ordinary files, on an image stripped of `find`
/// and `stat` (at build time: the sandbox runs as a non-root user on a
/// host bind and could not remove them).
const SPARSE_WORKFLOW: &str = r#"
tool write:
  command: `set -e
D="$ITERION_ARTIFACT_FILES_DIR"
mkdir -p "$D/a/b" "$D/z"
printf 'first' > "$D/a/first.txt"
truncate -s 1099511627776 "$D/s"
printf 'nested' > "$D/a/b/c.txt"
truncate -s 1099511627776 "$D/a/b/big"
printf 'after' > "$D/z/after.txt"
printf 'last' > "$D/zz.txt"
if [ -e /bin/find ] || [ -e /bin/stat ]; then echo '{"tools": true}'; else echo '{"tools": false}'; fi`

workflow sparse:
  entry: write
  sandbox:
    build:
      dockerfile: "Dockerfile"
    host_state: none
  write -> done
"#;

/// The busybox test image without `find` and `stat`.
const STRIPPED_DOCKERFILE: &str =
    "FROM BUSYBOX\nRUN rm -f /bin/find /bin/stat /usr/bin/find /usr/bin/stat\n";

/// A sparse terabyte is declined at its tar header and never read: the run
/// finishes, the drain is partial for `cap_exceeded` naming both big files,
/// every ordinary file before, beside and after them is stored, and nothing
/// is stale (it used to take 608 s and mark everything stale).
fn sparse_terabytes_cost_nothing(engine: Engine, binds: Binds) {
    let sb = sandbox(engine, binds);
    sb.write(
        "Dockerfile",
        &STRIPPED_DOCKERFILE.replace("BUSYBOX", &crate::support::busybox()),
    );
    let wf = sb.write("sparse.iter", SPARSE_WORKFLOW);
    let res = run(&sb, &wf, &[]);
    assert_finished(&res);
    let id = res.run_id();
    let events = sb.events(&id);
    assert_eq!(
        node_output(&events, "write"),
        &serde_json::json!({"tools": false}),
        "{engine:?}/{binds:?}: find and stat were not removed"
    );
    let failed = of_type(&events, "sandbox_runfiles_drain_failed");
    assert_eq!(failed.len(), 1, "{events:#?}");
    assert_eq!(
        failed[0]["data"]["reason"], "cap_exceeded",
        "{:#}",
        failed[0]
    );
    assert_eq!(failed[0]["data"]["stale"], false);
    let mut declined: Vec<&str> = failed[0]["data"]["declined"]
        .as_array()
        .expect("declined")
        .iter()
        .map(|v| v.as_str().expect("name"))
        .collect();
    declined.sort();
    assert_eq!(
        declined,
        [
            "/iterion/artifact-files/a/b/big",
            "/iterion/artifact-files/s"
        ],
        "{engine:?}/{binds:?}"
    );
    let files = sb.files(&id);
    assert_eq!(
        listing(&files),
        expected(&[
            ("a/first.txt", b"first"),
            ("a/b/c.txt", b"nested"),
            ("z/after.txt", b"after"),
            ("zz.txt", b"last"),
        ]),
        "{engine:?}/{binds:?}"
    );
    assert_eq!(files["drain"]["status"], "partial", "{files:#}");
    assert_eq!(files["drain"]["stale"], false);
}

#[test]
fn docker_bind_sparse_terabytes_cost_nothing() {
    sparse_terabytes_cost_nothing(Engine::Docker, Binds::Bind);
}

#[test]
fn podman_bind_sparse_terabytes_cost_nothing() {
    sparse_terabytes_cost_nothing(Engine::Podman, Binds::Bind);
}

#[test]
fn podman_bindless_sparse_terabytes_cost_nothing() {
    sparse_terabytes_cost_nothing(Engine::Podman, Binds::Bindless);
}

/// The hostile tree. `CANARY` is replaced by a host path the container must
/// never reach through the drain.
const HOSTILE_WORKFLOW: &str = r#"
tool write:
  command: `set -e
D="$ITERION_ARTIFACT_FILES_DIR"
mkdir -p "$D/sub" /out
printf 'regular' > "$D/regular.txt"
printf 'nested regular' > "$D/sub/kept.txt"
ln -s /etc/passwd "$D/evil"
ln -s /etc "$D/etcdir"
ln -s ../../../../../../.. "$D/updir"
ln -s CANARY "$D/canary"
printf 'hard' > "$D/orig.txt"
ln "$D/orig.txt" "$D/hl"
mkfifo "$D/fifo"
if mknod "$D/null" c 1 3; then echo '{"mknod": true}'; else echo '{"mknod": false}'; fi
ln -s /etc/passwd /out/evil2
printf 'declared regular' > /out/fine.txt`

workflow hostile:
  entry: write
  sandbox:
    image: "iterion-test/busybox:local"
    host_state: none
    read_back: ["/out"]
  write -> done
"#;

/// Every regular file path under `root`, relative to it.
fn walk(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read_dir") {
            let entry = entry.expect("entry");
            let ty = entry.file_type().expect("file type");
            let rel = entry
                .path()
                .strip_prefix(root)
                .expect("under root")
                .to_string_lossy()
                .into_owned();
            if ty.is_dir() {
                stack.push(entry.path());
            } else {
                out.push(rel);
            }
        }
    }
    out.sort();
    out
}

/// Links, a fifo and a device node are declined by name; the regular files
/// are kept; nothing lands outside the store's run file area, and the host
/// canary the container linked to is untouched.
fn hostile_tree_is_declined(engine: Engine, binds: Binds) {
    let sb = sandbox(engine, binds);
    let canary = sb.dir.path().join("canary.txt");
    std::fs::write(&canary, "canary: untouched").expect("canary");
    let wf = sb.write(
        "hostile.iter",
        &HOSTILE_WORKFLOW.replace("CANARY", canary.to_str().expect("utf-8 temp path")),
    );
    let res = run(&sb, &wf, &[]);
    assert_finished(&res);
    let id = res.run_id();
    let events = sb.events(&id);
    let mknod = node_output(&events, "write")["mknod"] == true;

    let failed = of_type(&events, "sandbox_runfiles_drain_failed");
    assert_eq!(failed.len(), 1, "{events:#?}");
    assert_eq!(failed[0]["data"]["reason"], "archive_error");
    assert_eq!(failed[0]["data"]["stale"], false);
    let declined: Vec<&str> = failed[0]["data"]["declined"]
        .as_array()
        .expect("declined")
        .iter()
        .map(|v| v.as_str().expect("name"))
        .collect();
    let mut must: Vec<String> = ["evil", "etcdir", "updir", "canary", "fifo"]
        .iter()
        .map(|n| format!("{RUN_FILES}/{n}"))
        .collect();
    must.push("/out/evil2".to_owned());
    if mknod {
        must.push(format!("{RUN_FILES}/null"));
    }
    for name in &must {
        assert!(
            declined.contains(&name.as_str()),
            "{engine:?}/{binds:?}: {name} not declined: {declined:?}"
        );
    }
    // Of a hardlinked pair the archive carries the first name as the file
    // and the second as a link; which is first is readdir order.
    let hard: Vec<&&str> = declined
        .iter()
        .filter(|n| **n == format!("{RUN_FILES}/hl") || **n == format!("{RUN_FILES}/orig.txt"))
        .collect();
    assert_eq!(
        hard.len(),
        1,
        "exactly one of the hardlinked pair: {declined:?}"
    );
    assert_eq!(declined.len(), must.len() + 1, "{declined:?}");

    let kept_hard = if *hard[0] == format!("{RUN_FILES}/hl") {
        "orig.txt"
    } else {
        "hl"
    };
    let files = sb.files(&id);
    assert_eq!(
        listing(&files),
        expected(&[
            ("regular.txt", b"regular"),
            ("sub/kept.txt", b"nested regular"),
            (kept_hard, b"hard"),
            (".iterion-readback/out/fine.txt", b"declared regular"),
        ]),
        "{engine:?}/{binds:?}"
    );
    assert_eq!(files["drain"]["status"], "partial");
    let mut listed: Vec<&str> = files["drain"]["declined"]
        .as_array()
        .expect("declined")
        .iter()
        .map(|v| v.as_str().expect("name"))
        .collect();
    listed.sort();
    let mut from_event = declined.clone();
    from_event.sort();
    assert_eq!(listed, from_event);

    assert_eq!(
        std::fs::read_to_string(&canary).expect("canary"),
        "canary: untouched"
    );
    // The store holds its database and the run's file area, nothing else.
    let area = format!("runs/{id}/files/");
    let stray: Vec<String> = walk(&sb.store())
        .into_iter()
        .filter(|p| p.contains('/') && !p.starts_with(&area))
        .collect();
    assert!(
        stray.is_empty(),
        "written outside the run file area: {stray:?}"
    );
    let mut in_area: Vec<String> = walk(&sb.store().join(&area));
    in_area.sort();
    let mut want = vec![
        "regular.txt".to_owned(),
        "sub/kept.txt".to_owned(),
        kept_hard.to_owned(),
        ".iterion-readback/out/fine.txt".to_owned(),
    ];
    want.sort();
    assert_eq!(in_area, want);
}

#[test]
fn docker_bind_hostile_tree_is_declined() {
    hostile_tree_is_declined(Engine::Docker, Binds::Bind);
}

#[test]
fn docker_bindless_hostile_tree_is_declined() {
    hostile_tree_is_declined(Engine::Docker, Binds::Bindless);
}

#[test]
fn podman_bind_hostile_tree_is_declined() {
    hostile_tree_is_declined(Engine::Podman, Binds::Bind);
}

#[test]
fn podman_bindless_hostile_tree_is_declined() {
    hostile_tree_is_declined(Engine::Podman, Binds::Bindless);
}

const PROBE_WORKFLOW: &str = r#"
tool probe:
  command: `if env | grep -q '^ITERION_ARTIFACT_FILES_DIR='; then echo '{"named": true}'; else echo '{"named": false}'; fi`

workflow probe_env:
  entry: probe
  sandbox:
    image: "iterion-test/busybox:local"
    host_state: none
  probe -> done
"#;

/// R6/R13 converse on the host path: `--sandbox none` keeps no mount, so the
/// run-files variable is not named, nothing is declared and nothing drains
/// (a host run has no driver that binds or drains: facts §10 R5).
#[test]
fn no_sandbox_names_no_run_files_dir() {
    let sb = Sandbox::new(Engine::Docker);
    let wf = sb.write("probe.iter", PROBE_WORKFLOW);
    let res = run(&sb, &wf, &["--sandbox", "none"]);
    assert_finished(&res);
    let id = res.run_id();
    let events = sb.events(&id);
    assert_eq!(
        node_output(&events, "probe"),
        &serde_json::json!({"named": false})
    );
    assert!(of_type(&events, "sandbox_started").is_empty());
    assert!(of_type(&events, "sandbox_runfiles_drained").is_empty());
    assert!(of_type(&events, "sandbox_runfiles_drain_failed").is_empty());
    let files = sb.files(&id);
    assert_eq!(files["files"], serde_json::json!([]));
    assert!(files["drain"].is_null(), "{files:#}");
}

/// R10: the same drain through the PostgreSQL twin, in a fresh schema of
/// the shared test database (dropped at the end), so the store holds this
/// run and nothing else.
#[test]
fn postgres_store_keeps_the_same_drained_set() {
    let schema = crate::support::PgSchema::new("readback");
    let sb = Sandbox::new(Engine::Docker).with_env("ITERION_STORE", &schema.url());
    let wf = sb.write(
        "pg.iter",
        r#"
tool write:
  command: `set -e
mkdir -p "$ITERION_ARTIFACT_FILES_DIR/résumé" /out
printf 'pg body' > "$ITERION_ARTIFACT_FILES_DIR/résumé/naïve-文件.txt"
yes pg | head -c 3000000 > "$ITERION_ARTIFACT_FILES_DIR/chunks.bin"
printf 'declared' > /out/x.json
echo '{}'`

workflow pg_twin:
  entry: write
  sandbox:
    image: "iterion-test/busybox:local"
    host_state: none
    read_back: ["/out"]
  write -> done
"#,
    );
    let res = run(&sb, &wf, &[]);
    assert_finished(&res);
    let id = res.run_id();
    let chunks: Vec<u8> = b"pg\n".iter().copied().cycle().take(3_000_000).collect();
    let files = sb.files(&id);
    assert_eq!(files["run_id"], id.as_str());
    assert_eq!(
        listing(&files),
        expected(&[
            ("résumé/naïve-文件.txt", b"pg body"),
            ("chunks.bin", &chunks),
            (".iterion-readback/out/x.json", b"declared"),
        ])
    );
    assert_eq!(files["drain"]["status"], "complete");
    assert!(get(&sb, &id, "chunks.bin") == chunks, "chunks.bin differs");
    let events = sb.events(&id);
    assert_eq!(of_type(&events, "sandbox_runfiles_drained").len(), 1);
    // The store is this schema: it lists this run and nothing else.
    let out = sb.iterion(&["runs", "--json"]);
    let listed: Value = serde_json::from_slice(&out.stdout).expect("runs --json");
    let ids: Vec<&str> = listed["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .filter_map(|r| r["id"].as_str())
        .collect();
    assert_eq!(ids, vec![id.as_str()]);
    // Nothing of this run went to the embedded store.
    assert!(!sb.store().exists());
}

/// A declared path inside another declared path (or inside run-files) is
/// drained once, with its parent: each file is stored at one address and
/// charged to one cap.
#[test]
fn nested_declared_paths_are_drained_once() {
    let sb = sandbox(Engine::Docker, Binds::Bindless);
    let wf = sb.write(
        "nested.iter",
        r#"
tool write:
  command: `set -e
mkdir -p /out/sub "$ITERION_ARTIFACT_FILES_DIR/sub"
printf 'in out/sub' > /out/sub/f.txt
printf 'in run-files/sub' > "$ITERION_ARTIFACT_FILES_DIR/sub/g.txt"
echo '{}'`

workflow nested:
  entry: write
  sandbox:
    image: "iterion-test/busybox:local"
    host_state: none
    read_back: ["/out/sub", "/out", "/iterion/artifact-files/sub"]
  write -> done
"#,
    );
    let res = run(&sb, &wf, &[]);
    assert_finished(&res);
    let id = res.run_id();
    let files = sb.files(&id);
    assert_eq!(
        listing(&files),
        expected(&[
            ("sub/g.txt", b"in run-files/sub"),
            (".iterion-readback/out/sub/f.txt", b"in out/sub"),
        ]),
        "{files:#}"
    );
    let metered: Vec<&str> = files["drain"]["metered"]
        .as_array()
        .expect("metered")
        .iter()
        .map(|m| m["path"].as_str().expect("path"))
        .collect();
    assert_eq!(metered, [RUN_FILES, "/out"], "{files:#}");
}

/// A run refused after its per-run host directory (the run-files bind
/// source) was laid — here a build whose Dockerfile resolves outside the
/// workspace, refused while the launch is planned — leaves no directory
/// behind.
#[test]
fn a_refused_boot_leaves_no_run_files_dir_on_the_host() {
    let sb = Sandbox::new(Engine::Docker);
    let tmp = sb.dir.path().join("tmp");
    std::fs::create_dir_all(&tmp).expect("tmp");
    let sb = sb.with_env("TMPDIR", tmp.to_str().expect("utf-8 temp path"));
    let wf = sb.write(
        "refused.iter",
        r#"
tool noop:
  command: `echo '{}'`

workflow refused_build:
  entry: noop
  sandbox:
    build:
      dockerfile: "../../../../etc/passwd"
    host_state: none
  noop -> done
"#,
    );
    let res = run(&sb, &wf, &[]);
    assert_eq!(res.code, Some(1), "{:?}\n{}", res.doc, res.stderr);
    assert_eq!(res.status(), "failed", "{:?}\n{}", res.doc, res.stderr);
    assert_eq!(res.failure_code(), Some("SANDBOX_SPEC_REFUSED"));
    let id = res.run_id();
    let dir = tmp.join("iterion").join("sandboxes").join(&id);
    assert!(!dir.exists(), "{} left behind", dir.display());
}

/// The reaper of another store (another project's `.iterion`, another
/// test's private store) keeps a live run's sandbox: it judges only its own
/// store's resources, and a listed one whose run it does not know is kept
/// while its creator (the owner label) lives. Dry run, so a reaper of this
/// test can never remove anyone else's sandbox.
#[test]
fn another_stores_reaper_keeps_a_live_sandbox() {
    let sb = sandbox(Engine::Docker, Binds::Bind);
    let other = Sandbox::new(Engine::Docker);
    let observe = |container: &str| {
        let out = other.iterion(&["sandbox", "reap", "--dry-run", "--json"]);
        assert!(
            out.status.success(),
            "reap: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc: Value = serde_json::from_slice(&out.stdout).expect("reap json");
        let mine: Vec<&Value> = doc["decisions"]
            .as_array()
            .expect("decisions")
            .iter()
            .filter(|d| d["name"] == container)
            .collect();
        // Scoped to its own store (`iterion.io/store`), the other reaper
        // does not list this sandbox; were it listed, the live owner's
        // lease would keep it. Either way it is never reaped.
        assert!(mine.len() <= 1, "{doc:#}");
        for d in mine {
            assert_eq!(d["run"], "absent", "{doc:#}");
            assert_eq!(d["lease"], "held", "{doc:#}");
            assert_eq!(d["action"], "keep", "{doc:#}");
        }
        assert!(
            crate::support::container_exists(
                Engine::Docker,
                container.trim_start_matches("iterion-")
            ),
            "{doc:#}"
        );
    };
    let (id, doc, stderr) = run_then_with(&sb, &observe, &["kill"]);
    assert_eq!(doc["failure_code"], "SANDBOX_LOST", "{doc}\n{stderr}");
    assert!(!crate::support::container_exists(Engine::Docker, &id));
}
