//! `iterion run` end to end (issue 6, and the SIGKILL proof of issue 5):
//! the real binary against real dockerd and Podman, asserting on the event
//! stream, the store and the engines. Each test loops over `Engine::ALL`
//! unless the engine cannot matter (no engine reachable, bad input).

// Helpers outside `#[test]` fns fail the test by panicking, like the tests.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::support::{
    Engine, RunResult, Sandbox, busybox, container_exists, force_remove, node_output, of_type, one,
    run_record, runs, signal, spawn_until_node_started, types, wait_child, wait_until,
};

/// One tool node printing where it ran (the kernel hostname: the
/// container's differs from the host's).
pub(crate) fn where_workflow(sandbox: &str) -> String {
    format!(
        r#"schema where_out:
  host: string

tool where:
  command: `printf '{{"host": "%s"}}' "$(cat /proc/sys/kernel/hostname)"`
  output: where_out

workflow where_am_i:
{sandbox}  entry: where
  where -> done
"#
    )
}

pub(crate) fn inline_block(image: &str) -> String {
    format!("  sandbox:\n    image: \"{image}\"\n    host_state: none\n")
}

const SLEEP_WORKFLOW: &str = r#"tool nap:
  command: "sleep 300"

workflow nap:
  sandbox:
    image: "iterion-test/busybox:local"
    host_state: none
  entry: nap
  nap -> done
"#;

fn host_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("hostname")
        .trim()
        .to_owned()
}

/// Run a prepared `iterion run … --json` command.
fn run_cmd(mut cmd: Command) -> RunResult {
    let out = cmd.output().expect("spawn iterion");
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

// ---- the hello run ---------------------------------------------------------

#[test]
fn hello_auto_default_image_runs_in_a_container_then_removes_it() {
    for engine in Engine::ALL {
        let sb = Sandbox::new(engine);
        let file = sb.write("hello.iter", &where_workflow("  sandbox: auto\n"));
        let r = sb.run(&file, &[]);
        assert_eq!(r.code, Some(0), "{engine:?}: {}", r.stderr);
        assert_eq!(r.status(), "finished");
        let run_id = r.run_id();
        let events = sb.events(&run_id);
        let started = one(&events, "sandbox_started");
        assert_eq!(started["data"]["driver"], engine.driver(), "{engine:?}");
        assert_eq!(started["data"]["mode"], "auto");
        assert_eq!(started["data"]["image"], busybox().as_str());
        let host = node_output(&events, "where")["host"].as_str().unwrap_or("");
        assert!(!host.is_empty() && host != host_hostname(), "ran on {host}");
        assert_eq!(
            types(&events).last().map(String::as_str),
            Some("run_finished")
        );
        assert!(of_type(&events, "sandbox_skipped").is_empty());
        assert!(
            !container_exists(engine, &run_id),
            "{engine:?}: container left"
        );
        assert_eq!(run_record(&sb, &run_id)["status"], "finished");
    }
}

#[test]
fn shipped_hello_example_runs_in_the_slim_image() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/hello.iter");
    let text = std::fs::read_to_string(&example).expect("examples/hello.iter");
    for engine in Engine::ALL {
        let sb = Sandbox::new(engine);
        let file = sb.write("hello.iter", &text);
        let slim = crate::support::slim();
        let r = sb.run(&file, &["--sandbox-default-image", &slim]);
        assert_eq!(r.code, Some(0), "{engine:?}: {}", r.stderr);
        let run_id = r.run_id();
        let events = sb.events(&run_id);
        let started = one(&events, "sandbox_started");
        assert_eq!(started["data"]["driver"], engine.driver());
        assert_eq!(started["data"]["image"], slim.as_str());
        let greeting = node_output(&events, "hello")["greeting"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        assert!(greeting.starts_with("hello from "), "{greeting}");
        assert!(
            !container_exists(engine, &run_id),
            "{engine:?}: container left"
        );
    }
}

// ---- precedence --------------------------------------------------------------

#[test]
fn cli_none_over_inline_block_runs_on_host_silently() {
    for engine in Engine::ALL {
        let sb = Sandbox::new(engine);
        let file = sb.write("w.iter", &where_workflow(&inline_block(&busybox())));
        let r = sb.run(&file, &["--sandbox", "none"]);
        assert_eq!(r.code, Some(0), "{}", r.stderr);
        let events = sb.events(&r.run_id());
        for kind in [
            "sandbox_skipped",
            "sandbox_started",
            "sandbox_driver_selected",
        ] {
            assert!(
                of_type(&events, kind).is_empty(),
                "{kind}: {:?}",
                types(&events)
            );
        }
        assert_eq!(
            node_output(&events, "where")["host"],
            host_hostname().as_str()
        );
    }
}

#[test]
fn cli_auto_yields_to_a_workflow_image() {
    for engine in Engine::ALL {
        let sb = Sandbox::new(engine);
        // Not the default image: the block's image must win.
        let file = sb.write(
            "w.iter",
            &where_workflow(&inline_block(&crate::support::slim())),
        );
        let r = sb.run(&file, &["--sandbox", "auto"]);
        assert_eq!(r.code, Some(0), "{engine:?}: {}", r.stderr);
        let events = sb.events(&r.run_id());
        let started = one(&events, "sandbox_started");
        assert_eq!(started["data"]["image"], crate::support::slim().as_str());
        assert_eq!(started["data"]["mode"], "inline");
        let source = started["data"]["source"].as_str().unwrap_or("");
        assert!(
            source.contains("overrides --sandbox=auto"),
            "source label: {source}"
        );
        assert!(!container_exists(engine, &r.run_id()));
    }
}

#[test]
fn sandbox_default_none_without_block_is_unsandboxed() {
    for engine in Engine::ALL {
        let sb = Sandbox::new(engine).with_env("ITERION_SANDBOX_DEFAULT", "none");
        let file = sb.write("w.iter", &where_workflow(""));
        let r = sb.run(&file, &[]);
        assert_eq!(r.code, Some(0), "{}", r.stderr);
        let events = sb.events(&r.run_id());
        assert!(of_type(&events, "sandbox_started").is_empty());
        assert!(of_type(&events, "sandbox_skipped").is_empty());
        assert_eq!(
            node_output(&events, "where")["host"],
            host_hostname().as_str()
        );
    }
}

#[test]
fn untrusted_with_sandbox_none_is_refused_at_admission() {
    for engine in Engine::ALL {
        let sb = Sandbox::new(engine);
        let file = sb.write("w.iter", &where_workflow(&inline_block(&busybox())));
        let r = sb.run(&file, &["--trust", "untrusted", "--sandbox", "none"]);
        assert_eq!(r.code, Some(1), "{}", r.stderr);
        assert_eq!(r.status(), "failed");
        assert_eq!(r.failure_code(), Some("LAUNCH_FAILED"));
        let run_id = r.run_id();
        let events = sb.events(&run_id);
        let admission = one(&events, "run_admission");
        assert_eq!(admission["data"]["decision"], "denied");
        assert_eq!(admission["data"]["code"], "untrusted_without_sandbox");
        assert!(of_type(&events, "sandbox_started").is_empty());
        assert!(of_type(&events, "node_started").is_empty());
        assert!(!container_exists(engine, &run_id));
        let record = run_record(&sb, &run_id);
        assert_eq!(record["status"], "failed");
        assert_eq!(record["failure_code"], "LAUNCH_FAILED");
    }
}

// ---- no engine reachable: degrade vs refuse ------------------------------------

/// `iterion run` with no engine reachable anywhere discovery looks.
fn run_without_engine(sb: &Sandbox, file: &Path) -> RunResult {
    let file = file.to_string_lossy().into_owned();
    let home = sb.dir.path().join("home");
    std::fs::create_dir_all(&home).expect("home");
    let mut cmd = sb.command(&["run", &file, "--json"]);
    cmd.env("DOCKER_HOST", "unix:///nonexistent.sock")
        .env_remove("CONTAINER_HOST")
        .env_remove("XDG_RUNTIME_DIR")
        .env("HOME", &home);
    for sock in [
        "/var/run/docker.sock",
        "/run/docker.sock",
        "/run/podman/podman.sock",
    ] {
        assert!(
            !Path::new(sock).exists(),
            "{sock} exists: the test would reach it"
        );
    }
    run_cmd(cmd)
}

#[test]
fn auto_degrades_to_host_when_no_engine_answers() {
    let sb = Sandbox::new(Engine::Docker);
    let file = sb.write("w.iter", &where_workflow("  sandbox: auto\n"));
    let r = run_without_engine(&sb, &file);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.status(), "finished");
    let events = sb.events(&r.run_id());
    let skipped = one(&events, "sandbox_skipped");
    let data = &skipped["data"];
    assert_eq!(data["mode"], "auto");
    assert!(!data["source"].as_str().unwrap_or("").is_empty(), "{data}");
    assert!(!data["reason"].as_str().unwrap_or("").is_empty(), "{data}");
    assert_eq!(data["file_secrets_dropped"], false);
    assert!(
        data.get("refused")
            .is_none_or(|v| v.is_null() || *v == false)
    );
    assert!(of_type(&events, "sandbox_started").is_empty());
    assert_eq!(
        node_output(&events, "where")["host"],
        host_hostname().as_str()
    );
    assert_eq!(
        types(&events).last().map(String::as_str),
        Some("run_finished")
    );
}

#[test]
fn inline_is_refused_when_no_engine_answers() {
    let sb = Sandbox::new(Engine::Docker);
    let file = sb.write("w.iter", &where_workflow(&inline_block(&busybox())));
    let r = run_without_engine(&sb, &file);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert_eq!(r.status(), "failed");
    assert_eq!(r.failure_code(), Some("SANDBOX_DRIVER_UNAVAILABLE"));
    let run_id = r.run_id();
    let events = sb.events(&run_id);
    let skipped = one(&events, "sandbox_skipped");
    assert_eq!(skipped["data"]["refused"], true);
    assert_eq!(skipped["data"]["error_code"], "SANDBOX_DRIVER_UNAVAILABLE");
    assert!(of_type(&events, "node_started").is_empty());
    let failed = one(&events, "run_failed");
    assert_eq!(failed["data"]["failure_code"], "SANDBOX_DRIVER_UNAVAILABLE");
    let record = run_record(&sb, &run_id);
    assert_eq!(record["status"], "failed");
    assert_eq!(record["failure_code"], "SANDBOX_DRIVER_UNAVAILABLE");
}

// ---- host binds dropped (bindless), ADR-143 run-files dir ------------------------

#[test]
fn bindless_driver_drops_host_binds_but_keeps_the_run_files_dir() {
    for engine in Engine::ALL {
        let sb = Sandbox::new(engine).with_env("ITERION_SANDBOX_DOCKER_BINDS", "none");
        let data_dir = sb.dir.path().join("data");
        std::fs::create_dir_all(&data_dir).expect("data dir");
        let source = data_dir.to_string_lossy().into_owned();
        let file = sb.write(
            "w.iter",
            &format!(
                r#"schema dir_out:
  dir: string
  data: string

tool show:
  command: `echo kept > "${{ITERION_ARTIFACT_FILES_DIR:-/nowhere}}/proof.txt"; printf '{{"dir": "%s", "data": "%s"}}' "${{ITERION_ARTIFACT_FILES_DIR:-unset}}" "$(test -d /data && echo present || echo absent)"`
  output: dir_out

workflow bindless:
  sandbox:
    image: "{image}"
    host_state: none
    mounts: ["type=bind,source={source},target=/data"]
  entry: show
  show -> done
"#,
                image = busybox()
            ),
        );
        let r = sb.run(&file, &[]);
        assert_eq!(r.code, Some(0), "{engine:?}: {}", r.stderr);
        let run_id = r.run_id();
        let events = sb.events(&run_id);
        let dropped = one(&events, "sandbox_host_binds_dropped");
        assert_eq!(dropped["data"]["driver"], engine.driver());
        let list = dropped["data"]["dropped"].as_array().expect("dropped list");
        assert!(
            list.iter()
                .any(|d| d["source"] == source.as_str() && d["target"] == "/data"),
            "{list:?}"
        );
        let withdrawn = dropped["data"]["withdrawn_env"]
            .as_array()
            .expect("withdrawn_env");
        assert!(
            !withdrawn.iter().any(|v| v == "ITERION_ARTIFACT_FILES_DIR"),
            "ADR-143: the run-files dir is driver-owned, never withdrawn: {withdrawn:?}"
        );
        let out = node_output(&events, "show");
        assert_eq!(out["dir"], "/iterion/artifact-files", "{engine:?}");
        assert_eq!(
            out["data"], "absent",
            "{engine:?}: the bind was not dropped"
        );
        // Served by a driver-owned volume: written in the sandbox, drained.
        let files = sb.files(&run_id);
        assert!(
            files["files"]
                .as_array()
                .is_some_and(|f| f.iter().any(|f| f["path"] == "proof.txt")),
            "{engine:?}: run file not drained: {files}"
        );
        assert!(!container_exists(engine, &run_id));
    }
}

// ---- cancellation and SIGKILL ---------------------------------------------------

#[test]
fn sigint_cancels_the_run_and_removes_the_container() {
    for engine in Engine::ALL {
        let sb = Sandbox::new(engine);
        let file = sb.write("nap.iter", SLEEP_WORKFLOW);
        let spawned = spawn_until_node_started(&sb, &file);
        let run_id = spawned.run_id.clone();
        assert!(
            container_exists(engine, &run_id),
            "{engine:?}: no container"
        );
        signal(&spawned.child, "-INT");
        let r = wait_child(spawned.child, Duration::from_secs(60));
        let left = container_exists(engine, &run_id);
        force_remove(engine, &run_id);
        assert_eq!(r.code, Some(1), "{engine:?}: {}", r.stderr);
        assert_eq!(r.status(), "cancelled", "{engine:?}: {}", r.stderr);
        assert_eq!(r.failure_code(), Some("CANCELLED"));
        assert!(!left, "{engine:?}: container left after cancel");
        let record = run_record(&sb, &run_id);
        assert_eq!(record["status"], "cancelled");
        assert_eq!(record["failure_code"], "CANCELLED");
        let events = sb.events(&run_id);
        assert!(
            !of_type(&events, "run_cancelled").is_empty(),
            "{:?}",
            types(&events)
        );
    }
}

/// Run A sleeping, SIGKILLed: its container outlives it.
fn killed_run(sb: &Sandbox) -> String {
    let file = sb.write("nap.iter", SLEEP_WORKFLOW);
    let mut spawned = spawn_until_node_started(sb, &file);
    signal(&spawned.child, "-KILL");
    let _ = spawned.child.wait();
    let run_id = spawned.run_id;
    assert!(
        container_exists(sb.engine, &run_id),
        "{:?}: the killed run's container is gone already",
        sb.engine
    );
    assert_eq!(run_record(sb, &run_id)["status"], "running");
    run_id
}

fn assert_interrupted(sb: &Sandbox, run_id: &str) {
    let record = run_record(sb, run_id);
    assert_eq!(record["status"], "failed_resumable", "{record}");
    assert_eq!(record["failure_code"], "INTERRUPTED");
    let events = sb.events(run_id);
    assert!(
        !of_type(&events, "run_interrupted").is_empty(),
        "{:?}",
        types(&events)
    );
}

#[test]
fn sigkill_then_next_run_reaps_the_orphan() {
    for engine in Engine::ALL {
        let sb = Sandbox::new(engine);
        let a = killed_run(&sb);
        let file = sb.write("w.iter", &where_workflow(""));
        let b = sb.run(&file, &["--sandbox", "none"]);
        assert_eq!(b.code, Some(0), "{}", b.stderr);
        let gone = wait_until(Duration::from_secs(30), || !container_exists(engine, &a));
        force_remove(engine, &a);
        assert!(gone, "{engine:?}: run B did not reap run A's container");
        assert_interrupted(&sb, &a);
    }
}

#[test]
fn sigkill_then_sandbox_reap_dry_run_then_reap() {
    for engine in Engine::ALL {
        let sb = Sandbox::new(engine);
        let a = killed_run(&sb);
        let decisions = |args: &[&str]| -> Vec<Value> {
            // Not `success()`: a concurrent test removing its own resource
            // mid-pass is an error row of that resource, not of ours.
            let out = sb.iterion(args);
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let doc: Value = serde_json::from_str(&text)
                .or_else(|_| {
                    text.lines()
                        .filter(|l| !l.trim().is_empty())
                        .map(serde_json::from_str)
                        .collect::<Result<Vec<Value>, _>>()
                        .map(Value::from)
                })
                .unwrap_or_else(|e| panic!("reap json: {e}: {text}"));
            let list = doc
                .as_array()
                .cloned()
                .or_else(|| doc["decisions"].as_array().cloned())
                .unwrap_or_default();
            list.into_iter()
                .filter(|d| d["run_id"] == a.as_str())
                .collect()
        };
        let dry = decisions(&["sandbox", "reap", "--dry-run", "--json"]);
        let container = dry
            .iter()
            .find(|d| d["kind"] == "container")
            .unwrap_or_else(|| panic!("{engine:?}: no decision for A's container: {dry:?}"));
        assert_eq!(container["action"], "reap", "{container}");
        assert_eq!(container["removed"], false);
        assert!(container_exists(engine, &a), "dry run removed it");
        assert_eq!(
            run_record(&sb, &a)["status"],
            "running",
            "dry run marked it"
        );

        let real = decisions(&["sandbox", "reap", "--json"]);
        let container = real
            .iter()
            .find(|d| d["kind"] == "container")
            .unwrap_or_else(|| panic!("{engine:?}: no decision: {real:?}"));
        let gone = !container_exists(engine, &a);
        force_remove(engine, &a);
        assert_eq!(container["removed"], true, "{container}");
        assert!(gone);
        assert_interrupted(&sb, &a);
    }
}

#[test]
fn a_reaper_never_touches_another_stores_live_sandbox() {
    for engine in Engine::ALL {
        let owner = Sandbox::new(engine);
        let file = owner.write("nap.iter", SLEEP_WORKFLOW);
        let spawned = spawn_until_node_started(&owner, &file);
        let live = spawned.run_id.clone();
        // Another project's store on the same engine: it never knew `live`.
        let other = Sandbox::new(engine);
        let out = other.iterion(&["sandbox", "reap", "--json"]);
        let still_there = container_exists(engine, &live);
        signal(&spawned.child, "-INT");
        let r = wait_child(spawned.child, Duration::from_secs(60));
        force_remove(engine, &live);
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        let judged: Vec<&Value> = doc["decisions"]
            .as_array()
            .map(|d| d.iter().filter(|d| d["run_id"] == live.as_str()).collect())
            .unwrap_or_default();
        assert!(
            judged.is_empty(),
            "{engine:?}: judged by a foreign store: {judged:?}"
        );
        assert!(
            still_there,
            "{engine:?}: a foreign store's reaper removed a live sandbox"
        );
        assert_eq!(r.status(), "cancelled", "{engine:?}: {}", r.stderr);
    }
}

// ---- bad input ----------------------------------------------------------------

#[test]
fn invalid_workflow_is_exit_2_and_creates_no_run() {
    let sb = Sandbox::new(Engine::Docker);
    let file = sb.write(
        "bad.iter",
        "workflow broken:\n  sandbox:\n    mode: sideways\n  entry: nowhere\n",
    );
    let r = sb.run(&file, &[]);
    assert_eq!(r.code, Some(2), "stdout={} stderr={}", r.stdout, r.stderr);
    assert!(!r.stderr.trim().is_empty(), "no diagnostics on stderr");
    assert!(runs(&sb).is_empty(), "a run was created");
}

#[test]
fn a_node_printing_100_mb_finishes_with_its_log_capped() {
    for engine in Engine::ALL {
        let sb = Sandbox::new(engine);
        let file = sb.write(
            "w.iter",
            &format!(
                r#"tool flood:
  command: "yes 0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz | head -c 100000000"

workflow flood:
  sandbox:
    image: "{}"
    host_state: none
  entry: flood
  flood -> done
"#,
                busybox()
            ),
        );
        let r = sb.run(&file, &[]);
        assert_eq!(r.code, Some(0), "{engine:?}: {}", r.stderr);
        assert_eq!(r.status(), "finished");
        let run_id = r.run_id();
        let logs = sb.iterion(&["logs", &run_id]);
        assert!(logs.status.success());
        let len = logs.stdout.len();
        assert!(len > 1_000_000, "{engine:?}: log has only {len} bytes");
        assert!(
            len < 32 * 1024 * 1024,
            "{engine:?}: log not capped: {len} bytes"
        );
        assert!(!container_exists(engine, &run_id));
    }
}

/// On the Debian image: bash reaps background jobs as they exit, where
/// busybox ash keeps all 5,000 as zombies until `wait` and so trips the
/// pids limit itself (the limit holding, the script failing).
#[test]
fn five_thousand_short_processes_finish_without_zombies() {
    for engine in Engine::ALL {
        let sb = Sandbox::new(engine);
        let file = sb.write(
            "w.iter",
            &format!(
                r#"schema zombies_out:
  zombies: int
  pids_max: string

tool fork:
  command: "for i in $(seq 5000); do /bin/true & done; wait; echo forked"

tool count:
  command: `sleep 1; printf '{{"zombies": %s, "pids_max": "%s"}}' "$(cat /proc/[0-9]*/stat 2>/dev/null | awk '{{print $3}}' | grep -c Z)" "$(cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max)"`
  output: zombies_out

workflow forks:
  sandbox:
    image: "{}"
    host_state: none
  entry: fork
  fork -> count
  count -> done
"#,
                crate::support::slim()
            ),
        );
        let r = sb.run(&file, &[]);
        assert_eq!(r.code, Some(0), "{engine:?}: {}", r.stderr);
        let run_id = r.run_id();
        let events = sb.events(&run_id);
        let started = one(&events, "sandbox_started");
        assert!(
            !started["data"]["limits"]["pids"].is_null(),
            "no pids limit: {}",
            started["data"]["limits"]
        );
        let out = node_output(&events, "count");
        assert_eq!(out["zombies"], 0, "{engine:?}");
        // The limit the event announces is the one the kernel enforces.
        assert_eq!(
            out["pids_max"].as_str().unwrap_or(""),
            started["data"]["limits"]["pids"].to_string(),
            "{engine:?}: {out}"
        );
        assert!(!container_exists(engine, &run_id));
    }
}

// ---- a daemon that dies mid-run -------------------------------------------------

/// A dockerd of this test's own (never the shared engines), on a private
/// socket, data root and exec root, with no bridge and no iptables so it
/// touches no host network state.
struct PrivateDockerd {
    child: Child,
    sock: String,
}

const PRIVATE_DATA_ROOT: &str = "/var/lib/iterion-e2e-docker";
const PRIVATE_EXEC_ROOT: &str = "/run/iterion-e2e-docker-exec";

impl PrivateDockerd {
    fn host(&self) -> String {
        format!("unix://{}", self.sock)
    }

    /// Start it; a loaded machine can make dockerd give up waiting for its
    /// containerd, so one more attempt is made.
    fn start(sock: &str) -> Self {
        match Self::try_start(sock) {
            Some(d) => d,
            None => Self::try_start(sock)
                .unwrap_or_else(|| panic!("private dockerd did not answer; see {sock}.log")),
        }
    }

    fn try_start(sock: &str) -> Option<Self> {
        let _ = std::fs::remove_file(sock);
        let log = std::fs::File::create(format!("{sock}.log")).expect("dockerd log");
        let child = Command::new("/usr/sbin/dockerd")
            .args([
                "--host",
                &format!("unix://{sock}"),
                "--data-root",
                PRIVATE_DATA_ROOT,
                "--exec-root",
                PRIVATE_EXEC_ROOT,
                "--pidfile",
                &format!("{sock}.pid"),
                "--bridge=none",
                "--iptables=false",
                // Its own cgroup parent: the shared engines' containers live
                // under /docker, and this daemon is killed and restarted.
                "--cgroup-parent=/iterion-e2e-docker",
                "--ip6tables=false",
            ])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("spawn private dockerd");
        let mut d = Self {
            child,
            sock: sock.to_owned(),
        };
        let up = wait_until(Duration::from_secs(60), || {
            d.docker(&["version"]).status.success() || d.child.try_wait().ok().flatten().is_some()
        });
        if !up || d.child.try_wait().ok().flatten().is_some() {
            let _ = d.child.kill();
            let _ = d.child.wait();
            return None;
        }
        if !d.docker(&["image", "inspect", &busybox()]).status.success() {
            let out = d.docker(&[
                "import",
                "--change",
                "CMD [\"/bin/sh\"]",
                "/var/cache/iterion-images/busybox.tar",
                &busybox(),
            ]);
            assert!(
                out.status.success(),
                "import busybox: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Some(d)
    }

    fn docker(&self, args: &[&str]) -> std::process::Output {
        Command::new("docker")
            .arg("-H")
            .arg(self.host())
            .args(args)
            .output()
            .expect("docker")
    }

    /// Remove every managed container, then stop the daemon (on drop).
    fn clean_and_stop(self) {
        let out = self.docker(&["ps", "-aq", "--filter", "label=iterion.io/managed=true"]);
        for id in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            let _ = self.docker(&["rm", "-f", id]);
        }
    }
}

impl Drop for PrivateDockerd {
    /// Stop the daemon by its pid even when an assertion panicked, so the
    /// next run finds its data root free.
    fn drop(&mut self) {
        let running = self.child.try_wait().ok().flatten().is_none();
        if running {
            let _ = Command::new("kill")
                .args(["-TERM", &self.child.id().to_string()])
                .status();
            let stopped = wait_until(Duration::from_secs(30), || {
                self.child.try_wait().ok().flatten().is_some()
            });
            if !stopped {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
        let _ = std::fs::remove_file(&self.sock);
        let _ = std::fs::remove_file(format!("{}.pid", self.sock));
        // The daemon's log is kept only when a test failed.
        if !std::thread::panicking() {
            let _ = std::fs::remove_file(format!("{}.log", self.sock));
        }
    }
}

#[test]
fn dead_daemon_mid_run_is_a_typed_failure_with_a_consistent_store() {
    let sock = format!("/run/iterion-e2e-dockerd-{}.sock", std::process::id());
    let mut daemon = PrivateDockerd::start(&sock);
    let sb = Sandbox::new(Engine::Docker).with_env("DOCKER_HOST", &daemon.host());
    let file = sb.write("nap.iter", SLEEP_WORKFLOW);
    let spawned = spawn_until_node_started(&sb, &file);
    let run_id = spawned.run_id.clone();
    // SIGKILL: the daemon gets no chance to say goodbye.
    let _ = Command::new("kill")
        .args(["-KILL", &daemon.child.id().to_string()])
        .status();
    let _ = daemon.child.wait();
    let r = wait_child(spawned.child, Duration::from_secs(90));

    // Bring the daemon back and clean up before asserting anything.
    let daemon = PrivateDockerd::start(&sock);
    let left = daemon.docker(&["ps", "-aq", "--filter", &format!("name=iterion-{run_id}")]);
    let left = String::from_utf8_lossy(&left.stdout).trim().to_owned();
    daemon.clean_and_stop();

    assert_eq!(r.code, Some(1), "stdout={} stderr={}", r.stdout, r.stderr);
    assert_eq!(r.failure_code(), Some("SANDBOX_LOST"), "{}", r.stderr);
    let record = run_record(&sb, &run_id);
    let status = record["status"].as_str().unwrap_or("");
    assert!(
        ["failed", "failed_resumable"].contains(&status),
        "not terminal-failed: {record}"
    );
    assert_eq!(record["failure_code"], "SANDBOX_LOST");
    let events = sb.events(&run_id);
    let failed = one(&events, "run_failed");
    assert_eq!(failed["data"]["failure_code"], "SANDBOX_LOST");
    assert_eq!(
        types(&events).last().map(String::as_str),
        Some("run_failed")
    );
    // The dead daemon kept the container: teardown must not claim otherwise.
    let cleanup = one(&events, "sandbox_cleanup");
    assert_eq!(
        cleanup["data"]["ok"],
        left.is_empty(),
        "cleanup={cleanup} container left={left:?}"
    );
}

/// Seed step 12: a repo `devbox.json` appends `devbox install` (in the
/// workspace) to post_create and puts the project's profile bin dir first
/// on PATH, reported as `sandbox_devbox_provisioned`. The workspace carries
/// a stand-in `devbox` in that bin dir (no Nix here): its `install` drops a
/// tool next to itself, and the node finds that tool on PATH.
#[test]
fn repo_devbox_is_provisioned_in_the_sandbox() {
    for engine in Engine::ALL {
        let sb = Sandbox::new(engine);
        sb.write("devbox.json", r#"{"packages": ["hello"]}"#);
        let bin = sb.workspace().join(".devbox/nix/profile/default/bin");
        std::fs::create_dir_all(&bin).expect("bin dir");
        let fake = bin.join("devbox");
        std::fs::write(
            &fake,
            "#!/bin/sh\n[ \"$1\" = install ] || exit 2\nd=$(dirname \"$0\")\nprintf '#!/bin/sh\\necho provisioned\\n' > \"$d/hello-tool\"\nchmod +x \"$d/hello-tool\"\n",
        )
        .expect("fake devbox");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        // A user's checkout: the sandbox runs as its owner and may write it.
        sb.own_workspace(4242, 4242);
        let file = sb.write(
            "devbox.iter",
            &format!(
                r#"tool tooled:
  command: "hello-tool"

workflow devboxed:
{}  entry: tooled
  tooled -> done
"#,
                inline_block(&busybox())
            ),
        );
        let r = sb.run(&file, &[]);
        assert_eq!(r.status(), "finished", "{engine:?}: {}", r.stderr);
        let events = sb.events(&r.run_id());
        let provisioned = one(&events, "sandbox_devbox_provisioned");
        assert_eq!(provisioned["data"]["target"], "sandbox", "{engine:?}");
        assert_eq!(provisioned["data"]["sources"][0], "repo", "{engine:?}");
        let path = provisioned["data"]["path"].as_str().expect("path");
        assert!(
            path.starts_with(&format!(
                "{}/.devbox/nix/profile/default/bin:",
                sb.workspace().canonicalize().expect("ws").display()
            )),
            "{engine:?}: {path}"
        );
        let started = one(&events, "sandbox_started");
        assert_eq!(started["data"]["has_post_create"], true, "{engine:?}");
        let out = sb.iterion(&["logs", &r.run_id()]);
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("provisioned"),
            "{engine:?}"
        );
    }
}

/// Settle (seed step 19): `${PROJECT_DIR}` is the container workspace in a
/// sandbox whose `workspace_folder` moves it, and the host workspace when
/// the run is not sandboxed.
#[test]
fn project_dir_names_the_workspace_the_exec_sees() {
    let workflow = |sandbox: &str| {
        format!(
            r#"schema pd_out:
  dir: string

tool pd:
  command: `printf '{{"dir": "%s"}}' "$PROJECT_DIR"`
  output: pd_out

workflow project_dir:
{sandbox}  entry: pd
  pd -> done
"#
        )
    };
    let sb = Sandbox::new(Engine::Docker);
    let moved = format!(
        "  sandbox:\n    image: \"{}\"\n    host_state: none\n    workspace_folder: \"/workspace\"\n",
        busybox()
    );
    let file = sb.write("pd.iter", &workflow(&moved));
    let r = sb.run(&file, &[]);
    assert_eq!(r.status(), "finished", "{}", r.stderr);
    let events = sb.events(&r.run_id());
    assert_eq!(node_output(&events, "pd")["dir"], "/workspace");
    let file = sb.write("pd-host.iter", &workflow(""));
    let r = sb.run(&file, &["--sandbox", "none"]);
    assert_eq!(r.status(), "finished", "{}", r.stderr);
    let events = sb.events(&r.run_id());
    let ws = sb.workspace().canonicalize().expect("ws");
    assert_eq!(
        node_output(&events, "pd")["dir"],
        ws.display().to_string().as_str()
    );
}
