//! Workflows written in `.iter`, compiled by `iterion-dsl`, run on the
//! host through the noop driver against the SQLite store.

use std::path::Path;

use iterion_core::{FailureCode, NodeId, RunStatus};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::runtime::support::{Harness, compile};

#[tokio::test]
async fn the_failing_node_example_routes_to_fail() {
    let source = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/failing-node.iter"),
    )
    .unwrap();
    let h = Harness::new();
    let out = h.run(compile(&source)).await;
    assert_eq!(out.status, RunStatus::Failed);
    assert_eq!(out.failure.unwrap().code, FailureCode::WorkflowFailed);
    let kinds = h.kinds(&out.run_id).await;
    assert_eq!(
        kinds,
        [
            "run_admission",
            "run_started",
            "node_started",
            "node_finished",
            "edge_selected",
            "run_failed"
        ]
    );
}

const COUNTER: &str = r#"
vars:
  who: string = "world"

schema step_out:
  n: int
  finished: bool

schema report_out:
  result: string

tool step:
  command: `c=$(cat count 2>/dev/null || echo 0); c=$((c+1)); echo $c > count; if [ $c -ge 3 ]; then f=true; else f=false; fi; printf '{"n": %s, "finished": %s}' $c $f`
  output: step_out

tool report:
  command: `echo {{input.total}} steps for {{vars.who}}`
  output: report_out

workflow counter:
  entry: step
  step -> step when not finished as again(5)
  step -> report when finished with { total: "{{outputs.step.n}}" }
  report -> done
"#;

#[tokio::test]
async fn a_bounded_loop_with_a_mapping_finishes() {
    let h = Harness::new();
    let mut options = h.options(compile(COUNTER));
    options.vars.insert("who".into(), "o'brien".into());
    let out = h.run_with(options, CancellationToken::new()).await;
    assert_eq!(out.status, RunStatus::Finished, "{:?}", out.failure);
    let events = h.events(&out.run_id).await;
    let steps = events
        .iter()
        .filter(|e| e.kind == "node_started" && e.node_id == Some(NodeId::new("step")))
        .count();
    assert_eq!(steps, 3);
    let report = events
        .iter()
        .find(|e| e.kind == "node_finished" && e.node_id == Some(NodeId::new("report")))
        .unwrap();
    assert_eq!(
        report.data["output"],
        json!({"result": "3 steps for o'brien"})
    );
}

#[tokio::test]
async fn a_loop_bound_written_in_the_language_is_enforced() {
    let h = Harness::new();
    let source = COUNTER.replace("again(5)", "again(1)");
    let out = h.run(compile(&source)).await;
    assert_eq!(out.status, RunStatus::Failed);
    assert_eq!(out.failure.unwrap().code, FailureCode::LoopLimitExceeded);
}

#[tokio::test]
async fn the_parallel_example_runs_its_branches_join_and_loops() {
    let source = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/parallel.iter"),
    )
    .unwrap();
    let h = Harness::new();
    let out = h.run(compile(&source)).await;
    assert_eq!(out.status, RunStatus::Finished, "{:?}", out.failure);
    let kinds = h.kinds(&out.run_id).await;
    let count = |k: &str| kinds.iter().filter(|x| *x == k).count();
    // Three reviewers, then three foreach items; two joins.
    assert_eq!(count("branch_started"), 6);
    assert_eq!(count("join_ready"), 2);
    let fixes = std::fs::read_to_string(h.workspace.path().join("fixes.log")).unwrap();
    assert_eq!(fixes, "a\nb\n");
    let events = h.events(&out.run_id).await;
    let published = events
        .iter()
        .find(|e| e.kind == "node_finished" && e.node_id == Some(NodeId::new("published")))
        .unwrap();
    let notes: serde_json::Value =
        serde_json::from_str(published.data["output"]["result"].as_str().unwrap()).unwrap();
    assert_eq!(
        notes,
        json!([{"file": "lint.note"}, {"file": "test.note"}, {"file": "docs.note"}])
    );
}
