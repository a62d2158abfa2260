//! Workflow secrets end to end (seed step 14, facts §6.9): an `as: env`
//! secret reaches the node's exec, an `as: file` secret is readable at its
//! container path (mode 0600, exported path variable), and neither value
//! appears in `iterion events --json`, `iterion logs` or `docker inspect`
//! of the live container; a missing secret refuses the run before any
//! container; a degraded `auto` says it dropped the file secrets; the host
//! secret directory is gone after the run.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{Engine, Sandbox, busybox, of_type, parse_run_output};

const ENV_VALUE: &str = "e2e-env-s3cr3t-7f1c";
const FILE_VALUE: &str = "e2e-file-s3cr3t-9a2b";

fn workflow(sandbox: &str) -> String {
    format!(
        r#"schema probe_out:
  env_hash: string
  file_hash: string
  file_mode: string
  path: string

secrets:
  API_TOKEN:
    value: "${{E2E_API_TOKEN}}"
  db_pass:
    value: "${{E2E_DB_PASS}}"
    as: file
    env: DB_PASS_FILE

tool probe:
  command: `sleep 2; echo "leak $API_TOKEN" >&2; printf '{{"env_hash":"%s","file_hash":"%s","file_mode":"%s","path":"%s"}}' "$(printf %s "$API_TOKEN" | sha256sum | cut -c1-64)" "$(sha256sum < "$DB_PASS_FILE" | cut -c1-64)" "$(stat -c %a "$DB_PASS_FILE")" "$DB_PASS_FILE"`
  output: probe_out

workflow secrets_probe:
{sandbox}  entry: probe
  probe -> done
"#
    )
}

fn sha256(s: &str) -> String {
    let mut child = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("sha256sum");
    use std::io::Write;
    child.stdin.take().unwrap().write_all(s.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout)[..64].to_owned()
}

fn secret_sandbox(engine: Engine) -> Sandbox {
    let sb = Sandbox::new(engine)
        .with_env("E2E_API_TOKEN", ENV_VALUE)
        .with_env("E2E_DB_PASS", FILE_VALUE);
    let tmp = sb.dir.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let tmp = tmp.to_string_lossy().into_owned();
    sb.with_env("TMPDIR", &tmp)
}

/// Every per-run secret directory left on the host (they live under the
/// test's private memory-filesystem dir, `ITERION_SECRETS_DIR`), and every
/// file under the state dir: neither may outlive the run.
fn leftover_secret_dirs(sb: &Sandbox) -> Vec<String> {
    let mut found: Vec<String> = std::fs::read_dir(sb.secrets_root())
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().to_string_lossy().into_owned())
        .collect();
    let state = sb.dir.path().join("tmp").join("iterion").join("sandboxes");
    found.extend(
        std::fs::read_dir(&state)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path().to_string_lossy().into_owned()),
    );
    found
}

/// `docker inspect` of the run's live container, found by its workspace
/// bind (this test's private path).
fn inspect_live(engine: Engine, marker: &Path, limit: Duration) -> Option<String> {
    let start = Instant::now();
    let marker = marker.to_string_lossy().into_owned();
    while start.elapsed() < limit {
        let ps = Command::new("docker")
            .args([
                "-H",
                &engine.host(),
                "ps",
                "-q",
                "--filter",
                "name=iterion-",
            ])
            .output()
            .expect("docker ps");
        for id in String::from_utf8_lossy(&ps.stdout).split_whitespace() {
            let out = Command::new("docker")
                .args(["-H", &engine.host(), "inspect", id])
                .output()
                .expect("docker inspect");
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            if text.contains(&marker) {
                return Some(text);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

#[test]
fn secrets_reach_the_node_and_nothing_else() {
    for engine in Engine::ALL {
        let sb = secret_sandbox(engine);
        let file = sb.write(
            "w.iter",
            &workflow(&format!(
                "  sandbox:\n    image: \"{}\"\n    host_state: none\n",
                busybox()
            )),
        );
        let f = file.to_string_lossy().into_owned();
        let child = sb
            .command(&["run", &f, "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn iterion");
        let inspect = inspect_live(engine, &sb.workspace(), Duration::from_secs(30));
        let out = child.wait_with_output().expect("wait iterion");
        let r = parse_run_output(&out);
        assert_eq!(r.code, Some(0), "{engine:?}: {}", r.stderr);
        let inspect = inspect.unwrap_or_else(|| panic!("{engine:?}: container never seen"));
        assert!(
            !inspect.contains(ENV_VALUE),
            "{engine:?}: env value in inspect"
        );
        assert!(
            !inspect.contains(FILE_VALUE),
            "{engine:?}: file value in inspect"
        );
        assert!(
            inspect.contains("DB_PASS_FILE=/run/iterion/secrets/db_pass"),
            "{engine:?}: the path variable is exported before start"
        );
        let run_id = r.run_id();
        let events = sb.events(&run_id);
        let output = events
            .iter()
            .find(|e| e["type"] == "node_finished" && e["node_id"] == "probe")
            .map(|e| e["data"]["output"].clone())
            .unwrap_or(Value::Null);
        assert_eq!(output["env_hash"], sha256(ENV_VALUE).as_str(), "{engine:?}");
        assert_eq!(
            output["file_hash"],
            sha256(FILE_VALUE).as_str(),
            "{engine:?}"
        );
        assert!(
            matches!(output["file_mode"].as_str(), Some("600" | "400")),
            "{engine:?}: {output}"
        );
        assert_eq!(output["path"], "/run/iterion/secrets/db_pass");
        let raw_events =
            String::from_utf8_lossy(&sb.iterion(&["events", &run_id, "--json"]).stdout)
                .into_owned();
        let logs = sb.iterion(&["logs", &run_id]);
        let logs = String::from_utf8_lossy(&logs.stdout).into_owned();
        for text in [&raw_events, &logs, &r.stdout, &r.stderr] {
            assert!(
                !text.contains(ENV_VALUE),
                "{engine:?}: env value leaked: {text}"
            );
            assert!(!text.contains(FILE_VALUE), "{engine:?}: file value leaked");
        }
        // The node echoed the value: the log line is there, masked.
        assert!(logs.contains("leak [REDACTED]"), "{engine:?}: {logs}");
        assert!(
            leftover_secret_dirs(&sb).is_empty(),
            "{engine:?}: host secret dir left behind"
        );
    }
}

#[test]
fn missing_secret_refuses_before_any_container() {
    for engine in Engine::ALL {
        let sb = Sandbox::new(engine).with_env("E2E_API_TOKEN", ENV_VALUE);
        let file = sb.write(
            "w.iter",
            &workflow(&format!(
                "  sandbox:\n    image: \"{}\"\n    host_state: none\n",
                busybox()
            )),
        );
        let f = file.to_string_lossy().into_owned();
        let mut cmd = sb.command(&["run", &f, "--json"]);
        cmd.env_remove("E2E_DB_PASS");
        let r = parse_run_output(&cmd.output().expect("run"));
        assert_eq!(r.code, Some(1), "{engine:?}: {}", r.stderr);
        assert_eq!(r.status(), "failed");
        assert!(r.stderr.contains("db_pass"), "{engine:?}: {}", r.stderr);
        assert!(!r.stderr.contains(ENV_VALUE));
        let events = sb.events(&r.run_id());
        assert!(of_type(&events, "sandbox_started").is_empty());
        assert!(of_type(&events, "node_started").is_empty());
    }
}

#[test]
fn degraded_auto_drops_file_secrets_and_keeps_env_secrets() {
    let sb = secret_sandbox(Engine::Docker);
    let wf = r#"secrets:
  API_TOKEN:
    value: "${E2E_API_TOKEN}"
  db_pass:
    value: "${E2E_DB_PASS}"
    as: file

tool probe:
  command: `test -n "$API_TOKEN" && echo has-env`

workflow degraded:
  sandbox: auto
  entry: probe
  probe -> done
"#;
    let file = sb.write("w.iter", wf);
    let f = file.to_string_lossy().into_owned();
    let home = sb.dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let mut cmd = sb.command(&["run", &f, "--json"]);
    cmd.env("DOCKER_HOST", "unix:///nonexistent.sock")
        .env_remove("CONTAINER_HOST")
        .env_remove("XDG_RUNTIME_DIR")
        .env("HOME", &home);
    let r = parse_run_output(&cmd.output().expect("run"));
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let run_id = r.run_id();
    let events = sb.events(&run_id);
    let skipped = of_type(&events, "sandbox_skipped");
    assert_eq!(skipped.len(), 1);
    assert_eq!(skipped[0]["data"]["file_secrets_dropped"], true);
    let logs = String::from_utf8_lossy(&sb.iterion(&["logs", &run_id]).stdout).into_owned();
    assert!(logs.contains("has-env"), "{logs}");
    // Dropped means never written: no per-run sandbox dir on the host.
    assert!(!sb.dir.path().join("tmp/iterion/sandboxes").exists());
}

#[test]
fn explicit_opt_out_with_file_secrets_is_refused() {
    let sb = secret_sandbox(Engine::Docker);
    let file = sb.write("w.iter", &workflow("  sandbox: none\n"));
    let r = sb.run(&file, &[]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert_eq!(r.failure_code(), Some("SANDBOX_SPEC_REFUSED"));
    assert!(!r.stderr.contains(FILE_VALUE));
}

#[test]
fn bindless_docker_refuses_file_secrets() {
    let sb = secret_sandbox(Engine::Docker).with_env("ITERION_SANDBOX_DOCKER_BINDS", "none");
    let file = sb.write(
        "w.iter",
        &workflow(&format!(
            "  sandbox:\n    image: \"{}\"\n    host_state: none\n",
            busybox()
        )),
    );
    let r = sb.run(&file, &[]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert_eq!(r.failure_code(), Some("SANDBOX_SPEC_REFUSED"));
    assert!(r.stderr.contains("secret file"), "{}", r.stderr);
    let events = sb.events(&r.run_id());
    assert!(of_type(&events, "sandbox_started").is_empty());
    assert!(leftover_secret_dirs(&sb).is_empty());
}

#[test]
fn secret_printed_as_node_output_is_masked_in_events() {
    let sb = secret_sandbox(Engine::Docker);
    let wf = format!(
        r#"schema o:
  v: string

secrets:
  API_TOKEN:
    value: "${{E2E_API_TOKEN}}"

tool echo_it:
  command: `printf '{{"v":"%s"}}' "$API_TOKEN"`
  output: o

workflow w:
  sandbox:
    image: "{}"
    host_state: none
  entry: echo_it
  echo_it -> done
"#,
        busybox()
    );
    let file = sb.write("w.iter", &wf);
    let r = sb.run(&file, &[]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let run_id = r.run_id();
    let raw =
        String::from_utf8_lossy(&sb.iterion(&["events", &run_id, "--json"]).stdout).into_owned();
    assert!(!raw.contains(ENV_VALUE));
    assert!(raw.contains("[REDACTED]"), "{raw}");
}
