//! The chaos suite of cloud mode (issue 13), each bounded in time and in
//! count: a runner SIGKILLed mid-run, NATS restarted mid-batch, PostgreSQL
//! restarted (a private instance: the shared cluster is never touched), a
//! poison workflow, duplicate submits. After each: every submitted run is
//! settled exactly once, the lease history shows no two runners holding a
//! run at once, and nothing of the runs is left on the engine.

use std::time::{Duration, Instant};

use crate::cloud_support::{
    Cloud, Js, PrivatePg, check_lease_history, check_lease_history_with_logs, count, tool_workflow,
};
use crate::support::{Engine, wait_until};

fn assert_clean(c: &Cloud, killed: &[&str]) {
    let logs = c.logs();
    for id in &c.submitted {
        let events = c.events(id);
        assert!(
            count(&events, "run_finished") <= 1,
            "{id} finished twice: {events:?}"
        );
        check_lease_history_with_logs(id, &events, killed, &logs)
            .unwrap_or_else(|e| panic!("{e}\n{}", c.runner_logs()));
    }
    let left = c.leftovers();
    assert!(left.is_empty(), "left on the engine: {left:?}");
}

/// A runner SIGKILLed mid-run: its run is taken over after the lease
/// expires (and the message's ack wait), resumed by a sibling, finished
/// once; the killed attempt's container is replaced and removed.
#[test]
fn a_runner_killed_mid_run_is_taken_over_once() {
    let mut c = Cloud::new(Engine::Docker, "sigkill");
    let file = c.sb.write(
        "long.iter",
        &tool_workflow("long", "sleep 6; echo long-done"),
    );
    let id = c.submit(&file, &[]);
    let victim = c.runner("victim", &[]);
    assert!(
        wait_until(Duration::from_secs(90), || count(
            &c.events(&id),
            "node_started"
        ) == 1),
        "{}",
        c.runner_logs()
    );
    c.runners[victim].kill();
    let killed_at = Instant::now();
    c.runner("heir", &[]);
    c.wait_all(Duration::from_secs(120), &["finished"]);
    let events = c.events(&id);
    assert_eq!(
        c.statuses()[&id],
        "finished",
        "{events:?}\n{}",
        c.runner_logs()
    );
    assert_eq!(count(&events, "run_finished"), 1);
    assert_eq!(
        count(&events, "run_interrupted"),
        1,
        "taken over: {events:?}"
    );
    let claims = check_lease_history(&id, &events, &["victim"]).expect("lease history");
    assert_eq!(claims, 2, "{events:?}");
    assert!(
        killed_at.elapsed() >= Duration::from_secs(4),
        "not before the lease TTL"
    );
    assert_clean(&c, &["victim"]);
}

/// NATS restarted mid-batch: runners reconnect, nothing is lost or doubled.
#[test]
fn nats_restarted_mid_batch_loses_nothing() {
    let mut c = Cloud::new(Engine::Docker, "natsrestart");
    c.set_env("ITERION_LOCK_TTL", "12s");
    let file = c.sb.write("b.iter", &tool_workflow("nb", "sleep 3"));
    for _ in 0..4 {
        c.submit(&file, &[]);
    }
    // The lease (12s) outlives the outage.
    c.runner("n1", &[]);
    c.runner("n2", &[]);
    assert!(
        wait_until(Duration::from_secs(90), || {
            c.submitted
                .iter()
                .any(|id| count(&c.events(id), "node_started") == 1)
        }),
        "{}",
        c.runner_logs()
    );
    c.nats.stop();
    std::thread::sleep(Duration::from_secs(2));
    c.nats.restart();
    c.wait_all(Duration::from_secs(180), &["finished"]);
    for id in &c.submitted {
        assert_eq!(count(&c.events(id), "run_finished"), 1, "{id}");
    }
    assert_clean(&c, &[]);
    let js = Js::connect(&c.nats.url());
    assert!(
        wait_until(Duration::from_secs(60), || js.depth("ITERION_RUNS") == 0),
        "{}",
        c.runner_logs()
    );
}

/// PostgreSQL restarted (a private instance) while runs execute: runs in
/// flight fail or are retried by disposition; every run settles, none
/// twice; a run whose message was acked is settled in the store.
#[test]
fn postgres_restarted_mid_batch_settles_every_run() {
    let pg = PrivatePg::start();
    let mut c = Cloud::with_store(Engine::Docker, pg.url(), None);
    let file = c.sb.write("p.iter", &tool_workflow("pgb", "sleep 3"));
    for _ in 0..3 {
        c.submit(&file, &[]);
    }
    c.runner("g1", &[]);
    c.runner("g2", &[]);
    assert!(wait_until(Duration::from_secs(90), || {
        c.submitted
            .iter()
            .any(|id| count(&c.events(id), "node_started") == 1)
    }));
    pg.stop();
    std::thread::sleep(Duration::from_secs(3));
    pg.start_again();
    c.wait_all(Duration::from_secs(240), &["finished", "failed"]);
    let js = Js::connect(&c.nats.url());
    assert!(
        wait_until(Duration::from_secs(90), || js.depth("ITERION_RUNS") == 0),
        "{}",
        c.runner_logs()
    );
    assert_clean(&c, &[]);
}

/// A workflow that always fails infrastructurally (its post_create outlives
/// ITERION_SANDBOX_POST_CREATE_TIMEOUT: SANDBOX_SETUP_TIMEOUT) is retried
/// with a delay, then dead-lettered after max deliveries; it never loops.
#[test]
fn a_poison_workflow_ends_in_the_dlq_after_max_deliveries() {
    let mut c = Cloud::new(Engine::Docker, "poison");
    let wf = format!(
        "tool work:\n  command: `true`\n\nworkflow poison:\n  entry: work\n  sandbox:\n    image: \"{}\"\n    host_state: none\n    post_create: \"sleep 30\"\n  work -> done\n",
        crate::support::busybox()
    );
    let file = c.sb.write("poison.iter", &wf);
    let id = c.submit(&file, &[]);
    c.runner(
        "x1",
        &[
            ("ITERION_SANDBOX_POST_CREATE_TIMEOUT", "1s"),
            ("ITERION_RUNNER_MAX_DELIVER", "3"),
        ],
    );
    let js = Js::connect(&c.nats.url());
    assert!(
        wait_until(Duration::from_secs(180), || js.depth("ITERION_RUNS_DLQ")
            == 1),
        "{}",
        c.runner_logs()
    );
    assert!(wait_until(Duration::from_secs(30), || js
        .depth("ITERION_RUNS")
        == 0));
    let letters = js.messages("ITERION_RUNS_DLQ");
    assert_eq!(letters[0]["run_id"], id.as_str());
    assert_eq!(letters[0]["deliveries"], 3);
    let reason = letters[0]["reason"].as_str().unwrap_or("");
    assert!(
        reason.contains("SANDBOX_SETUP_TIMEOUT") && reason.contains("last"),
        "{reason}"
    );
    let events = c.events(&id);
    assert_eq!(count(&events, "run_claimed"), 3, "{events:?}");
    assert_eq!(c.statuses()[&id], "failed_resumable");
    // Nothing more happens to it.
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(count(&c.events(&id), "run_claimed"), 3);
    assert_clean(&c, &[]);
}

/// Duplicate submits of one run id (concurrent, and a copy published past
/// JetStream's dedup by another message id) are one run, executed once; a
/// different workflow under that id is refused.
#[test]
fn duplicate_submits_of_one_run_id_are_one_run() {
    let mut c = Cloud::new(Engine::Docker, "dups");
    let file =
        c.sb.write("d.iter", &tool_workflow("dup", "sleep 2; echo once"));
    let f = file.to_string_lossy().into_owned();
    let handles: Vec<_> = (0..5)
        .map(|_| {
            let cmd =
                c.sb.command(&["submit", &f, "--run-id", "dup-run-1", "--json"]);
            std::thread::spawn(move || {
                let mut cmd = cmd;
                cmd.output().expect("submit")
            })
        })
        .collect();
    for h in handles {
        let out = h.join().expect("join");
        assert_eq!(out.status.code(), Some(0), "{out:?}");
    }
    c.submitted.push("dup-run-1".into());
    let js = Js::connect(&c.nats.url());
    assert_eq!(js.depth("ITERION_RUNS"), 1, "JetStream dedup by run id");
    js.publish(
        "iterion.queue.runs",
        br#"{"v":1,"run_id":"dup-run-1","submitted_at":"2026-01-01T00:00:00Z"}"#,
        Some("another-id"),
    );
    let other = c.sb.write("o.iter", &tool_workflow("other", "true"));
    let out =
        c.sb.iterion(&["submit", &other.to_string_lossy(), "--run-id", "dup-run-1"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    c.runner("d1", &[]);
    c.runner("d2", &[]);
    c.wait_all(Duration::from_secs(120), &["finished"]);
    assert!(
        wait_until(Duration::from_secs(60), || js.depth("ITERION_RUNS") == 0),
        "{}",
        c.runner_logs()
    );
    let events = c.events("dup-run-1");
    assert_eq!(count(&events, "run_finished"), 1);
    assert_eq!(
        count(&events, "node_started"),
        1,
        "executed once: {events:?}"
    );
    assert_eq!(count(&events, "run_claimed"), 1, "{events:?}");
    assert_clean(&c, &[]);
}
