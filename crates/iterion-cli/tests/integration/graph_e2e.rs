//! Graph semantics end to end (issue 11, the engine's half): routers,
//! parallel branches and their join, loops, through the real `iterion run`
//! on dockerd and on Podman. Every branch execs into the run's one
//! container; concurrency and its bound are read from the event stream
//! (which branches are open between `branch_started` and
//! `branch_finished`), never from wall-clock durations.

// Helpers outside `#[test]` fns fail the test by panicking, like the tests.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::support::{Engine, Sandbox, busybox, container_exists, of_type, slim};

/// A branch that marks itself, waits (bounded) until `need` branches have
/// marked — so it can only finish when that many run at once — then runs
/// `then`.
fn barrier(name: &str, need: usize, then: &str) -> String {
    format!(
        "tool {name}:\n  command: `touch .mark_{name}; i=0; while [ $(ls .mark_* | wc -l) -lt {need} ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; [ $(ls .mark_* | wc -l) -ge {need} ] || exit 9; {then}`\n  output: file_out\n  parallel_safe: true\n\n"
    )
}

fn writer(name: &str, need: usize) -> String {
    barrier(
        name,
        need,
        &format!(
            "echo {name} > {name}.txt; printf '{{\"file\": \"{name}.txt\", \"host\": \"%s\"}}' \"$(cat /proc/sys/kernel/hostname)\""
        ),
    )
}

fn sandbox_block(image: &str, extra: &str) -> String {
    format!("  sandbox:\n    image: \"{image}\"\n    host_state: none\n{extra}")
}

/// Run `text` on `engine` and expect it to finish: the sandbox (the
/// workspace stays alive with it), the run id and its events.
fn run_finished(engine: Engine, name: &str, text: &str) -> (Sandbox, String, Vec<Value>) {
    let sb = Sandbox::new(engine);
    let file = sb.write(name, text);
    let res = sb.run(&file, &[]);
    let run_id = res.run_id();
    assert_eq!(
        (res.code, res.status()),
        (Some(0), "finished"),
        "{engine:?}: {}",
        res.stderr
    );
    let events = sb.events(&run_id);
    (sb, run_id, events)
}

/// Most branches open at once, in event order.
fn max_open(events: &[Value]) -> usize {
    let mut open = BTreeSet::new();
    let mut max = 0;
    for e in events {
        let id = e["data"]["branch_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        match e["type"].as_str() {
            Some("branch_started") => {
                open.insert(id);
                max = max.max(open.len());
            }
            Some("branch_finished") => {
                open.remove(&id);
            }
            _ => {}
        }
    }
    max
}

fn output<'e>(events: &'e [Value], node: &str) -> &'e Value {
    events
        .iter()
        .find(|e| e["type"] == "node_finished" && e["node_id"] == node)
        .map(|e| &e["data"]["output"])
        .unwrap_or_else(|| panic!("no node_finished for {node}"))
}

/// Round-robin across a loop, a condition router, then a fan-out of three
/// writers (at most two at once) joined by a node reading their files.
fn routers_branches_and_join(engine: Engine) {
    let text = format!(
        r#"schema file_out:
  file: string
  host: string

schema more_out:
  more: bool

schema gather_out:
  lines: int
  hosts: int

router rr:
  mode: round_robin

tool a:
  command: "echo a >> order.txt"

tool b:
  command: "echo b >> order.txt"

tool count:
  command: `if [ $(wc -l < order.txt) -lt 2 ]; then echo '{{"more": true}}'; else echo '{{"more": false}}'; fi`
  output: more_out

router decide:
  mode: condition

router fan:
  mode: fan_out_all

{w1}{w2}{w3}tool gather:
  command: `printf '{{"lines": %s, "hosts": %s}}' $(cat w1.txt w2.txt w3.txt | wc -l) $(printf '%s\n' {{{{input.h1}}}} {{{{input.h2}}}} {{{{input.h3}}}} | sort -u | wc -l)`
  output: gather_out
  await: wait_all

workflow graph_e2e:
{sandbox}  entry: rr
  budget:
    max_parallel_branches: 2
  rr -> a
  rr -> b
  a -> count
  b -> count
  count -> rr when more as cycle(3)
  count -> decide when not more with {{ again: "{{{{input.more}}}}" }}
  decide -> fan when not again
  decide -> fail when again
  fan -> w1
  fan -> w2
  fan -> w3
  w1 -> gather with {{ h1: "{{{{input.host}}}}" }}
  w2 -> gather with {{ h2: "{{{{input.host}}}}" }}
  w3 -> gather with {{ h3: "{{{{input.host}}}}" }}
  gather -> done
"#,
        w1 = writer("w1", 2),
        w2 = writer("w2", 2),
        w3 = writer("w3", 2),
        sandbox = sandbox_block(&busybox(), ""),
    );
    let (sb, run_id, events) = run_finished(engine, "graph.iter", &text);
    assert_eq!(of_type(&events, "sandbox_started").len(), 1, "{engine:?}");

    // Round robin: a then b, across the loop.
    let order = std::fs::read_to_string(sb.workspace().join("order.txt")).unwrap();
    assert_eq!(order, "a\nb\n", "{engine:?}");
    let picks: Vec<(String, u64)> = of_type(&events, "edge_selected")
        .iter()
        .filter(|e| e["data"]["from"] == "rr")
        .map(|e| {
            (
                e["data"]["to"].as_str().unwrap().to_owned(),
                e["data"]["round_robin_index"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(picks, [("a".to_owned(), 0), ("b".to_owned(), 1)]);
    // The condition router read its input and took `not again`.
    assert_eq!(output(&events, "decide"), &json!({"again": false}));

    // The fan-out: three branches, two at once (each waits for a second),
    // never three; the third started only after one finished.
    assert_eq!(max_open(&events), 2, "{engine:?}");
    let started = of_type(&events, "branch_started");
    let finished = of_type(&events, "branch_finished");
    assert_eq!((started.len(), finished.len()), (3, 3));
    assert!(started[2]["seq"].as_u64() > finished[0]["seq"].as_u64());
    assert!(finished.iter().all(|f| f["data"]["outcome"] == "joined"));
    let join = of_type(&events, "join_ready");
    assert_eq!(join.len(), 1);
    assert_eq!(join[0]["node_id"], "gather");

    // Every branch ran in the run's one container (one hostname, not the
    // host's), wrote its file into the workspace, and the join read all.
    assert_eq!(output(&events, "gather"), &json!({"lines": 3, "hosts": 1}));
    let host = output(&events, "w1")["host"].as_str().unwrap().to_owned();
    let here = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_ne!(host, here.trim(), "{engine:?}: a branch ran on the host");
    for f in ["w1.txt", "w2.txt", "w3.txt"] {
        assert!(sb.workspace().join(f).exists(), "{engine:?}: {f}");
    }
    assert!(
        !container_exists(engine, &run_id),
        "{engine:?}: container left"
    );
}

#[test]
fn docker_routers_branches_and_join() {
    routers_branches_and_join(Engine::Docker);
}

#[test]
fn podman_routers_branches_and_join() {
    routers_branches_and_join(Engine::Podman);
}

/// A failing branch under `wait_all`: the run fails with the branch's
/// code, the sibling still running is cancelled, the join never runs, and
/// the container is gone.
fn failing_branch(engine: Engine) {
    let text = format!(
        r#"router fan:
  mode: fan_out_all

tool slow:
  command: "touch slow.started; sleep 100"
  parallel_safe: true

tool bad:
  command: "i=0; while [ ! -e slow.started ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; echo broken >&2; exit 3"
  parallel_safe: true

tool gather:
  command: "touch gathered"

workflow fail_branch:
{sandbox}  entry: fan
  fan -> slow
  fan -> bad
  slow -> gather
  bad -> gather
  gather -> done
"#,
        sandbox = sandbox_block(&busybox(), ""),
    );
    let sb = Sandbox::new(engine);
    let file = sb.write("fail.iter", &text);
    let res = sb.run(&file, &[]);
    let run_id = res.run_id();
    assert_eq!(res.code, Some(1), "{engine:?}: {}", res.stderr);
    assert_eq!(res.status(), "failed");
    assert_eq!(res.failure_code(), Some("NODE_FAILED"));
    let events = sb.events(&run_id);
    let failed: Vec<(String, String)> = of_type(&events, "node_failed")
        .iter()
        .map(|e| {
            (
                e["node_id"].as_str().unwrap().to_owned(),
                e["data"]["error"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(
        failed.contains(&("slow".to_owned(), "cancelled".to_owned())),
        "{engine:?}: {failed:?}"
    );
    assert!(failed.contains(&("bad".to_owned(), "command exited with 3".to_owned())));
    assert!(of_type(&events, "join_ready").is_empty());
    assert!(!sb.workspace().join("gathered").exists());
    let run_failed = of_type(&events, "run_failed");
    assert!(
        run_failed[0]["data"]["error"]
            .as_str()
            .unwrap()
            .contains("branch_fan_bad"),
        "{run_failed:?}"
    );
    assert!(
        !container_exists(engine, &run_id),
        "{engine:?}: container left"
    );
}

#[test]
fn docker_failing_branch_cancels_its_sibling() {
    failing_branch(Engine::Docker);
}

#[test]
fn podman_failing_branch_cancels_its_sibling() {
    failing_branch(Engine::Podman);
}

/// Two branches blocked by the egress proxy at the same time: each
/// `network_blocked` names the node whose exec asked (per-exec proxy
/// credentials), not whichever ran last.
fn parallel_denials(engine: Engine) {
    let probe = |host: &str| {
        format!(
            "curl -sS -m 10 -o /dev/null http://{host}/ || true; touch {host}.tried; i=0; while [ $(ls *.tried | wc -l) -lt 2 ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; echo '{{\"file\": \"-\", \"host\": \"-\"}}'"
        )
    };
    let text = format!(
        r#"schema file_out:
  file: string
  host: string

router fan:
  mode: fan_out_all

{left}{right}tool j:
  command: "true"
  await: wait_all

workflow denials:
{sandbox}  entry: fan
  fan -> left
  fan -> right
  left -> j
  right -> j
  j -> done
"#,
        left = barrier("left", 2, &probe("left.denied.test")),
        right = barrier("right", 2, &probe("right.denied.test")),
        sandbox = sandbox_block(
            &slim(),
            "    network:\n      mode: allowlist\n      rules: [\"allowed.invalid\"]\n"
        ),
    );
    let (_sb, run_id, events) = run_finished(engine, "denials.iter", &text);
    // Both branches were open while both denials happened: each waited
    // for the other's attempt before finishing.
    assert_eq!(max_open(&events), 2, "{engine:?}");
    let blocked: BTreeSet<(String, String, String)> = of_type(&events, "network_blocked")
        .iter()
        .map(|e| {
            (
                e["node_id"].as_str().unwrap_or("-").to_owned(),
                e["data"]["node_id"].as_str().unwrap_or("-").to_owned(),
                e["data"]["host"].as_str().unwrap_or("-").to_owned(),
            )
        })
        .collect();
    assert_eq!(
        blocked,
        BTreeSet::from([
            (
                "left".to_owned(),
                "left".to_owned(),
                "left.denied.test".to_owned()
            ),
            (
                "right".to_owned(),
                "right".to_owned(),
                "right.denied.test".to_owned()
            ),
        ]),
        "{engine:?}"
    );
    // The per-exec credentials stay out of the audit trail.
    let text = serde_json::to_string(&events).unwrap();
    assert!(
        !text.contains("http://x"),
        "{engine:?}: a proxy credential in the events"
    );
    assert!(
        !container_exists(engine, &run_id),
        "{engine:?}: container left"
    );
}

#[test]
fn docker_parallel_denials_name_their_node() {
    parallel_denials(Engine::Docker);
}

#[test]
fn podman_parallel_denials_name_their_node() {
    parallel_denials(Engine::Podman);
}

/// `as foreach` over a JSON array a node printed: the body runs in the
/// container once per item, in order, and the join gets every result.
fn foreach_items(engine: Engine) {
    let text = format!(
        r#"schema list_out:
  files: json

schema item_out:
  file: string
  host: string

tool split:
  command: `echo '{{"files": ["one", "two", "three"]}}'`
  output: list_out

tool work:
  command: `echo {{{{input.f}}}} > {{{{input.f}}}}.done; printf '{{"file": "%s", "host": "%s"}}' {{{{input.f}}}} "$(cat /proc/sys/kernel/hostname)"`
  output: item_out

tool gather:
  command: "echo {{{{input.files}}}}"
  await: wait_all

workflow each:
{sandbox}  entry: split
  split -> work as foreach files(f in "outputs.split.files")
  work -> gather
  gather -> done
"#,
        sandbox = sandbox_block(&busybox(), ""),
    );
    let (sb, run_id, events) = run_finished(engine, "each.iter", &text);
    assert_eq!(max_open(&events), 1, "{engine:?}: items ran one at a time");
    let indexes: Vec<u64> = of_type(&events, "branch_started")
        .iter()
        .map(|e| e["data"]["index"].as_u64().unwrap())
        .collect();
    assert_eq!(indexes, [0, 1, 2]);
    let results: Value =
        serde_json::from_str(output(&events, "gather")["result"].as_str().unwrap()).unwrap();
    let files: Vec<&str> = results
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["file"].as_str().unwrap())
        .collect();
    assert_eq!(files, ["one", "two", "three"]);
    let hosts: BTreeSet<&str> = results
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["host"].as_str().unwrap())
        .collect();
    assert_eq!(hosts.len(), 1, "{engine:?}: one container for every item");
    for f in ["one.done", "two.done", "three.done"] {
        assert!(sb.workspace().join(f).exists(), "{engine:?}: {f}");
    }
    assert!(
        !container_exists(engine, &run_id),
        "{engine:?}: container left"
    );
}

#[test]
fn docker_foreach_over_a_json_array() {
    foreach_items(Engine::Docker);
}

#[test]
fn podman_foreach_over_a_json_array() {
    foreach_items(Engine::Podman);
}
