//! Signals and leftovers end to end (issue 19 #7): SIGTERM and SIGHUP to
//! the real `iterion` binary mid-run are handled like SIGINT — the run ends
//! `cancelled` (exit 1), and its container, per-run network, firewall rules
//! and per-run host state (secret files included) are gone — on dockerd
//! and Podman. The attack: before the fix a TERMed run stayed `running`
//! with everything left behind until a reap, and the plaintext file secrets
//! were never removed by anyone.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::{
    Engine, Sandbox, busybox, force_remove, leftovers, of_type, run_record, signal,
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
