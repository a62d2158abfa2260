//! Issue 31 item 5, performed as a hostile submitter would against a real
//! `iterion runner` on dockerd and on Podman: `iterion submit --sandbox
//! none` (the runner would run the workflow on its own host), a workflow
//! whose `sandbox: none` asks the same, `--sandbox-host-state auto` (the
//! runner's credentials bound in), and a workflow whose `mounts:` binds a
//! runner host directory read-write under `submit`'s default `--trust
//! trusted`. A default runner refuses every one: the host-run and
//! host-state asks with a `run_admission` denied (`queue_host_run_refused`,
//! `queue_host_state_refused`), the run `failed` and its message
//! dead-lettered with the reason; the bind by the trust cap (the run
//! executes `untrusted`, so the bind outside its workspace is refused).
//! Nothing touches the host directory, nothing stays in the queue, nothing
//! is left on the engine. A runner that opts into host runs still caps
//! trust: `--sandbox none` is then refused by the engine's own untrusted
//! admission. A benign run submitted `trusted` still finishes, `untrusted`.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::cloud_support::{Cloud, Js, count};
use crate::support::{Engine, busybox, wait_until};

const SETTLED: &[&str] = &["finished", "failed", "failed_resumable", "cancelled"];

/// A tool node writing `marker` into `dir`, with `sandbox` as the
/// workflow's block (empty: none written).
fn writer(name: &str, dir: &Path, marker: &str, sandbox: &str) -> String {
    format!(
        "tool work:\n  command: `mkdir -p {d} && touch {d}/{marker}; echo wrote`\n\nworkflow {name}:\n  entry: work\n{sandbox}  work -> done\n",
        d = dir.display()
    )
}

fn admission(events: &[Value]) -> Value {
    events
        .iter()
        .find(|e| e["type"] == "run_admission")
        .map(|e| e["data"].clone())
        .unwrap_or(Value::Null)
}

fn attack(engine: Engine, tag: &str) {
    let mut c = Cloud::new(engine, tag);
    // The runner's host directory the attacks aim at.
    let host_dir = c.sb.dir.path().join("runner-host");
    std::fs::create_dir_all(&host_dir).expect("host dir");
    let image_block = format!("  sandbox:\n    image: \"{}\"\n", busybox());

    let none_flag =
        c.sb.write("none.iter", &writer("none_flag", &host_dir, "by-flag", ""));
    let by_flag = c.submit(&none_flag, &["--sandbox", "none"]);
    let none_block = c.sb.write(
        "none-block.iter",
        &writer("none_block", &host_dir, "by-block", "  sandbox: none\n"),
    );
    let by_block = c.submit(&none_block, &[]);
    let state_file = c.sb.write(
        "state.iter",
        &writer("host_state", &host_dir, "by-state", &image_block),
    );
    let by_state = c.submit(&state_file, &["--sandbox-host-state", "auto"]);
    let mount_file = c.sb.write(
        "mount.iter",
        &writer(
            "mount",
            Path::new("/hostdir"),
            "by-mount",
            &format!(
                "  sandbox:\n    image: \"{}\"\n    mounts: [\"type=bind,source={},target=/hostdir\"]\n",
                busybox(),
                host_dir.display()
            ),
        ),
    );
    let by_mount = c.submit(&mount_file, &["--trust", "trusted"]);
    let benign = c.sb.write(
        "benign.iter",
        &writer("benign", Path::new("/tmp/out"), "ok", &image_block),
    );
    let ok = c.submit(&benign, &["--trust", "trusted"]);

    c.runner("guard", &[]);
    c.wait_all(Duration::from_secs(180), SETTLED);
    let js = Js::connect(&c.nats.url());
    assert!(
        wait_until(Duration::from_secs(30), || js.depth("ITERION_RUNS") == 0),
        "messages left in the queue\n{}",
        c.runner_logs()
    );
    let statuses = c.statuses();

    for (run, code) in [
        (&by_flag, "queue_host_run_refused"),
        (&by_block, "queue_host_run_refused"),
        (&by_state, "queue_host_state_refused"),
    ] {
        let events = c.events(run);
        assert_eq!(statuses[run], "failed", "{engine:?} {run}: {events:?}");
        let adm = admission(&events);
        assert_eq!(adm["decision"], "denied", "{engine:?} {run}: {events:?}");
        assert_eq!(adm["code"], code, "{engine:?} {run}: {adm}");
        assert_eq!(adm["phase"], "queue", "{adm}");
        assert!(
            adm["reason"]
                .as_str()
                .unwrap_or("")
                .contains("ITERION_RUNNER_ALLOW_HOST_RUNS=1"),
            "{adm}"
        );
        assert_eq!(count(&events, "node_started"), 0, "{engine:?}: {events:?}");
        assert_eq!(count(&events, "run_started"), 0, "{engine:?}: {events:?}");
    }
    let letters = js.messages("ITERION_RUNS_DLQ");
    assert_eq!(letters.len(), 3, "{engine:?}: {letters:?}");
    for (run, code) in [
        (&by_flag, "queue_host_run_refused"),
        (&by_block, "queue_host_run_refused"),
        (&by_state, "queue_host_state_refused"),
    ] {
        let letter = letters
            .iter()
            .find(|l| l["run_id"] == run.as_str())
            .unwrap_or_else(|| panic!("{engine:?}: no dead letter for {run}: {letters:?}"));
        let reason = letter["reason"].as_str().unwrap_or("");
        assert!(reason.contains(code), "{engine:?}: {reason}");
        assert_eq!(letter["deliveries"], 1, "refused at once: {letter}");
    }

    // The bind: refused by the cap (the run is untrusted on this runner).
    let events = c.events(&by_mount);
    assert_eq!(statuses[&by_mount], "failed", "{engine:?}: {events:?}");
    let failed = events
        .iter()
        .find(|e| e["type"] == "run_failed")
        .expect("run_failed");
    assert_eq!(
        failed["data"]["failure_code"], "SANDBOX_SPEC_REFUSED",
        "{failed}"
    );
    let error = failed["data"]["error"].as_str().unwrap_or("");
    assert!(error.contains("untrusted"), "{engine:?}: {error}");
    assert_eq!(count(&events, "node_started"), 0, "{events:?}");

    // The benign twin runs, untrusted whatever the submitter said.
    let events = c.events(&ok);
    assert_eq!(
        statuses[&ok],
        "finished",
        "{engine:?}: {events:?}\n{}",
        c.runner_logs()
    );
    let started = events
        .iter()
        .find(|e| e["type"] == "run_started")
        .expect("run_started");
    assert_eq!(started["data"]["trust"], "untrusted", "{started}");

    let written: Vec<_> = std::fs::read_dir(&host_dir)
        .expect("host dir")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(
        written.is_empty(),
        "{engine:?}: the host was written: {written:?}"
    );
    assert!(c.leftovers().is_empty(), "{engine:?}: {:?}", c.leftovers());

    // A runner that allows host runs still caps trust: the engine's own
    // admission refuses the untrusted run without a sandbox.
    for r in &mut c.runners {
        assert_eq!(r.term(Duration::from_secs(60)), Some(0), "{}", r.id);
    }
    let again = c.submit(&none_flag, &["--sandbox", "none"]);
    c.runner("open", &[("ITERION_RUNNER_ALLOW_HOST_RUNS", "1")]);
    c.wait_all(Duration::from_secs(120), SETTLED);
    let events = c.events(&again);
    assert_eq!(c.statuses()[&again], "failed", "{engine:?}: {events:?}");
    let adm = admission(&events);
    assert_eq!(adm["decision"], "denied", "{adm}");
    assert_eq!(adm["code"], "untrusted_without_sandbox", "{adm}");
    assert_eq!(count(&events, "node_started"), 0, "{events:?}");
    assert!(
        std::fs::read_dir(&host_dir)
            .expect("host dir")
            .next()
            .is_none(),
        "{engine:?}: the host was written"
    );
    assert!(
        wait_until(Duration::from_secs(30), || js.depth("ITERION_RUNS") == 0),
        "{}",
        c.runner_logs()
    );
}

#[test]
fn a_default_runner_refuses_host_runs_and_host_binds_on_dockerd() {
    attack(Engine::Docker, "trustdocker");
}

#[test]
fn a_default_runner_refuses_host_runs_and_host_binds_on_podman() {
    attack(Engine::Podman, "trustpodman");
}
