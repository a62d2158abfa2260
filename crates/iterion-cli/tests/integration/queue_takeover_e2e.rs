//! Issue 31 item 8: liveness is the lease, not the consumer's ack wait.
//! Three real runners on dockerd drain 24 queued runs; one runner is
//! SIGKILLed 5 s in (while it holds a run) and NATS is restarted 3 s later.
//! The ack wait is set to ten minutes, so only the lease can bring the dead
//! runner's run back: a live runner must claim it again within one lease
//! TTL plus one heartbeat. The sequence runs ten times in a row; every run
//! finishes exactly once each time (lease history checked, nothing left on
//! the engine, nothing left in the queue), and the takeover latency (kill
//! to the run's next `run_claimed`) has p95 within the bound.
//!
//! The defaults (TTL 60 s, heartbeat 20 s) promise 90 s; the test uses the
//! same ratio at a tenth of the scale (TTL 6 s, heartbeat 2 s: 9 s).

use std::time::{Duration, Instant};

use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::cloud_support::{Cloud, Js, check_lease_history_with_logs, count, tool_workflow};
use crate::support::{Engine, wait_until};

const ROUNDS: usize = 10;
const RUNS: usize = 24;
const TTL_S: u64 = 6;
const HEARTBEAT_S: u64 = 2;

/// 90 s for the defaults' 60 s + 20 s, scaled to this test's lease.
fn bound() -> Duration {
    Duration::from_millis((TTL_S + HEARTBEAT_S) * 1000 * 90 / 80)
}

/// Claims the runner's log shows, minus the deliveries it settled.
fn in_flight(log: &str) -> i64 {
    let claimed = log.lines().filter(|l| l.contains("run claimed")).count();
    let settled = log
        .lines()
        .filter(|l| l.contains("delivery settled"))
        .count();
    i64::try_from(claimed).unwrap_or(0) - i64::try_from(settled).unwrap_or(0)
}

fn at(e: &Value) -> OffsetDateTime {
    OffsetDateTime::parse(e["timestamp"].as_str().unwrap_or(""), &Rfc3339).expect("timestamp")
}

/// One round; the takeover latency of the killed runner's run.
fn round(i: usize) -> Duration {
    let mut c = Cloud::new(Engine::Docker, &format!("takeover{i}"));
    c.set_env("ITERION_LOCK_TTL", &format!("{TTL_S}s"));
    c.set_env("ITERION_HEARTBEAT_INTERVAL", &format!("{HEARTBEAT_S}s"));
    // Whatever the ack wait says: ten minutes would outlast the test.
    c.set_env("ITERION_RUNNER_ACK_WAIT", "10m");
    let file = c.sb.write("t.iter", &tool_workflow("takeover", "sleep 1"));
    for _ in 0..RUNS {
        c.submit(&file, &[]);
    }
    let began = Instant::now();
    c.runner("live-1", &[]);
    c.runner("live-2", &[]);
    let victim = c.runner("victim", &[]);
    std::thread::sleep(Duration::from_secs(5).saturating_sub(began.elapsed()));
    // Kill it while it holds a run (it claims one within moments).
    let log = c.runners[victim].log.clone();
    assert!(
        wait_until(Duration::from_secs(20), || {
            in_flight(&std::fs::read_to_string(&log).unwrap_or_default()) > 0
        }),
        "round {i}: the victim never held a run\n{}",
        c.runner_logs()
    );
    c.runners[victim].kill();
    let killed = OffsetDateTime::now_utc();
    std::thread::sleep(Duration::from_secs(3));
    c.nats.restart();
    c.wait_all(Duration::from_secs(240), &["finished"]);

    let logs = c.logs();
    let mut latency = None;
    for id in &c.submitted {
        let events = c.events(id);
        assert_eq!(
            count(&events, "run_finished"),
            1,
            "round {i}: {id} finished {} times: {events:?}",
            count(&events, "run_finished")
        );
        check_lease_history_with_logs(id, &events, &["victim"], &logs)
            .unwrap_or_else(|e| panic!("round {i}: {e}\n{}", c.runner_logs()));
        let claims: Vec<&Value> = events
            .iter()
            .filter(|e| e["type"] == "run_claimed")
            .collect();
        let released_by_victim = events
            .iter()
            .any(|e| e["type"] == "run_released" && e["data"]["runner_id"] == "victim");
        let Some(pos) = claims
            .iter()
            .position(|e| e["data"]["runner_id"] == "victim")
        else {
            continue;
        };
        if released_by_victim {
            continue;
        }
        // The run the victim held when it died.
        let next = claims
            .get(pos + 1)
            .unwrap_or_else(|| panic!("round {i}: {id} was never claimed again: {events:?}"));
        let took = at(next) - killed;
        assert!(
            latency.is_none(),
            "round {i}: the victim held two runs at once"
        );
        latency = Some(Duration::try_from(took).unwrap_or(Duration::ZERO));
    }
    let js = Js::connect(&c.nats.url());
    assert!(
        wait_until(Duration::from_secs(30), || js.depth("ITERION_RUNS") == 0),
        "round {i}: messages left in the queue\n{}",
        c.runner_logs()
    );
    assert_eq!(js.depth("ITERION_RUNS_DLQ"), 0, "round {i}");
    let left = c.leftovers();
    assert!(left.is_empty(), "round {i}: left on the engine: {left:?}");
    latency.unwrap_or_else(|| panic!("round {i}: no run held by the victim\n{}", c.runner_logs()))
}

#[test]
fn a_killed_runners_run_is_taken_over_within_one_lease_ttl_plus_a_heartbeat() {
    let started = Instant::now();
    let mut latencies: Vec<Duration> = (0..ROUNDS).map(round).collect();
    latencies.sort();
    // Nearest rank: the 95th percentile of ten samples is the largest.
    let rank = (ROUNDS * 95).div_ceil(100);
    let p95 = latencies[rank - 1];
    eprintln!(
        "takeover latencies {latencies:?}, p95 {p95:?} (bound {:?}); {ROUNDS} rounds in {:?}",
        bound(),
        started.elapsed()
    );
    assert!(
        p95 <= bound(),
        "takeover p95 {p95:?} over {:?}: {latencies:?}",
        bound()
    );
}
