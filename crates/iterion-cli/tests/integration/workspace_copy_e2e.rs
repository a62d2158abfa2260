//! Copy-based workspaces (issue 14 item 2) on the real dockerd and the
//! real Podman with `ITERION_SANDBOX_DOCKER_BINDS=none`: the workflow's own
//! script runs from the copied workspace; what the run writes, changes and
//! deletes lands back on the host workspace; the run store inside the
//! workspace is neither copied nor written; a hostile sandbox that plants
//! links pointing out, fifos and a huge sparse file, and writes into the
//! store's path, gets each declined and reported while the host outside
//! the workspace is untouched; an export that fails (the workspace moved
//! away mid-run) is an event and the run keeps its own status. Names,
//! `..` and device members no engine produces are covered against a
//! scripted sandbox in `iterion-readback`'s `workspace` tests.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{Engine, Sandbox, busybox, of_type, one, parse_run_output, slim};

fn bindless(engine: Engine) -> Sandbox {
    let sb = Sandbox::new(engine).with_env("ITERION_SANDBOX_DOCKER_BINDS", "none");
    // The store inside the workspace (the default's place): a copy must
    // leave it out, an export must never write it.
    let store = sb.workspace().join(".iterion");
    sb.with_env("ITERION_STORE", &store.to_string_lossy())
}

fn workflow(image: &str, command: &str) -> String {
    format!(
        r#"schema out:
  said: string

tool work:
  command: `{command}`
  output: out

workflow copyws:
  sandbox:
    image: "{image}"
    host_state: none
  entry: work
  work -> done
"#
    )
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

fn store_listing(sb: &Sandbox) -> Vec<String> {
    let mut out: Vec<String> = walk(&sb.workspace().join(".iterion"))
        .into_iter()
        .filter(|p| !p.ends_with("-wal") && !p.ends_with("-shm") && !p.ends_with(".db"))
        .collect();
    out.sort();
    out
}

fn walk(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            out.push(p.display().to_string());
            if p.is_dir() && !p.is_symlink() {
                out.extend(walk(&p));
            }
        }
    }
    out
}

#[test]
fn dockerd_bindless_runs_the_workflows_script_and_its_writes_come_back() {
    runs_the_script_and_writes_come_back(Engine::Docker);
}

#[test]
fn podman_bindless_runs_the_workflows_script_and_its_writes_come_back() {
    runs_the_script_and_writes_come_back(Engine::Podman);
}

fn runs_the_script_and_writes_come_back(engine: Engine) {
    let sb = bindless(engine);
    sb.write(
        "script.sh",
        "set -e\n\
         test ! -e .iterion || { echo 'the store was copied in' >&2; exit 7; }\n\
         cat input.txt > out.txt\n\
         echo changed > edit.txt\n\
         rm doomed.txt\n\
         rm -r olddir\n\
         mkdir -p made/deep && echo deep > made/deep/x.txt\n\
         ln -s made/deep/x.txt made/link\n\
         printf '{\"said\":\"%s\"}' \"$(cat out.txt)\"\n",
    );
    sb.write("input.txt", "from the host");
    sb.write("edit.txt", "before");
    sb.write("doomed.txt", "deleted by the run");
    sb.write("olddir/inner.txt", "deleted with its dir");
    let file = sb.write("w.iter", &workflow(&busybox(), "sh script.sh"));
    let r = sb.run(&file, &[]);
    assert_eq!(r.code, Some(0), "{engine:?}: {}", r.stderr);
    let ws = sb.workspace();
    let events = sb.events(&r.run_id());
    let finished = one(&events, "node_finished");
    assert_eq!(
        finished["data"]["output"]["said"], "from the host",
        "{engine:?}"
    );
    assert_eq!(read(&ws.join("out.txt")), "from the host");
    assert_eq!(read(&ws.join("edit.txt")), "changed\n");
    assert_eq!(read(&ws.join("made/deep/x.txt")), "deep\n");
    assert_eq!(
        std::fs::read_link(ws.join("made/link")).ok().as_deref(),
        Some(Path::new("made/deep/x.txt"))
    );
    assert!(
        !ws.join("doomed.txt").exists(),
        "{engine:?}: the run deleted it"
    );
    assert!(!ws.join("olddir").exists(), "{engine:?}");
    assert_eq!(read(&ws.join("script.sh")).lines().next(), Some("set -e"));
    let exported = one(&events, "sandbox_workspace_exported");
    assert_eq!(exported["data"]["driver"], engine.driver());
    assert!(exported["data"]["files"].as_u64() >= Some(3), "{exported}");
    assert_eq!(exported["data"]["deleted"], 3, "{exported}");
    assert!(of_type(&events, "sandbox_workspace_export_failed").is_empty());
    // The export came before the sandbox went.
    let pos = |k: &str| {
        events
            .iter()
            .position(|e| e["type"] == k)
            .unwrap_or(usize::MAX)
    };
    assert!(pos("sandbox_workspace_exported") < pos("sandbox_cleanup"));
}

#[test]
fn dockerd_a_hostile_sandbox_gets_its_plants_declined() {
    hostile_plants_are_declined(Engine::Docker);
}

#[test]
fn podman_a_hostile_sandbox_gets_its_plants_declined() {
    hostile_plants_are_declined(Engine::Podman);
}

fn hostile_plants_are_declined(engine: Engine) {
    let sb = bindless(engine);
    let outside = sb.dir.path().join("outside");
    std::fs::create_dir_all(&outside).expect("outside");
    std::fs::write(outside.join("canary"), "untouched").expect("canary");
    let out = outside.display().to_string();
    // A link of the host's own leading out, copied in as a link.
    std::os::unix::fs::symlink(&outside, sb.workspace().join("hostlink")).expect("symlink");
    sb.write("keep.txt", "kept");
    let store_before = store_listing(&sb);
    let command = format!(
        "ln -s /etc/passwd passwd_link; ln -s {out}/canary canary_link; ln -s ../../.. up; \
         mkdir s && ln -s .. s/l1 && ln -s s/l1/.. l2; mkfifo pipe; \
         truncate -s 1T huge; mkdir -p .iterion/runs && echo forged > .iterion/runs/forged; \
         echo benign > benign.txt; printf '{{\"said\":\"planted\"}}'"
    );
    let file = sb.write("w.iter", &workflow(&slim(), &command));
    let r = sb.run(&file, &[]);
    assert_eq!(r.code, Some(0), "{engine:?}: {}", r.stderr);
    assert_eq!(
        r.status(),
        "finished",
        "the export never changes the run's status"
    );
    let ws = sb.workspace();
    assert_eq!(read(&ws.join("benign.txt")), "benign\n");
    assert_eq!(read(&ws.join("keep.txt")), "kept");
    for planted in ["passwd_link", "canary_link", "up", "l2", "pipe", "huge"] {
        assert!(
            std::fs::symlink_metadata(ws.join(planted)).is_err(),
            "{engine:?}: {planted} landed on the host"
        );
    }
    assert_eq!(read(&outside.join("canary")), "untouched");
    assert_eq!(walk(&outside).len(), 1, "nothing outside changed");
    assert_eq!(
        std::fs::read_link(ws.join("hostlink")).ok(),
        Some(outside.clone())
    );
    assert!(
        !ws.join(".iterion/runs/forged").exists(),
        "the store is never written"
    );
    assert_eq!(store_listing(&sb), store_before);
    let events = sb.events(&r.run_id());
    let failed = one(&events, "sandbox_workspace_export_failed");
    let declined: Vec<String> = failed["data"]["declined"]
        .as_array()
        .expect("declined")
        .iter()
        .map(|v| v.as_str().unwrap_or_default().to_owned())
        .collect();
    for name in [
        "passwd_link",
        "canary_link",
        "up",
        "l2",
        "pipe",
        "huge",
        ".iterion/runs",
    ] {
        assert!(
            declined.iter().any(|d| d.contains(name)),
            "{engine:?}: {name} not named in {declined:?}"
        );
    }
    assert!(!failed["data"]["reason"].as_str().unwrap_or("").is_empty());
    assert!(of_type(&events, "sandbox_workspace_exported").is_empty());
}

#[test]
fn dockerd_a_failed_export_is_an_event_and_the_run_keeps_its_status() {
    failed_export_keeps_the_status(Engine::Docker);
}

#[test]
fn podman_a_failed_export_is_an_event_and_the_run_keeps_its_status() {
    failed_export_keeps_the_status(Engine::Podman);
}

fn failed_export_keeps_the_status(engine: Engine) {
    // A run that fails on its own: its writes still come back, and the
    // status is the node's.
    let sb = bindless(engine);
    let file = sb.write(
        "w.iter",
        &workflow(&busybox(), "echo partial > partial.txt; exit 3"),
    );
    let r = sb.run(&file, &[]);
    assert_eq!(r.status(), "failed", "{engine:?}: {}", r.stderr);
    assert_eq!(read(&sb.workspace().join("partial.txt")), "partial\n");
    let events = sb.events(&r.run_id());
    assert_eq!(of_type(&events, "sandbox_workspace_exported").len(), 1);

    // The workspace moves away while the run runs: the export cannot
    // write it back, says so, and the run still finishes.
    let sb = Sandbox::new(engine).with_env("ITERION_SANDBOX_DOCKER_BINDS", "none");
    let file = sb.write(
        "w.iter",
        &workflow(&busybox(), "while [ ! -e go ]; do sleep 0.2; done; echo late > late.txt; printf '{\"said\":\"ok\"}'"),
    );
    sb.write("mine.txt", "my work");
    let file = file.to_string_lossy().into_owned();
    let child = sb
        .command(&["run", &file, "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let moved = sb.dir.path().join("moved");
    // Wait for the node to be running, then move the workspace aside.
    let deadline = Instant::now() + Duration::from_secs(120);
    let run_id = loop {
        assert!(Instant::now() < deadline, "the node never started");
        let out = sb.iterion(&["runs", "--json"]);
        let runs: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        let id = runs["runs"]
            .as_array()
            .and_then(|a| a.first())
            .and_then(|r| r["id"].as_str())
            .map(str::to_owned);
        if let Some(id) = id
            && of_type(&sb.events(&id), "node_started").len() == 1
        {
            break id;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    std::fs::rename(sb.workspace(), &moved).expect("move the workspace aside");
    // Release the node through the container's own copy.
    let go = std::process::Command::new("docker")
        .args([
            "-H",
            &engine.host(),
            "exec",
            &format!("iterion-{run_id}"),
            "touch",
            "go",
        ])
        .output()
        .expect("docker exec");
    assert!(
        go.status.success(),
        "{}",
        String::from_utf8_lossy(&go.stderr)
    );
    let out = child.wait_with_output().expect("wait");
    let r = parse_run_output(&out);
    assert_eq!(r.status(), "finished", "{engine:?}: {}", r.stderr);
    assert_eq!(
        read(&moved.join("mine.txt")),
        "my work",
        "nothing of the host lost"
    );
    assert!(!sb.workspace().exists(), "the workspace is never recreated");
    let mut cmd = sb.command(&["events", &run_id, "--json"]);
    cmd.current_dir(sb.dir.path());
    let events: Vec<Value> = String::from_utf8_lossy(&cmd.output().expect("events").stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let failed = one(&events, "sandbox_workspace_export_failed");
    assert_eq!(failed["data"]["reason"], "workspace_gone", "{failed}");
    assert!(
        failed["data"]["error"]
            .as_str()
            .unwrap_or("")
            .contains("WORKSPACE_GONE")
    );
}
