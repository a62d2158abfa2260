//! Signals and leftovers end to end (issue 19 #7), on dockerd and Podman:
//! SIGTERM and SIGHUP to the real `iterion` binary mid-run are handled like
//! SIGINT — the run ends `cancelled` (exit 1), and its container, per-run
//! network, firewall rules and per-run host state are gone; file secrets
//! live on a memory filesystem and leave the host as soon as the sandbox
//! has started (the node still reads them, script upload and the drain
//! still work); what a SIGKILLed run leaves, host directories included, is
//! removed by `iterion sandbox reap` once the run is provably over. The
//! attack: a TERMed run stayed `running` with everything left behind until
//! a reap, and the plaintext file secrets sat on disk, removed by no one.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::support::{
    Engine, Sandbox, busybox, force_remove, leftovers, node_output, of_type, run_record, signal,
    spawn_until_node_started, types, wait_child,
};

const FILE_SECRET: &str = "signals-e2e-file-s3cr3t-51c0";

/// A confined (allowlist) run with a file secret whose only node sleeps:
/// everything a run can leave behind exists while it runs.
fn confined_sleeper() -> String {
    format!(
        r#"secrets:
  db_pass:
    value: "${{SIGNALS_E2E_SECRET}}"
    as: file

tool nap:
  command: "sleep 300"

workflow nap:
  sandbox:
    image: "{}"
    host_state: none
    network:
      mode: allowlist
      rules: ["example.com"]
  entry: nap
  nap -> done
"#,
        busybox()
    )
}

/// A sandbox whose runs keep their per-run host state under its own
/// `TMPDIR` (so the test can see it) and read the file secret's value.
fn sandbox(engine: Engine) -> (Sandbox, PathBuf) {
    let sb = Sandbox::new(engine).with_env("SIGNALS_E2E_SECRET", FILE_SECRET);
    let tmp = sb.dir.path().join("tmp");
    std::fs::create_dir_all(&tmp).expect("tmp");
    let sb = sb.with_env("TMPDIR", &tmp.to_string_lossy());
    (sb, tmp)
}

/// Every file under `dir` whose content holds `needle`.
fn files_holding(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if std::fs::read(&p)
                .is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle.as_bytes()))
            {
                found.push(p);
            }
        }
    }
    found
}

fn signal_mid_run_leaves_nothing(engine: Engine, sig: &str) {
    let (sb, tmp) = sandbox(engine);
    let file = sb.write("nap.iter", &confined_sleeper());
    let spawned = spawn_until_node_started(&sb, &file);
    let run_id = spawned.run_id.clone();
    let state = tmp.join("iterion").join("sandboxes").join(&run_id);
    // The attack needs something to leak: the run holds its sandbox, its
    // network and rules, and its per-run state dir.
    let before = leftovers(engine, &run_id);
    assert!(
        before.iter().any(|l| l.starts_with("container"))
            && before.iter().any(|l| l.starts_with("network"))
            && before.iter().any(|l| l.starts_with("rule")),
        "{engine:?} {sig}: nothing to leak: {before:?}"
    );
    assert!(
        state.is_dir(),
        "{engine:?} {sig}: no state dir at {state:?}"
    );
    signal(&spawned.child, sig);
    let r = wait_child(spawned.child, Duration::from_secs(90));
    let left = leftovers(engine, &run_id);
    force_remove(engine, &run_id);
    assert_eq!(r.code, Some(1), "{engine:?} {sig}: {}", r.stderr);
    assert_eq!(r.status(), "cancelled", "{engine:?} {sig}: {}", r.stderr);
    assert_eq!(r.failure_code(), Some("CANCELLED"), "{engine:?} {sig}");
    assert!(left.is_empty(), "{engine:?} {sig}: left behind: {left:?}");
    assert!(
        !state.exists(),
        "{engine:?} {sig}: state dir {state:?} left"
    );
    assert_eq!(
        files_holding(&tmp, FILE_SECRET),
        Vec::<PathBuf>::new(),
        "{engine:?} {sig}: the file secret survived on the host"
    );
    assert!(
        !sb.secrets_root().join(&run_id).exists(),
        "{engine:?} {sig}: the run's secret dir survived"
    );
    let record = run_record(&sb, &run_id);
    assert_eq!(record["status"], "cancelled", "{engine:?} {sig}");
    let events = sb.events(&run_id);
    let kinds = types(&events);
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("run_cancelled"),
        "{engine:?} {sig}: {kinds:?}"
    );
    let cleanup = of_type(&events, "sandbox_cleanup");
    assert_eq!(cleanup.len(), 1, "{engine:?} {sig}: {kinds:?}");
    assert_eq!(cleanup[0]["data"]["ok"], true, "{engine:?} {sig}");
}

#[test]
fn sigterm_mid_run_cancels_and_leaves_nothing() {
    for engine in Engine::ALL {
        signal_mid_run_leaves_nothing(engine, "-TERM");
    }
}

#[test]
fn sighup_mid_run_cancels_and_leaves_nothing() {
    for engine in Engine::ALL {
        signal_mid_run_leaves_nothing(engine, "-HUP");
    }
}

/// A node that proves it can read its file secret after a pause, then a
/// script node (uploaded through the engine's archive API) and a run file
/// (drained through it): both need every bind source of the container.
fn secret_reader() -> String {
    format!(
        r#"schema seen:
  hash: string

secrets:
  db_pass:
    value: "${{SIGNALS_E2E_SECRET}}"
    as: file
    env: DB_PASS_FILE

tool read_later:
  command: `sleep 3; printf '{{"hash":"%s"}}' "$(sha256sum < "$DB_PASS_FILE" | cut -c1-64)"`
  output: seen

tool scripted:
  script: `echo scripted > "$ITERION_ARTIFACT_FILES_DIR/report.txt"`
  language: sh

workflow reader:
  sandbox:
    image: "{}"
    host_state: none
  entry: read_later
  read_later -> scripted
  scripted -> done
"#,
        busybox()
    )
}

fn sha256_hex(text: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(text.as_bytes()))
}

#[test]
fn file_secrets_leave_the_host_once_the_sandbox_started() {
    for engine in Engine::ALL {
        let (sb, tmp) = sandbox(engine);
        let file = sb.write("reader.iter", &secret_reader());
        let spawned = spawn_until_node_started(&sb, &file);
        let run_id = spawned.run_id.clone();
        // The node runs (the sandbox has started): no host file, on disk or
        // on the memory filesystem, holds the value any more.
        let secret_dir = sb.secrets_root().join(&run_id);
        assert!(
            secret_dir.is_dir(),
            "{engine:?}: secrets not under {secret_dir:?}"
        );
        assert_eq!(
            files_holding(&tmp, FILE_SECRET),
            Vec::<PathBuf>::new(),
            "{engine:?}: on disk"
        );
        assert_eq!(
            files_holding(sb.shm.path(), FILE_SECRET),
            Vec::<PathBuf>::new(),
            "{engine:?}: still on the host's memory filesystem after start"
        );
        let r = wait_child(spawned.child, Duration::from_secs(90));
        assert_eq!(r.code, Some(0), "{engine:?}: {}", r.stderr);
        let events = sb.events(&run_id);
        assert_eq!(
            node_output(&events, "read_later")["hash"],
            sha256_hex(FILE_SECRET).as_str(),
            "{engine:?}: the container lost its secret"
        );
        let files = sb.files(&run_id);
        assert_eq!(
            files["files"][0]["path"], "report.txt",
            "{engine:?}: {files}"
        );
        assert_eq!(files["drain"]["status"], "complete", "{engine:?}: {files}");
        assert!(!secret_dir.exists(), "{engine:?}: secret dir left");
        assert!(leftovers(engine, &run_id).is_empty(), "{engine:?}");
    }
}

#[test]
fn file_secrets_never_go_to_disk() {
    // A "secrets dir" on the disk is refused before any container starts.
    let (sb, tmp) = sandbox(Engine::Docker);
    let disk = tmp.join("not-a-tmpfs");
    std::fs::create_dir_all(&disk).expect("mkdir");
    let file = sb.write("nap.iter", &confined_sleeper());
    let mut cmd = sb.command(&["run", &file.to_string_lossy(), "--json"]);
    cmd.env("ITERION_SECRETS_DIR", &disk);
    let r = crate::support::parse_run_output(&cmd.output().expect("run"));
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert_eq!(
        r.failure_code(),
        Some("SANDBOX_SPEC_REFUSED"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("memory filesystem"), "{}", r.stderr);
    assert!(of_type(&sb.events(&r.run_id()), "sandbox_started").is_empty());
    assert_eq!(files_holding(&tmp, FILE_SECRET), Vec::<PathBuf>::new());
}

fn decisions(out: &std::process::Output) -> Vec<Value> {
    let doc: Value = serde_json::from_slice(&out.stdout).expect("reap json");
    doc["decisions"].as_array().cloned().unwrap_or_default()
}

#[test]
fn a_killed_runs_host_dirs_are_reaped_once_it_is_provably_over() {
    for engine in Engine::ALL {
        let (sb, tmp) = sandbox(engine);
        let file = sb.write("nap.iter", &confined_sleeper());
        let mut spawned = spawn_until_node_started(&sb, &file);
        let run_id = spawned.run_id.clone();
        let state = tmp.join("iterion").join("sandboxes").join(&run_id);
        let secrets = sb.secrets_root().join(&run_id);
        // While the run lives, a reap keeps its directories.
        let live = sb.iterion(&["sandbox", "reap", "--json"]);
        assert!(live.status.success());
        let kept: Vec<Value> = decisions(&live)
            .into_iter()
            .filter(|d| d["kind"] == "host_dir" && d["run_id"] == run_id.as_str())
            .collect();
        assert_eq!(kept.len(), 2, "{engine:?}: {kept:?}");
        assert!(kept.iter().all(|d| d["action"] == "keep"), "{kept:?}");
        assert!(state.is_dir() && secrets.is_dir(), "{engine:?}");

        spawned.child.kill().expect("SIGKILL");
        let _ = spawned.child.wait();
        assert!(
            state.is_dir() && secrets.is_dir(),
            "{engine:?}: nothing left to reap"
        );
        assert_eq!(
            files_holding(sb.shm.path(), FILE_SECRET),
            Vec::<PathBuf>::new()
        );
        let dry = sb.iterion(&["sandbox", "reap", "--dry-run", "--json"]);
        let planned: Vec<Value> = decisions(&dry)
            .into_iter()
            .filter(|d| d["kind"] == "host_dir" && d["run_id"] == run_id.as_str())
            .collect();
        assert_eq!(planned.len(), 2, "{engine:?}: {planned:?}");
        assert!(planned.iter().all(|d| d["action"] == "reap"), "{planned:?}");
        assert!(state.is_dir(), "{engine:?}: a dry run removed something");
        let reap = sb.iterion(&["sandbox", "reap", "--json"]);
        assert!(
            reap.status.success(),
            "{}",
            String::from_utf8_lossy(&reap.stderr)
        );
        assert!(!state.exists(), "{engine:?}: state dir left");
        assert!(!secrets.exists(), "{engine:?}: secret dir left");
        assert!(leftovers(engine, &run_id).is_empty(), "{engine:?}");
    }
}
