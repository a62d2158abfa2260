//! Graph semantics on the host (noop driver, SQLite store): routers,
//! parallel branches and their join, loops, written in `.iter` and
//! asserted on the event stream and the persisted progress. The intent of
//! upstream's `parallel_test.go`, `round_robin_test.go` and the loop tests
//! of `engine_test.go`.

use std::collections::BTreeSet;

use iterion_core::{EventRecord, FailureCode, NodeId, RunStatus};
use iterion_runtime::progress::{FrameId, FrameStatus, RunProgress};
use serde_json::json;

use crate::runtime::support::{Harness, assert_process_gone, compile};

/// A tool branch that marks itself and waits (bounded) until `need`
/// branches have marked: it can only finish if that many run at once.
fn barrier_tool(name: &str, need: usize) -> String {
    format!(
        r#"tool {name}:
  command: `touch .mark_{name}; for i in $(seq 300); do [ $(ls .mark_* | wc -l) -ge {need} ] && break; sleep 0.1; done; [ $(ls .mark_* | wc -l) -ge {need} ] || exit 9; echo {name} > {name}.txt; echo '{{"file": "{name}.txt"}}'`
  output: file_out
  parallel_safe: true
"#
    )
}

fn fan_source(budget: &str, need: usize) -> String {
    format!(
        r#"
schema file_out:
  file: string

schema count_out:
  lines: int
  text: string

router fan:
  mode: fan_out_all

{w1}
{w2}
{w3}
tool gather:
  command: `printf '{{"lines": %s, "text": "%s"}}' $(cat {{{{input.a}}}} {{{{input.b}}}} {{{{input.c}}}} | wc -l) "$(cat {{{{input.a}}}} {{{{input.b}}}} {{{{input.c}}}} | tr '\n' ' ')"`
  output: count_out
  await: wait_all

workflow fan3:
  entry: fan
{budget}
  fan -> w1
  fan -> w2
  fan -> w3
  w1 -> gather with {{ a: "{{{{input.file}}}}" }}
  w2 -> gather with {{ b: "{{{{input.file}}}}" }}
  w3 -> gather with {{ c: "{{{{input.file}}}}" }}
  gather -> done
"#,
        w1 = barrier_tool("w1", need),
        w2 = barrier_tool("w2", need),
        w3 = barrier_tool("w3", need),
    )
}

/// Most branches open at once, read from the event stream in seq order.
fn max_open_branches(events: &[EventRecord]) -> usize {
    let mut open = BTreeSet::new();
    let mut max = 0;
    for e in events {
        let id = e.data["branch_id"].as_str().unwrap_or_default().to_owned();
        match e.kind.as_str() {
            "branch_started" => {
                open.insert(id);
                max = max.max(open.len());
            }
            "branch_finished" => {
                open.remove(&id);
            }
            _ => {}
        }
    }
    max
}

fn node_events<'e>(events: &'e [EventRecord], kind: &str, node: &str) -> Vec<&'e EventRecord> {
    events
        .iter()
        .filter(|e| e.kind == kind && e.node_id == Some(NodeId::new(node)))
        .collect()
}

#[tokio::test]
async fn three_branches_write_files_and_the_join_reads_them() {
    let h = Harness::new();
    let out = h.run(compile(&fan_source("", 3))).await;
    assert_eq!(out.status, RunStatus::Finished, "{:?}", out.failure);
    let events = h.events(&out.run_id).await;
    // The barrier needs all three at once: they ran concurrently, and the
    // stream shows it.
    assert_eq!(max_open_branches(&events), 3);
    let started = h.of_kind(&out.run_id, "branch_started").await;
    assert_eq!(started.len(), 3);
    for s in &started {
        assert_eq!(s.node_id, Some(NodeId::new("fan")));
        assert_eq!(s.data["from"], "fan");
    }
    let finished = h.of_kind(&out.run_id, "branch_finished").await;
    assert!(
        finished
            .iter()
            .all(|f| f.data["outcome"] == "joined" && f.data["join_node"] == "gather"),
        "{finished:?}"
    );
    // Nodes inside a branch carry its id.
    let w2 = node_events(&events, "node_finished", "w2");
    assert_eq!(w2[0].data["branch_id"], "branch_fan_w2");
    let join = h.of_kind(&out.run_id, "join_ready").await;
    assert_eq!(join.len(), 1);
    assert_eq!(join[0].node_id, Some(NodeId::new("gather")));
    assert_eq!(join[0].data["strategy"], "wait_all");
    assert_eq!(join[0].data["branches"], 3);
    let gather = node_events(&events, "node_finished", "gather");
    assert_eq!(
        gather[0].data["output"],
        json!({"lines": 3, "text": "w1 w2 w3 "})
    );
    for f in ["w1.txt", "w2.txt", "w3.txt"] {
        assert!(h.workspace.path().join(f).exists(), "{f}");
    }
    // The persisted progress folds into the final state: main done with
    // every output merged, each branch parked at the join.
    let progress = RunProgress::replay(&h.checkpoints(&out.run_id).await).unwrap();
    assert_eq!(RunProgress::from_events(&events).unwrap(), progress);
    let main = progress.frame(&FrameId::main()).unwrap();
    assert_eq!(main.status, FrameStatus::Done);
    for n in ["fan", "w1", "w2", "w3", "gather"] {
        assert!(main.outputs.contains_key(&NodeId::new(n)), "{n}");
    }
    for b in ["branch_fan_w1", "branch_fan_w2", "branch_fan_w3"] {
        let f = progress.frame(&FrameId::new(b)).unwrap();
        assert_eq!(
            f.status,
            FrameStatus::Reached {
                join: NodeId::new("gather")
            }
        );
        assert_eq!(f.parent, Some(FrameId::main()));
    }
}

#[tokio::test]
async fn max_parallel_branches_bounds_the_branches_in_flight() {
    let h = Harness::new();
    let source = fan_source("  budget:\n    max_parallel_branches: 2", 2);
    let out = h.run(compile(&source)).await;
    assert_eq!(out.status, RunStatus::Finished, "{:?}", out.failure);
    let events = h.events(&out.run_id).await;
    // Two at once (each waits for a second marker), never three.
    assert_eq!(max_open_branches(&events), 2);
    let started = h.of_kind(&out.run_id, "branch_started").await;
    let finished = h.of_kind(&out.run_id, "branch_finished").await;
    assert_eq!(started.len(), 3);
    // The third slot opens only after a branch finished.
    assert!(started[2].seq > finished[0].seq);
}

#[tokio::test]
async fn a_failing_branch_cancels_its_siblings_under_wait_all() {
    let h = Harness::new();
    let source = r#"
router fan:
  mode: fan_out_all

tool slow:
  command: "sleep 100 & echo $! > sleep.pid; wait"
  parallel_safe: true

tool bad:
  command: "for i in $(seq 300); do [ -s sleep.pid ] && break; sleep 0.1; done; echo broken >&2; exit 3"
  parallel_safe: true

tool gather:
  command: "touch gathered"

workflow w:
  entry: fan
  fan -> slow
  fan -> bad
  slow -> gather
  bad -> gather
  gather -> done
"#;
    let out = h.run(compile(source)).await;
    assert_eq!(out.status, RunStatus::Failed);
    let failure = out.failure.unwrap();
    assert_eq!(failure.code, FailureCode::NodeFailed);
    assert!(
        failure.message.contains("branch_fan_bad") && failure.message.contains("wait_all"),
        "{}",
        failure.message
    );
    let events = h.events(&out.run_id).await;
    let slow_failed = node_events(&events, "node_failed", "slow");
    assert_eq!(slow_failed[0].data["error"], "cancelled");
    let outcomes: BTreeSet<String> = h
        .of_kind(&out.run_id, "branch_finished")
        .await
        .iter()
        .map(|e| {
            format!(
                "{}={}",
                e.data["branch_id"].as_str().unwrap(),
                e.data["outcome"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        outcomes,
        BTreeSet::from([
            "branch_fan_bad=failed".to_owned(),
            "branch_fan_slow=cancelled".to_owned()
        ])
    );
    assert!(h.of_kind(&out.run_id, "join_ready").await.is_empty());
    assert!(!h.workspace.path().join("gathered").exists());
    // The sibling's process was killed, not left running.
    let pid: u32 = std::fs::read_to_string(h.workspace.path().join("sleep.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_process_gone(pid).await;
    let last = events.last().unwrap();
    assert_eq!(last.kind, "run_failed");
    let progress = RunProgress::replay(&h.checkpoints(&out.run_id).await).unwrap();
    assert!(matches!(
        progress.frame(&FrameId::main()).unwrap().status,
        FrameStatus::Failed { .. }
    ));
}

#[tokio::test]
async fn best_effort_joins_the_branches_that_succeeded() {
    let h = Harness::new();
    let source = r#"
schema v_out:
  v: string

router fan:
  mode: fan_out_all

tool fine:
  command: `echo '{"v": "fine"}'`
  output: v_out
  parallel_safe: true

tool bad:
  command: "exit 4"
  output: v_out
  parallel_safe: true

tool gather:
  command: "echo {{input.got}} {{input._failed_branches}}"
  await: best_effort

workflow w:
  entry: fan
  fan -> fine
  fan -> bad
  fine -> gather with { got: "{{input.v}}" }
  bad -> gather with { got: "{{input.v}}" }
  gather -> done
"#;
    let out = h.run(compile(source)).await;
    assert_eq!(out.status, RunStatus::Finished, "{:?}", out.failure);
    let events = h.events(&out.run_id).await;
    let join = h.of_kind(&out.run_id, "join_ready").await;
    assert_eq!(join[0].data["strategy"], "best_effort");
    assert_eq!(
        join[0].data["failed_branches"][0]["branch_id"],
        "branch_fan_bad"
    );
    let gather = node_events(&events, "node_finished", "gather");
    let text = gather[0].data["output"]["result"].as_str().unwrap();
    assert!(text.starts_with("fine [{"), "{text}");
    assert!(text.contains("branch_fan_bad"), "{text}");
}

#[tokio::test]
async fn round_robin_alternates_across_a_loop() {
    let h = Harness::new();
    let source = r#"
schema more_out:
  more: bool

router rr:
  mode: round_robin

tool a:
  command: "echo a >> order.txt"

tool b:
  command: "echo b >> order.txt"

tool count:
  command: `if [ $(wc -l < order.txt) -lt 4 ]; then echo '{"more": true}'; else echo '{"more": false}'; fi`
  output: more_out

workflow w:
  entry: rr
  rr -> a
  rr -> b
  a -> count
  b -> count
  count -> rr when more as cycle(5)
  count -> done when not more
"#;
    let out = h.run(compile(source)).await;
    assert_eq!(out.status, RunStatus::Finished, "{:?}", out.failure);
    let order = std::fs::read_to_string(h.workspace.path().join("order.txt")).unwrap();
    assert_eq!(order, "a\nb\na\nb\n");
    let picks: Vec<(String, u64)> = h
        .of_kind(&out.run_id, "edge_selected")
        .await
        .iter()
        .filter(|e| e.data["from"] == "rr")
        .map(|e| {
            (
                e.data["to"].as_str().unwrap().to_owned(),
                e.data["round_robin_index"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        picks,
        [
            ("a".to_owned(), 0),
            ("b".to_owned(), 1),
            ("a".to_owned(), 0),
            ("b".to_owned(), 1)
        ]
    );
    // The position is part of the resumable progress.
    let progress = RunProgress::replay(&h.checkpoints(&out.run_id).await).unwrap();
    let main = progress.frame(&FrameId::main()).unwrap();
    assert_eq!(main.round_robin.get(&NodeId::new("rr")), Some(&4));
    assert_eq!(main.loops.get("cycle"), Some(&3));
}

#[tokio::test]
async fn a_condition_router_routes_on_its_input() {
    let h = Harness::new();
    let source = r#"
schema probe_out:
  ok: bool

tool probe:
  command: `echo '{"ok": false}'`
  output: probe_out

router decide:
  mode: condition

tool yes:
  command: "echo yes"

tool no:
  command: "echo no"

workflow w:
  entry: probe
  probe -> decide with { ok: "{{outputs.probe.ok}}" }
  decide -> yes when ok
  decide -> no when not ok
  yes -> done
  no -> done
"#;
    let out = h.run(compile(source)).await;
    assert_eq!(out.status, RunStatus::Finished, "{:?}", out.failure);
    let events = h.events(&out.run_id).await;
    assert!(node_events(&events, "node_started", "yes").is_empty());
    assert_eq!(node_events(&events, "node_started", "no").len(), 1);
    let decide = node_events(&events, "node_finished", "decide");
    assert_eq!(decide[0].data["output"], json!({"ok": false}));
}

#[tokio::test]
async fn an_inner_loop_restarts_its_count_on_each_outer_iteration() {
    let h = Harness::new();
    let source = r#"
schema v_out:
  pass: bool

tool start:
  command: "echo start >> log.txt"

tool fix:
  command: "echo fix >> log.txt"

tool verify:
  command: `echo '{"pass": false}'`
  output: v_out

tool next:
  command: "echo next >> log.txt"

workflow w:
  entry: start
  start -> fix
  fix -> verify
  verify -> fix when not pass as retry(2)
  verify -> next
  next -> start as again(2)
  next -> done
"#;
    let out = h.run(compile(source)).await;
    assert_eq!(out.status, RunStatus::Finished, "{:?}", out.failure);
    let log = std::fs::read_to_string(h.workspace.path().join("log.txt")).unwrap();
    // Each of the three outer iterations runs fix three times (once plus
    // two retries): the exhausted inner loop yields to its exit edge, and
    // re-entering it from `start` restarts its count (upstream).
    assert_eq!(log.matches("start").count(), 3);
    assert_eq!(log.matches("fix").count(), 9);
    assert_eq!(log.matches("next").count(), 3);
}

#[tokio::test]
async fn fan_out_branches_ending_at_done_finish_the_run() {
    let h = Harness::new();
    let source = r#"
router fan:
  mode: fan_out_all

tool a:
  command: "echo a"
  parallel_safe: true

tool b:
  command: "echo b"
  parallel_safe: true

workflow w:
  entry: fan
  fan -> a
  fan -> b
  a -> done
  b -> done
"#;
    let out = h.run(compile(source)).await;
    assert_eq!(out.status, RunStatus::Finished, "{:?}", out.failure);
    let join = h.of_kind(&out.run_id, "join_ready").await;
    assert_eq!(join[0].data["terminal_join"], true);
    assert_eq!(join[0].node_id, None);
}

#[tokio::test]
async fn two_writing_branches_are_refused_before_anything_starts() {
    let h = Harness::new();
    let source = r#"
router fan:
  mode: fan_out_all

tool a:
  command: "touch a"

tool b:
  command: "touch b"

tool j:
  command: "true"

workflow w:
  entry: fan
  fan -> a
  fan -> b
  a -> j
  b -> j
  j -> done
"#;
    let out = h.run(compile(source)).await;
    assert_eq!(out.status, RunStatus::Failed);
    let failure = out.failure.unwrap();
    // Upstream `pkg/runtime/fan_out.go` `validateWorkspaceSafety`: its own
    // failure code, `WORKSPACE_SAFETY`.
    assert_eq!(failure.code, FailureCode::WorkspaceSafety);
    assert_eq!(failure.code.as_str(), "WORKSPACE_SAFETY");
    assert!(
        failure.message.contains("router fan"),
        "{}",
        failure.message
    );
    assert_eq!(h.kinds(&out.run_id).await, ["run_admission", "run_failed"]);
    let rec = h.store.load_run(&out.run_id).await.unwrap().unwrap();
    assert_eq!(
        rec.admission.unwrap().code.as_deref(),
        Some("workspace_safety")
    );
    assert!(!h.workspace.path().join("a").exists());
    // Serialised branches cannot race: the same graph is admitted.
    let serial = source.replace(
        "  entry: fan\n",
        "  entry: fan\n  budget:\n    max_parallel_branches: 1\n",
    );
    let out = h.run(compile(&serial)).await;
    assert_eq!(out.status, RunStatus::Finished, "{:?}", out.failure);
}

const FOREACH: &str = r#"
schema list_out:
  files: json

schema item_out:
  file: string
  n: int

tool split:
  command: `echo '{"files": LIST}'`
  output: list_out

tool work:
  command: `[ {{input.f}} != FAIL ] || exit 5; echo {{input.f}} > {{input.f}}.done; printf '{"file": "%s", "n": %s}' {{input.f}} {{input._index}}`
  output: item_out

tool gather:
  command: "echo {{input.files}}"
  await: wait_all

workflow each:
  entry: split
  split -> work as foreach files(f in "outputs.split.files")
  work -> gather
  gather -> done
"#;

fn foreach_source(list: &str, fail: &str) -> String {
    FOREACH.replace("LIST", list).replace("FAIL", fail)
}

#[tokio::test]
async fn foreach_runs_its_body_per_item_then_joins() {
    let h = Harness::new();
    let out = h
        .run(compile(&foreach_source(r#"["x", "y", "z"]"#, "none")))
        .await;
    assert_eq!(out.status, RunStatus::Finished, "{:?}", out.failure);
    for f in ["x.done", "y.done", "z.done"] {
        assert!(h.workspace.path().join(f).exists(), "{f}");
    }
    let events = h.events(&out.run_id).await;
    // One item after the other.
    assert_eq!(max_open_branches(&events), 1);
    let started = h.of_kind(&out.run_id, "branch_started").await;
    let indexes: Vec<u64> = started
        .iter()
        .map(|e| e.data["index"].as_u64().unwrap())
        .collect();
    assert_eq!(indexes, [0, 1, 2]);
    assert_eq!(started[0].data["branch_id"], "foreach_files_0");
    let selected = h.of_kind(&out.run_id, "edge_selected").await;
    let each = selected
        .iter()
        .find(|e| e.data["foreach"] == "files")
        .unwrap();
    assert_eq!(each.data["items"], 3);
    // The join receives every item's result, in item order.
    let gather = node_events(&events, "node_finished", "gather");
    let text = gather[0].data["output"]["result"].as_str().unwrap();
    let results: serde_json::Value = serde_json::from_str(text).unwrap();
    assert_eq!(
        results,
        json!([
            {"file": "x", "n": 0},
            {"file": "y", "n": 1},
            {"file": "z", "n": 2}
        ])
    );
    let progress = RunProgress::replay(&h.checkpoints(&out.run_id).await).unwrap();
    let last = progress.frame(&FrameId::new("foreach_files_2")).unwrap();
    assert_eq!(last.history, [NodeId::new("work")]);
    assert_eq!(
        last.status,
        FrameStatus::Reached {
            join: NodeId::new("gather")
        }
    );
    let main = progress.frame(&FrameId::main()).unwrap();
    assert_eq!(
        main.outputs[&NodeId::new("work")],
        json!({"file": "z", "n": 2})
    );
    assert_eq!(main.status, FrameStatus::Done);
}

#[tokio::test]
async fn a_failing_foreach_item_stops_the_loop_under_wait_all() {
    let h = Harness::new();
    let out = h
        .run(compile(&foreach_source(r#"["x", "bad", "z"]"#, "bad")))
        .await;
    assert_eq!(out.status, RunStatus::Failed);
    let failure = out.failure.unwrap();
    assert_eq!(failure.code, FailureCode::NodeFailed);
    assert!(
        failure.message.contains("item 1 of foreach files"),
        "{}",
        failure.message
    );
    assert!(h.workspace.path().join("x.done").exists());
    assert!(!h.workspace.path().join("z.done").exists());
}

#[tokio::test]
async fn an_empty_collection_joins_at_once_and_a_non_array_fails() {
    let h = Harness::new();
    let out = h.run(compile(&foreach_source("[]", "none"))).await;
    assert_eq!(out.status, RunStatus::Finished, "{:?}", out.failure);
    let events = h.events(&out.run_id).await;
    assert!(node_events(&events, "node_started", "work").is_empty());
    let gather = node_events(&events, "node_finished", "gather");
    assert_eq!(gather[0].data["output"]["result"], "[]");

    let out = h.run(compile(&foreach_source(r#""x""#, "none"))).await;
    let failure = out.failure.unwrap();
    assert_eq!(failure.code, FailureCode::NodeFailed);
    assert!(
        failure.message.contains("is not an array"),
        "{}",
        failure.message
    );
}

#[tokio::test]
async fn a_foreach_without_a_join_is_refused_at_admission() {
    let h = Harness::new();
    let source = foreach_source("[]", "none").replace("  await: wait_all\n", "");
    let out = h.run(compile(&source)).await;
    assert_eq!(out.failure.unwrap().code, FailureCode::LaunchFailed);
    let rec = h.store.load_run(&out.run_id).await.unwrap().unwrap();
    assert_eq!(rec.admission.unwrap().code.as_deref(), Some("bad_foreach"));
}

#[tokio::test]
async fn artifacts_and_loop_state_are_readable_in_templates() {
    let h = Harness::new();
    let source = r#"
schema n_out:
  n: int

schema v_out:
  pass: bool

tool draft:
  command: `n=$(($(cat n 2>/dev/null || echo 0)+1)); echo $n > n; printf '{"n": %s}' $n`
  output: n_out
  publish: doc_draft

tool verify:
  command: `printf '%s %s %s %s\n' {{loop.again.iteration}} {{loop.again.max}} {{loop.again.previous_output}} {{artifacts.doc_draft.n}} >> trace.txt; if [ {{artifacts.doc_draft.n}} -ge 3 ]; then echo '{"pass": true}'; else echo '{"pass": false}'; fi`
  output: v_out

workflow w:
  entry: draft
  draft -> verify
  verify -> draft when not pass as again(5)
  verify -> done when pass
"#;
    let out = h.run(compile(source)).await;
    assert_eq!(out.status, RunStatus::Finished, "{:?}", out.failure);
    let trace = std::fs::read_to_string(h.workspace.path().join("trace.txt")).unwrap();
    // previous_output is one traversal behind (none until the second
    // crossing of the back-edge); a command keeps a reference that has no
    // value as written, as upstream (`executor_tool.go`).
    assert_eq!(
        trace,
        "0 5 {{loop.again.previous_output}} 1\n1 5 {{loop.again.previous_output}} 2\n2 5 {\"pass\":false} 3\n"
    );
    let progress = RunProgress::replay(&h.checkpoints(&out.run_id).await).unwrap();
    let main = progress.frame(&FrameId::main()).unwrap();
    assert_eq!(main.artifacts["doc_draft"], json!({"n": 3}));
}

#[tokio::test]
async fn cancelling_a_run_kills_every_running_branch() {
    let h = Harness::new();
    let source = r#"
router fan:
  mode: fan_out_all

tool one:
  command: "sleep 100 & echo $! > one.pid; wait"
  parallel_safe: true

tool two:
  command: "sleep 100 & echo $! > two.pid; wait"
  parallel_safe: true

tool j:
  command: "true"

workflow w:
  entry: fan
  fan -> one
  fan -> two
  one -> j
  two -> j
  j -> done
"#;
    let cancel = tokio_util::sync::CancellationToken::new();
    let trigger = cancel.clone();
    let ws = h.workspace.path().to_path_buf();
    let watcher = tokio::spawn(async move {
        let read = |f: &str| {
            std::fs::read_to_string(ws.join(f))
                .ok()
                .and_then(|s| s.trim().parse::<u32>().ok())
        };
        loop {
            if let (Some(a), Some(b)) = (read("one.pid"), read("two.pid")) {
                trigger.cancel();
                return [a, b];
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    });
    let out = h.run_with(h.options(compile(source)), cancel).await;
    let pids = watcher.await.unwrap();
    assert_eq!(out.status, RunStatus::Cancelled);
    for pid in pids {
        assert_process_gone(pid).await;
    }
    let outcomes: Vec<String> = h
        .of_kind(&out.run_id, "branch_finished")
        .await
        .iter()
        .map(|e| e.data["outcome"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(outcomes, ["cancelled", "cancelled"]);
    assert_eq!(h.kinds(&out.run_id).await.last().unwrap(), "run_cancelled");
}

#[tokio::test]
async fn a_legacy_join_node_waits_for_its_required_branches() {
    let h = Harness::new();
    let source = r#"
router fan:
  mode: fan_out_all

tool a:
  command: "echo a"
  parallel_safe: true

tool b:
  command: "echo b"
  parallel_safe: true

join meet:
  strategy: wait_all
  require: [a, b]

tool after:
  command: "echo {{outputs.a.result}}{{outputs.b.result}}"

workflow w:
  entry: fan
  fan -> a
  fan -> b
  a -> meet
  b -> meet
  meet -> after
  after -> done
"#;
    let out = h.run(compile(source)).await;
    assert_eq!(out.status, RunStatus::Finished, "{:?}", out.failure);
    let join = h.of_kind(&out.run_id, "join_ready").await;
    assert_eq!(join[0].node_id, Some(NodeId::new("meet")));
    let events = h.events(&out.run_id).await;
    let after = node_events(&events, "node_finished", "after");
    assert_eq!(after[0].data["output"]["result"], "ab");
    // A requirement that never ran fails the join, by name.
    let missing = source.replace("require: [a, b]", "require: [a, ghost]");
    let out = h.run(compile(&missing)).await;
    let failure = out.failure.unwrap();
    assert_eq!(failure.code, FailureCode::NodeFailed);
    assert!(failure.message.contains("ghost"), "{}", failure.message);
}

#[tokio::test]
async fn a_compute_node_evaluates_its_expressions_and_routes() {
    let h = Harness::new();
    let source = r#"
vars:
  target: int = 3

schema scan_out:
  findings: json
  severity: string

schema verdict_out:
  count: int
  blocking: bool
  label: string

tool scan:
  command: `echo '{"findings": ["a", "b", "c"], "severity": "high"}'`
  output: scan_out

compute judge_scan:
  output: verdict_out
  expr:
    count: "length(input.findings)"
    blocking: "input.severity == 'high' && length(input.findings) >= vars.target"
    label: "if(length(outputs.scan.findings) > 2, 'many', 'few')"

tool block:
  command: "echo blocked {{outputs.judge_scan.count}}"

tool pass:
  command: "echo pass"

workflow w:
  entry: scan
  scan -> judge_scan with { findings: "{{input.findings}}", severity: "{{input.severity}}" }
  judge_scan -> block when blocking
  judge_scan -> pass when not blocking
  block -> done
  pass -> done
"#;
    let out = h.run(compile(source)).await;
    assert_eq!(out.status, RunStatus::Finished, "{:?}", out.failure);
    let events = h.events(&out.run_id).await;
    let judged = node_events(&events, "node_finished", "judge_scan");
    assert_eq!(
        judged[0].data["output"],
        json!({"count": 3, "blocking": true, "label": "many"})
    );
    let block = node_events(&events, "node_finished", "block");
    assert_eq!(block[0].data["output"]["result"], "blocked 3");
    assert!(node_events(&events, "node_started", "pass").is_empty());
}

#[tokio::test]
async fn a_compute_type_error_fails_the_node_by_field() {
    let h = Harness::new();
    let source = r#"
schema n_out:
  n: int

tool t:
  command: `echo '{"n": 1}'`
  output: n_out

compute c:
  expr:
    bad: "input.n / 0"

workflow w:
  entry: t
  t -> c with { n: "{{input.n}}" }
  c -> done
"#;
    let out = h.run(compile(source)).await;
    let failure = out.failure.unwrap();
    assert_eq!(failure.code, FailureCode::NodeFailed);
    assert!(failure.message.contains("field bad"), "{}", failure.message);
}

#[tokio::test]
async fn a_fan_out_forks_along_the_edges_whose_condition_holds() {
    let h = Harness::new();
    let source = r#"
schema deps_out:
  has_npm: bool
  has_go: bool

tool enumerate:
  command: `echo '{"has_npm": true, "has_go": false}'`
  output: deps_out

router fan:
  mode: fan_out_all

tool js:
  command: "touch js.ran"
  parallel_safe: true

tool go:
  command: "touch go.ran"
  parallel_safe: true

tool generic:
  command: "touch generic.ran"
  parallel_safe: true

tool j:
  command: "true"
  await: wait_all

workflow w:
  entry: enumerate
  enumerate -> fan
  fan -> js when has_npm
  fan -> go when has_go
  fan -> generic
  js -> j
  go -> j
  generic -> j
  j -> done
"#;
    let out = h.run(compile(source)).await;
    assert_eq!(out.status, RunStatus::Finished, "{:?}", out.failure);
    // The router passed its predecessor's output through (no `with`), and
    // only the branches whose condition held on it ran.
    assert!(h.workspace.path().join("js.ran").exists());
    assert!(h.workspace.path().join("generic.ran").exists());
    assert!(!h.workspace.path().join("go.ran").exists());
    assert_eq!(h.of_kind(&out.run_id, "branch_started").await.len(), 2);
    let join = h.of_kind(&out.run_id, "join_ready").await;
    assert_eq!(join[0].data["branches"], 2);
}

#[tokio::test]
async fn a_condition_router_without_with_reads_its_predecessor() {
    let h = Harness::new();
    let source = r#"
schema verdict_out:
  approved: bool

tool judge:
  command: `echo '{"approved": true}'`
  output: verdict_out

router decision:
  mode: condition

tool fix:
  command: "touch fixed"

workflow w:
  entry: judge
  judge -> decision
  decision -> fix when not approved
  decision -> done when approved
  fix -> done
"#;
    let out = h.run(compile(source)).await;
    assert_eq!(out.status, RunStatus::Finished, "{:?}", out.failure);
    assert!(!h.workspace.path().join("fixed").exists());
    let events = h.events(&out.run_id).await;
    let decided = node_events(&events, "node_finished", "decision");
    assert_eq!(decided[0].data["output"], json!({"approved": true}));
}
