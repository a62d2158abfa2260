//! Cloud mode end to end (issue 13): `iterion submit` on a real
//! `nats-server -js` and the PostgreSQL store, real `iterion runner`
//! processes executing sandboxed runs on dockerd and Podman, the store
//! views from another process while runners work, `iterion cancel`
//! (cloud and local), and the bad input of item "Bad input".

use std::time::Duration;

use serde_json::Value;

use crate::cloud_support::{Cloud, Js, check_lease_history, count, tool_workflow};
use crate::support::{Engine, Sandbox, spawn_until_node_started, wait_child, wait_until};

const SETTLED: &[&str] = &["finished", "failed", "failed_resumable", "cancelled"];

/// A batch drained by three runners (one with `--concurrency 2`): every
/// run finished once, claimed by one runner at a time, its sandbox gone;
/// `runs`, `events --follow`, `logs` and `files` read it from another
/// process while the runners work.
#[test]
fn a_batch_is_drained_by_several_runners_on_dockerd() {
    let mut c = Cloud::new(Engine::Docker, "batch");
    let file = c.sb.write(
        "batch.iter",
        &tool_workflow("batch", "echo ran-$(hostname); sleep 1"),
    );
    for _ in 0..6 {
        c.submit(&file, &[]);
    }
    c.runner("r1", &[]);
    c.runner("r2", &[]);
    c.runner("r3", &[]);
    // `--concurrency` on the command line, over the environment.
    let log = c.sb.dir.path().join("runner-r4.log");
    let mut r4 =
        c.sb.command(&["runner", "--concurrency", "2"])
            .env("ITERION_RUNNER_ID", "r4")
            .stderr(std::fs::File::create(&log).expect("log"))
            .spawn()
            .expect("runner r4");
    // Follow one run's events from another process while it is queued.
    let first = c.submitted[0].clone();
    let follow =
        c.sb.command(&["events", &first, "--follow", "--json"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("events --follow");
    c.wait_all(Duration::from_secs(180), SETTLED);
    let followed = follow.wait_with_output().expect("follow output");
    let lines = String::from_utf8_lossy(&followed.stdout).to_string();
    assert!(lines.contains("\"run_finished\""), "{lines}");

    let mut claimers = std::collections::BTreeSet::new();
    for id in c.submitted.clone() {
        let events = c.events(&id);
        assert_eq!(c.statuses()[&id], "finished", "{id}: {events:?}");
        assert_eq!(count(&events, "run_finished"), 1, "{id}");
        assert_eq!(count(&events, "node_started"), 1, "{id}: ran once");
        let claims = check_lease_history(&id, &events, &[]).expect("lease history");
        assert_eq!(claims, 1, "{id}");
        claimers.insert(
            events
                .iter()
                .find(|e| e["type"] == "run_claimed")
                .map(|e| e["data"]["runner_id"].as_str().unwrap_or("").to_owned())
                .unwrap_or_default(),
        );
        let logs = c.sb.iterion(&["logs", &id]);
        assert!(
            String::from_utf8_lossy(&logs.stdout).contains("ran-"),
            "{id}: {logs:?}"
        );
        let files = c.sb.iterion(&["files", &id, "--json"]);
        assert!(files.status.success(), "{files:?}");
    }
    assert!(
        claimers.len() >= 2,
        "one runner took everything: {claimers:?}"
    );
    assert!(c.leftovers().is_empty(), "{:?}", c.leftovers());
    let js = Js::connect(&c.nats.url());
    assert_eq!(js.depth("ITERION_RUNS"), 0, "every message settled");
    assert_eq!(js.depth("ITERION_RUNS_DLQ"), 0);
    // SIGTERM drains and exits 0.
    for r in &mut c.runners {
        assert_eq!(r.term(Duration::from_secs(60)), Some(0), "{}", r.id);
    }
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &r4.id().to_string()])
        .status();
    assert!(wait_until(Duration::from_secs(60), || r4
        .try_wait()
        .ok()
        .flatten()
        .is_some()));
    assert_eq!(r4.wait().expect("r4").code(), Some(0));
}

/// Podman: a runner whose engine is the Podman service runs a submitted run
/// in a Podman container.
#[test]
fn a_runner_on_podman_runs_a_submitted_run() {
    let mut c = Cloud::new(Engine::Podman, "podman");
    let file =
        c.sb.write("p.iter", &tool_workflow("on_podman", "echo podman-ran"));
    let id = c.submit(&file, &[]);
    c.runner("p1", &[]);
    c.wait_all(Duration::from_secs(180), SETTLED);
    let events = c.events(&id);
    assert_eq!(
        c.statuses()[&id],
        "finished",
        "{events:?}\n{}",
        c.runner_logs()
    );
    let selected = events
        .iter()
        .find(|e| e["type"] == "sandbox_driver_selected")
        .expect("driver selected");
    assert_eq!(selected["data"]["driver"], "podman");
    check_lease_history(&id, &events, &[]).expect("lease history");
    assert!(c.leftovers().is_empty(), "{:?}", c.leftovers());
}

/// `iterion cancel`: a queued run (no runner yet) is cancelled in the store
/// and its later delivery acked; a running one is cancelled through its
/// runner (the sandbox removed), both end `cancelled`.
#[test]
fn cancel_reaches_queued_and_running_cloud_runs() {
    let mut c = Cloud::new(Engine::Docker, "cancel");
    let file = c.sb.write("slow.iter", &tool_workflow("slow", "sleep 120"));
    let queued = c.submit(&file, &[]);
    let out = c.sb.iterion(&["cancel", &queued, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(doc["status"], "cancelled");

    let running = c.submit(&file, &[]);
    c.runner("c1", &[]);
    assert!(wait_until(Duration::from_secs(90), || {
        count(&c.events(&running), "node_started") == 1
    }));
    let out = c.sb.iterion(&["cancel", &running, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}\n{}", c.runner_logs());
    c.wait_all(Duration::from_secs(60), SETTLED);
    let st = c.statuses();
    assert_eq!(st[&queued], "cancelled");
    assert_eq!(st[&running], "cancelled");
    let events = c.events(&running);
    assert_eq!(count(&events, "run_cancelled"), 1, "{events:?}");
    check_lease_history(&running, &events, &[]).expect("lease history");
    // The queued run's message was delivered and acked without running.
    assert_eq!(count(&c.events(&queued), "run_claimed"), 0);
    let js = Js::connect(&c.nats.url());
    assert!(wait_until(Duration::from_secs(30), || js
        .depth("ITERION_RUNS")
        == 0));
    assert!(c.leftovers().is_empty(), "{:?}", c.leftovers());
    // Cancelling a settled run again is idempotent.
    let again = c.sb.iterion(&["cancel", &running]);
    assert_eq!(again.status.code(), Some(0), "{again:?}");
}

/// `iterion cancel` of a local run reaches its owner process (pidfd,
/// checked start time): the run ends cancelled and its container is gone.
#[test]
fn cancel_reaches_a_local_runs_owner() {
    let sb = Sandbox::new(Engine::Docker);
    let file = sb.write("local.iter", &tool_workflow("local_slow", "sleep 120"));
    let spawned = spawn_until_node_started(&sb, &file);
    let out = sb.iterion(&["cancel", &spawned.run_id, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let res = wait_child(spawned.child, Duration::from_secs(60));
    assert_eq!(res.doc["status"], "cancelled", "{res:?}");
    assert!(
        crate::support::leftovers(Engine::Docker, &spawned.run_id).is_empty(),
        "the sandbox must be removed"
    );
    // An unknown run is bad input.
    let none = sb.iterion(&["cancel", "no-such-run"]);
    assert_eq!(none.status.code(), Some(2), "{none:?}");
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Bad input: cloud settings missing or wrong, NATS or PostgreSQL
/// unreachable at start, an invalid workflow (nothing queued), a stream
/// that exists with another config (refused with the difference, left as
/// it was) — each exit 2 naming what to fix.
#[test]
fn bad_cloud_input_is_exit_2_naming_the_variable() {
    let c = Cloud::new(Engine::Docker, "badinput");
    let file = c.sb.write("ok.iter", &tool_workflow("ok", "true"));
    let f = file.to_string_lossy().into_owned();
    let dead = format!("nats://127.0.0.1:{}", crate::cloud_support::free_port());
    let submit: &[&str] = &["submit", &f];
    // (extra env, argv, the variable the refusal must name)
    type Row<'a> = (Vec<(&'a str, String)>, &'a [&'a str], &'a str);
    let rows: Vec<Row<'_>> = vec![
        (
            vec![("ITERION_MODE", "local".into())],
            submit,
            "ITERION_MODE",
        ),
        (
            vec![("ITERION_MODE", "local".into())],
            &["runner"],
            "ITERION_MODE",
        ),
        (
            vec![("ITERION_STORE", c.sb.store().display().to_string())],
            &["runner"],
            "ITERION_STORE",
        ),
        (
            vec![("ITERION_NATS_URL", dead.clone())],
            submit,
            "ITERION_NATS_URL",
        ),
        (
            vec![("ITERION_NATS_URL", dead.clone())],
            &["runner"],
            "ITERION_NATS_URL",
        ),
        (
            vec![(
                "ITERION_STORE",
                format!(
                    "postgres://iterion:x@127.0.0.1:{}/none",
                    crate::cloud_support::free_port()
                ),
            )],
            &["runner"],
            "ITERION_STORE",
        ),
        (
            vec![("ITERION_LOCK_TTL", "forever".into())],
            &["runner"],
            "ITERION_LOCK_TTL",
        ),
        (
            vec![("ITERION_RUNNER_CONCURRENCY", "0".into())],
            &["runner"],
            "ITERION_RUNNER_CONCURRENCY",
        ),
        (
            vec![("ITERION_SANDBOX_HOST", "docker".into())],
            &["runner"],
            "ITERION_SANDBOX_HOST",
        ),
        (
            vec![("ITERION_RUNNER_MAX_TRUST", "root".into())],
            &["runner"],
            "ITERION_RUNNER_MAX_TRUST",
        ),
        (
            vec![("ITERION_RUNNER_ALLOW_HOST_RUNS", "yes".into())],
            &["runner"],
            "ITERION_RUNNER_ALLOW_HOST_RUNS",
        ),
    ];
    for (env, args, variable) in rows {
        let mut cmd = c.sb.command(args);
        for (k, v) in &env {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("iterion");
        assert_eq!(out.status.code(), Some(2), "{args:?} {env:?}: {out:?}");
        assert!(
            stderr(&out).contains(variable),
            "{args:?} {env:?}: {}",
            stderr(&out)
        );
    }
    // An invalid workflow: exit 2, nothing recorded, nothing queued.
    let bad =
        c.sb.write("bad.iter", "workflow broken:\n  entry: nowhere\n");
    let out = c.sb.iterion(&["submit", &bad.to_string_lossy(), "--json"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(c.statuses().is_empty(), "{:?}", c.statuses());
    let js = Js::connect(&c.nats.url());
    assert_eq!(js.depth("ITERION_RUNS"), 0);
    // An undeclared variable: refused up front too.
    let out = c.sb.iterion(&["submit", &f, "--var", "nope=1"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");

    // A stream that exists with another config is refused with the
    // difference and left as it was, by submit and runner alike.
    let other = Cloud::new(Engine::Docker, "badstream");
    let js = Js::connect(&other.nats.url());
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "ITERION_RUNS".into(),
        subjects: vec!["iterion.queue.runs".into()],
        retention: async_nats::jetstream::stream::RetentionPolicy::Limits,
        storage: async_nats::jetstream::stream::StorageType::Memory,
        ..Default::default()
    });
    for args in [&["submit", &f][..], &["runner"][..]] {
        let out = other.sb.command(args).output().expect("iterion");
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        let e = stderr(&out);
        assert!(
            e.contains("stream ITERION_RUNS") && e.contains("retention") && e.contains("storage"),
            "{e}"
        );
    }
    let kept = js.stream_config("ITERION_RUNS");
    assert_eq!(
        kept.retention,
        async_nats::jetstream::stream::RetentionPolicy::Limits
    );
    assert_eq!(
        kept.storage,
        async_nats::jetstream::stream::StorageType::Memory
    );
}

/// A malformed message and one naming an unknown run are dead-lettered
/// with their reason, termed, and never loop; the runner keeps working.
#[test]
fn malformed_and_unknown_messages_are_dead_lettered() {
    let mut c = Cloud::new(Engine::Docker, "poisonmsg");
    let js = Js::connect(&c.nats.url());
    c.runner("m1", &[]);
    js.wait_stream("ITERION_RUNS");
    js.publish("iterion.queue.runs", b"{not json", None);
    js.publish(
        "iterion.queue.runs",
        br#"{"v":1,"run_id":"ghost-run","submitted_at":"2026-01-01T00:00:00Z"}"#,
        None,
    );
    js.publish(
        "iterion.queue.runs",
        br#"{"v":99,"run_id":"future","submitted_at":""}"#,
        None,
    );
    let file =
        c.sb.write("ok.iter", &tool_workflow("after_poison", "true"));
    let id = c.submit(&file, &[]);
    c.wait_all(Duration::from_secs(120), SETTLED);
    assert_eq!(c.statuses()[&id], "finished", "{}", c.runner_logs());
    assert!(wait_until(Duration::from_secs(30), || js
        .depth("ITERION_RUNS_DLQ")
        == 3));
    let letters = js.messages("ITERION_RUNS_DLQ");
    let reasons: Vec<String> = letters
        .iter()
        .map(|l| l["reason"].as_str().unwrap_or("").to_owned())
        .collect();
    assert!(
        reasons.iter().any(|r| r.contains("malformed message")),
        "{reasons:?}"
    );
    assert!(
        reasons.iter().any(|r| r.contains("unknown run")),
        "{reasons:?}"
    );
    assert!(
        reasons.iter().any(|r| r.contains("version 99")),
        "{reasons:?}"
    );
    for l in &letters {
        assert_eq!(
            l["deliveries"], 1,
            "dead-lettered at once, never retried: {l}"
        );
    }
    assert!(wait_until(Duration::from_secs(30), || js
        .depth("ITERION_RUNS")
        == 0));
}
