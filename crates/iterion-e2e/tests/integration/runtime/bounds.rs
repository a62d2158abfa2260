//! Run and node bounds on the host (issue 19 #6): a tool's `timeout:`
//! kills the command's whole process group and fails the run with
//! `TIMEOUT`; `budget.max_duration` with `BUDGET_EXCEEDED` and its event;
//! an unreadable bound is refused at admission, before any boot. The
//! sandboxed twins are in `iterion-cli`'s `bounds_e2e`.

use std::sync::atomic::Ordering;

use iterion_core::{FailureCode, RunStatus};
use serde_json::json;

use crate::runtime::support::*;

fn sleeper(timeout: Option<&str>) -> iterion_dsl::ir::Workflow {
    let mut slow = tool("slow", "sleep 100 & echo $! > sleep.pid; wait", None);
    if let Some(t) = timeout {
        slow.properties.insert("timeout".into(), json!(t));
    }
    workflow("slow", vec![slow], vec![edge("slow", "done")])
}

#[tokio::test]
async fn a_node_timeout_kills_the_process_group_and_fails_the_run() {
    let h = Harness::new();
    let watcher = pid_watcher(h.workspace.path().join("sleep.pid"), None);
    let out = h.run(sleeper(Some("1s"))).await;
    let pid = watcher.await.unwrap();
    assert_eq!(out.status, RunStatus::Failed);
    let failure = out.failure.unwrap();
    assert_eq!(failure.code, FailureCode::Timeout, "{}", failure.message);
    assert!(
        failure.message.contains("timeout of 1s"),
        "{}",
        failure.message
    );
    // The background child of the command, not only the shell.
    assert_process_gone(pid).await;
    let events = h.events(&out.run_id).await;
    let failed = events.iter().find(|e| e.kind == "node_failed").unwrap();
    assert!(failed.data["error"].as_str().unwrap().contains("timeout"));
    assert_eq!(h.booter.teardowns.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn budget_max_duration_stops_a_host_run() {
    let h = Harness::new();
    let mut wf = sleeper(None);
    wf.budget.insert("max_duration".into(), json!("1500ms"));
    let watcher = pid_watcher(h.workspace.path().join("sleep.pid"), None);
    let out = h.run(wf).await;
    let pid = watcher.await.unwrap();
    assert_eq!(out.failure.unwrap().code, FailureCode::BudgetExceeded);
    assert_process_gone(pid).await;
    let events = h.events(&out.run_id).await;
    let exceeded = events.iter().find(|e| e.kind == "budget_exceeded").unwrap();
    assert_eq!(exceeded.data["dimension"], "duration");
    assert_eq!(exceeded.data["limit"], 1500.0);
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds.last(), Some(&"run_failed"), "{kinds:?}");
}

#[tokio::test]
async fn an_unreadable_bound_is_refused_before_any_boot() {
    for (timeout, budget) in [(Some("2 seconds"), None), (None, Some(json!("soon")))] {
        let h = Harness::new();
        let mut wf = sleeper(timeout);
        if let Some(b) = budget {
            wf.budget.insert("max_duration".into(), b);
        }
        let out = h.run(wf).await;
        assert_eq!(out.failure.unwrap().code, FailureCode::LaunchFailed);
        assert_eq!(h.booter.boots.load(Ordering::SeqCst), 0);
        let events = h.events(&out.run_id).await;
        let admission = events.iter().find(|e| e.kind == "run_admission").unwrap();
        assert_eq!(admission.data["decision"], "denied");
        assert!(
            matches!(
                admission.data["code"].as_str(),
                Some("bad_timeout" | "bad_budget")
            ),
            "{}",
            admission.data
        );
    }
}

#[tokio::test]
async fn run_timeout_option_bounds_the_run() {
    let h = Harness::new();
    let mut options = h.options(sleeper(None));
    options.timeout = Some(std::time::Duration::from_millis(1200));
    let watcher = pid_watcher(h.workspace.path().join("sleep.pid"), None);
    let out = h
        .run_with(options, tokio_util::sync::CancellationToken::new())
        .await;
    let pid = watcher.await.unwrap();
    let failure = out.failure.unwrap();
    assert_eq!(failure.code, FailureCode::Timeout);
    assert!(
        failure.message.contains("--timeout 1200ms"),
        "{}",
        failure.message
    );
    assert_process_gone(pid).await;
}
