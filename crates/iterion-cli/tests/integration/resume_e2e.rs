//! Pause and resume end to end (issue 14 item 6) through the real
//! `iterion run` / `iterion resume`, on dockerd, on Podman and on the host
//! (`--sandbox none`): a human node pauses a non-interactive run; resume
//! answers it in a fresh sandbox, a failed run resumes at its failed node,
//! finished nodes never run again, and bad input exits 2 with its code. A
//! resumed run keeps what it was launched with and obeys what `run` obeys:
//! its store (`--store-dir`), its `--timeout` (on a fresh clock), SIGTERM.

// Helpers outside `#[test]` fns fail the test by panicking, like the tests.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use crate::support::{
    Engine, Sandbox, busybox, container_exists, force_remove, leftovers, of_type, signal,
    spawn_until_node, wait_child,
};

fn workflow(sandboxed: bool) -> String {
    let sandbox = if sandboxed {
        format!(
            "  sandbox:\n    image: \"{}\"\n    host_state: none\n",
            busybox()
        )
    } else {
        String::new()
    };
    format!(
        r#"
schema host_out:
  host: string

schema verdict:
  approved: bool
  note: string

tool prep:
  command: `echo x >> prep.count; printf '{{"host": "%s"}}' "$(cat /proc/sys/kernel/hostname)"`
  output: host_out

human gate:
  output: verdict
  instructions: "ship it?"

tool after:
  command: `echo {{{{outputs.gate.note}}}} >> after.log; if [ -e fail.once ]; then rm fail.once; exit 3; fi; printf '{{"host": "%s"}}' "$(cat /proc/sys/kernel/hostname)"`
  output: host_out

workflow gated:
  entry: prep
{sandbox}
  prep -> gate
  gate -> after when approved
  gate -> fail when not approved
  after -> done
"#
    )
}

fn lines(sb: &Sandbox, file: &str) -> usize {
    std::fs::read_to_string(sb.workspace().join(file))
        .unwrap_or_default()
        .lines()
        .count()
}

fn output_host(events: &[serde_json::Value], node: &str) -> String {
    of_type(events, "node_finished")
        .into_iter()
        .rev()
        .find(|e| e["node_id"] == node)
        .map(|e| {
            e["data"]["output"]["host"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        })
        .unwrap_or_else(|| panic!("no output for {node}"))
}

fn pause_and_resume(engine: Engine, sandboxed: bool) {
    let sb = Sandbox::new(engine);
    let file = sb.write("gated.iter", &workflow(sandboxed));
    let extra: &[&str] = if sandboxed {
        &["--no-interactive"]
    } else {
        &["--no-interactive", "--sandbox", "none"]
    };
    let res = sb.run(&file, extra);
    let run_id = res.run_id();
    let ctx = format!("{engine:?} sandboxed={sandboxed}");
    assert_eq!(
        (res.code, res.status(), res.failure_code()),
        (Some(0), "paused_waiting_human", None),
        "{ctx}: {}",
        res.stderr
    );
    assert!(
        res.stderr.contains("iterion resume --run-id"),
        "{}",
        res.stderr
    );
    assert!(!container_exists(engine, &run_id), "{ctx}: container left");
    let events = sb.events(&run_id);
    let asked = of_type(&events, "human_input_requested");
    assert_eq!(asked.len(), 1, "{ctx}");
    assert_eq!(asked[0]["node_id"], "gate");

    // Bad input: exit 2, its code named, the run still paused.
    for (args, code) in [
        (vec!["--answer", "aproved=true"], "answer_unknown_field"),
        (
            vec!["--answer", "approved=perhaps", "--answer", "note=x"],
            "answer_wrong_type",
        ),
        (vec![], "answers_missing"),
    ] {
        let r = sb.resume(&run_id, &args);
        assert_eq!(r.code, Some(2), "{ctx} {args:?}: {}", r.stderr);
        assert!(r.stderr.contains(code), "{ctx}: {}", r.stderr);
    }
    let r = sb.resume("no-such-run", &[]);
    assert_eq!(r.code, Some(2), "{ctx}: {}", r.stderr);
    assert!(r.stderr.contains("resume_unknown_run"), "{}", r.stderr);

    // A changed source is refused without --force.
    std::fs::write(&file, format!("{}\n## edited\n", workflow(sandboxed))).unwrap();
    let answers = ["--answer", "approved=true", "--answer", "note=ship"];
    let r = sb.resume(&run_id, &answers);
    assert_eq!(r.code, Some(2), "{ctx}: {}", r.stderr);
    assert!(r.stderr.contains("resume_source_changed"), "{}", r.stderr);

    // Answered (forced), it runs on and fails once at `after`.
    std::fs::write(sb.workspace().join("fail.once"), "").unwrap();
    let mut forced: Vec<&str> = answers.to_vec();
    forced.push("--force");
    let r = sb.resume(&run_id, &forced);
    assert_eq!(
        (r.code, r.status(), r.failure_code()),
        (Some(1), "failed", Some("NODE_FAILED")),
        "{ctx}: {}",
        r.stderr
    );
    assert_eq!(r.run_id(), run_id);
    assert!(!container_exists(engine, &run_id), "{ctx}: container left");

    // The failed run resumes at `after`; nothing before it runs again.
    let r = sb.resume(&run_id, &["--force"]);
    assert_eq!(
        (r.code, r.status()),
        (Some(0), "finished"),
        "{ctx}: {}",
        r.stderr
    );
    assert_eq!(lines(&sb, "prep.count"), 1, "{ctx}");
    assert_eq!(
        std::fs::read_to_string(sb.workspace().join("after.log")).unwrap(),
        "ship\nship\n"
    );
    let events = sb.events(&run_id);
    let resumed = of_type(&events, "run_resumed");
    assert_eq!(resumed.len(), 2, "{ctx}");
    assert_eq!(resumed[0]["data"]["resumed_from"], "paused_waiting_human");
    assert_eq!(resumed[1]["data"]["resumed_from"], "failed");
    assert_eq!(resumed[1]["data"]["restart_node"], "after");
    assert_eq!(of_type(&events, "human_answers_recorded").len(), 1);
    if sandboxed {
        // Each resume boots a fresh sandbox.
        let started = of_type(&events, "sandbox_started");
        assert_eq!(started.len(), 3, "{ctx}");
        assert_ne!(output_host(&events, "prep"), output_host(&events, "after"));
    }
    assert!(!container_exists(engine, &run_id), "{ctx}: container left");
    // Finished: nothing to resume.
    let r = sb.resume(&run_id, &["--force"]);
    assert_eq!(r.code, Some(2), "{ctx}: {}", r.stderr);
    assert!(r.stderr.contains("resume_not_resumable"), "{}", r.stderr);
}

#[test]
fn docker_pause_and_resume() {
    pause_and_resume(Engine::Docker, true);
}

#[test]
fn podman_pause_and_resume() {
    pause_and_resume(Engine::Podman, true);
}

#[test]
fn host_pause_and_resume() {
    pause_and_resume(Engine::Docker, false);
}

/// On a terminal (a pseudo-terminal from `script`), the human node asks
/// field by field and the run goes on without pausing.
#[test]
fn host_human_asks_on_a_terminal() {
    let sb = Sandbox::new(Engine::Docker);
    let file = sb.write("gated.iter", &workflow(false));
    let out = crate::support::run_on_a_terminal(&sb, &file, b"true\nfrom the tty\n");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("approved (bool):"), "{text}");
    assert!(text.contains("\"status\":\"finished\""), "{text}");
    assert_eq!(
        std::fs::read_to_string(sb.workspace().join("after.log")).unwrap(),
        "from the tty\n"
    );
}

/// `warm`, then a human gate, then `work`, which hangs while the workspace
/// holds a `hang` file.
fn bounded_workflow() -> String {
    format!(
        r#"
schema verdict:
  approved: bool

tool warm:
  command: "echo x >> warm.count"

human gate:
  output: verdict
  instructions: "go on?"

tool work:
  command: "if [ -e hang ]; then echo hanging; sleep 300; fi; echo done >> work.log"

workflow bounded:
  entry: warm
  sandbox:
    image: "{}"
    host_state: none
  warm -> gate
  gate -> work when approved
  gate -> fail when not approved
  work -> done
"#,
        busybox()
    )
}

/// A run launched with `--store-dir` and `--timeout` resumes from that
/// store only; a SIGTERM cancels the resumed run and leaves nothing; the
/// launch's `--timeout` bounds every resumed run again, each on its own
/// clock (upstream resets its budget on resume).
fn resume_keeps_store_timeout_and_signals(engine: Engine) {
    let sb = Sandbox::new(engine);
    let store = sb.dir.path().join("alt-store");
    let store_arg = store.to_string_lossy().into_owned();
    let file = sb.write("bounded.iter", &bounded_workflow());
    let ctx = format!("{engine:?}");
    let res = sb.run(
        &file,
        &[
            "--no-interactive",
            "--timeout",
            "12s",
            "--store-dir",
            &store_arg,
        ],
    );
    let run_id = res.run_id();
    assert_eq!(
        (res.code, res.status()),
        (Some(0), "paused_waiting_human"),
        "{ctx}: {}",
        res.stderr
    );
    // The run lives in the store it was launched with, and only there.
    let r = sb.resume(&run_id, &["--answer", "approved=true"]);
    assert_eq!(r.code, Some(2), "{ctx}: {}", r.stderr);
    assert!(r.stderr.contains("resume_unknown_run"), "{}", r.stderr);

    // SIGTERM mid-resume: cancelled, its sandbox gone, resumable again.
    std::fs::write(sb.workspace().join("hang"), "").unwrap();
    let args = [
        "resume",
        "--run-id",
        &run_id,
        "--json",
        "--no-interactive",
        "--answer",
        "approved=true",
        "--store-dir",
        &store_arg,
    ];
    let child = spawn_until_node(&sb, &args, &store, &run_id, "work");
    signal(&child, "-TERM");
    let r = wait_child(child, Duration::from_secs(90));
    let left = leftovers(engine, &run_id);
    force_remove(engine, &run_id);
    assert_eq!(
        (r.code, r.status(), r.failure_code()),
        (Some(1), "cancelled", Some("CANCELLED")),
        "{ctx}: {}",
        r.stderr
    );
    assert!(left.is_empty(), "{ctx}: left behind: {left:?}");

    // The launch's --timeout bounds the resumed run: `work` hangs.
    let r = sb.resume(&run_id, &["--store-dir", &store_arg]);
    assert_eq!(
        (r.code, r.status(), r.failure_code()),
        (Some(1), "failed", Some("TIMEOUT")),
        "{ctx}: {}",
        r.stderr
    );
    assert!(leftovers(engine, &run_id).is_empty(), "{ctx}: sandbox left");

    // Each resume has its own clock: the run began well over 12 s ago (the
    // last resume alone ran 12 s), and still runs to its end.
    std::fs::remove_file(sb.workspace().join("hang")).unwrap();
    let r = sb.resume(&run_id, &["--store-dir", &store_arg]);
    assert_eq!(
        (r.code, r.status()),
        (Some(0), "finished"),
        "{ctx}: {}",
        r.stderr
    );
    assert_eq!(lines(&sb, "warm.count"), 1, "{ctx}");
    assert_eq!(lines(&sb, "work.log"), 1, "{ctx}");
    let events = sb.events_in(&store, &run_id);
    let resumed: Vec<&str> = of_type(&events, "run_resumed")
        .iter()
        .map(|e| e["data"]["resumed_from"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        resumed,
        ["paused_waiting_human", "cancelled", "failed"],
        "{ctx}"
    );
    let failed = of_type(&events, "run_failed");
    assert_eq!(failed.len(), 1, "{ctx}");
    let error = failed[0]["data"]["error"].as_str().unwrap_or("");
    assert!(error.contains("--timeout 12s"), "{ctx}: {error}");
    assert!(!container_exists(engine, &run_id), "{ctx}: container left");
}

#[test]
fn docker_resume_keeps_store_timeout_and_signals() {
    resume_keeps_store_timeout_and_signals(Engine::Docker);
}

#[test]
fn podman_resume_keeps_store_timeout_and_signals() {
    resume_keeps_store_timeout_and_signals(Engine::Podman);
}
