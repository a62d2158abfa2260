//! Issue 32 item 2 through the real binary: a sandboxed agent run whose
//! runner cannot be a statically linked `iterion` is refused at admission,
//! before any container starts, with exit 2 and a message naming the file
//! examined and the fix — on dockerd and Podman, where the run would
//! otherwise start one. `ITERION_BIN` naming a missing, non-executable,
//! dynamic or non-ELF file is bad input naming it, and nothing is
//! recorded. `iterion sandbox doctor` shows the same answer as a row.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::support::{Engine, Sandbox, busybox, leftovers};

/// A claw agent in an inline sandbox: the run needs the runner in the box.
fn claw_in_a_box() -> String {
    format!(
        r#"
schema out:
  summary: string

agent work:
  model: "anthropic/claude-sonnet-4-6"
  backend: "claw"
  user: "Say hi."
  output: out

workflow hello:
  entry: work
  sandbox:
    image: "{}"
    host_state: none
  work -> done
"#,
        busybox()
    )
}

/// A file in the test's own directory, with `mode`.
fn planted(sb: &Sandbox, name: &str, bytes: &[u8], mode: u32) -> PathBuf {
    let path = sb.dir.path().join(name);
    std::fs::write(&path, bytes).expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    path
}

/// Every container event of `run_id` on `engine` since `since` (unix
/// seconds): a container created and removed in between shows here.
fn container_events(engine: Engine, run_id: &str, since: u64) -> String {
    let out = Command::new("docker")
        .args(["-H", &engine.host(), "events"])
        .args(["--since", &since.to_string(), "--until", "0s"])
        .args(["--filter", &format!("label=iterion.io/run-id={run_id}")])
        .args(["--format", "{{.Type}} {{.Action}}"])
        .output()
        .expect("docker events");
    assert!(
        out.status.success(),
        "docker events: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

/// `iterion run FILE` with `ITERION_BIN=named`: refused with exit 2
/// naming it; no container event, nothing in the store.
fn assert_refused_before_anything(sb: &Sandbox, file: &Path, run_id: &str, named: &Path) -> String {
    let since = now();
    let out = sb
        .command(&["run", &file.display().to_string(), "--run-id", run_id])
        .env("ITERION_BIN", named)
        .output()
        .expect("spawn iterion");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "exit 2 (bad input): {stderr}");
    assert!(
        stderr.contains(&named.display().to_string()),
        "names the binary it examined: {stderr}"
    );
    assert!(
        stderr.contains("SANDBOX_RUNNER_UNAVAILABLE"),
        "names the code: {stderr}"
    );
    assert!(
        stderr.contains("ITERION_BIN") && stderr.contains("cargo build --release"),
        "says the fix: {stderr}"
    );
    assert!(
        !stderr.contains("AGENT_RUNNER_PROTOCOL"),
        "never a protocol error from inside a container: {stderr}"
    );
    assert_eq!(
        container_events(sb.engine, run_id, since),
        "",
        "no container was created"
    );
    assert!(leftovers(sb.engine, run_id).is_empty());
    let runs = sb.iterion(&["runs", "--json"]);
    let doc: Value = serde_json::from_slice(&runs.stdout).unwrap_or(Value::Null);
    assert!(
        doc["runs"].as_array().is_none_or(Vec::is_empty),
        "nothing recorded: {doc}"
    );
    stderr
}

#[test]
fn a_dynamic_iterion_bin_is_refused_before_any_container_on_both_engines() {
    for engine in Engine::ALL {
        let sb = Sandbox::new(engine).with_env("ANTHROPIC_API_KEY", "sk-ant-never-used");
        let dynamic = planted(
            &sb,
            "iterion",
            &std::fs::read("/bin/sh").expect("sh"),
            0o755,
        );
        let file = sb.write("hello.iter", &claw_in_a_box());
        let run_id = format!("runner-refused-{}", engine.driver());
        let stderr = assert_refused_before_anything(&sb, &file, &run_id, &dynamic);
        assert!(stderr.contains("is dynamically linked"), "{stderr}");
    }
}

#[test]
fn a_bad_iterion_bin_is_bad_input_naming_it() {
    let sb = Sandbox::new(Engine::Docker).with_env("ANTHROPIC_API_KEY", "sk-ant-never-used");
    let me = std::fs::read(env!("CARGO_BIN_EXE_iterion")).expect("read iterion");
    let cases = [
        (sb.dir.path().join("absent"), "does not exist"),
        (planted(&sb, "noexec", &me, 0o644), "is not executable"),
        (
            planted(&sb, "script", b"#!/bin/sh\nexec iterion \"$@\"\n", 0o755),
            "is not an ELF executable",
        ),
        (sb.workspace(), "is not a regular file"),
    ];
    let file = sb.write("hello.iter", &claw_in_a_box());
    for (i, (bin, why)) in cases.iter().enumerate() {
        let stderr = assert_refused_before_anything(&sb, &file, &format!("runner-bad-{i}"), bin);
        assert!(stderr.contains(why), "{why}: {stderr}");
    }
}

#[test]
fn the_doctor_shows_the_runner_it_would_use_or_why_none() {
    let sb = Sandbox::new(Engine::Docker);
    // The ordinary build is static: the doctor names it.
    let out = sb.iterion(&["sandbox", "doctor"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let row = text
        .lines()
        .find(|l| l.starts_with("runner:"))
        .unwrap_or_else(|| panic!("a runner row: {text}"));
    assert!(row.contains("statically linked"), "{row}");

    let dynamic = planted(
        &sb,
        "iterion",
        &std::fs::read("/bin/sh").expect("sh"),
        0o755,
    );
    let sb = sb.with_env("ITERION_BIN", &dynamic.display().to_string());
    let out = sb.iterion(&["sandbox", "doctor"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let row = text
        .lines()
        .find(|l| l.starts_with("runner:"))
        .unwrap_or_else(|| panic!("a runner row: {text}"));
    assert!(
        row.contains("SANDBOX_RUNNER_UNAVAILABLE")
            && row.contains(&dynamic.display().to_string())
            && row.contains("dynamically linked"),
        "{row}"
    );
    let out = sb.iterion(&["sandbox", "doctor", "--json"]);
    let doc: Value = serde_json::from_slice(&out.stdout).expect("doctor json");
    assert_eq!(doc["runner"]["binary"], Value::Null);
    assert!(
        doc["runner"]["problem"]
            .as_str()
            .is_some_and(|p| p.contains(&dynamic.display().to_string())),
        "{doc}"
    );

    // The strict doctor on the file renders the decision's refusal.
    let file = sb.write("hello.iter", &claw_in_a_box());
    let out = sb.iterion(&["sandbox", "doctor", "--strict", &file.display().to_string()]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "a failed check: {text}");
    assert!(
        text.lines().any(|l| l.starts_with("[FAIL] runner binary:")
            && l.contains(&dynamic.display().to_string())),
        "{text}"
    );
    assert!(
        text.contains("denied at admission (SANDBOX_RUNNER_UNAVAILABLE)"),
        "{text}"
    );
}
