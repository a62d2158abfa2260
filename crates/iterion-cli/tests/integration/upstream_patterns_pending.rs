//! Issue 30, the pattern whose engine behaviour is not right yet. This file
//! is NOT listed in `main.rs` (CI does not compile it); it moves into
//! `upstream_patterns_landed.rs` once it passes.
//!
//! claw's wider tool set fails today: the node's final answer is a forced
//! tool named `structured_output` (`iterion_agent::provider::chat::
//! STRUCTURED_OUTPUT_TOOL`), and the claw builtin of upstream's registry
//! has the same name with its own schema (`payload`), so a node that lists
//! `structured_output` gets the builtin's schema for its answer and fails
//! `AGENT_SCHEMA_MISMATCH`.

use crate::upstream_patterns::{Pattern, Place, assert_finished, call_with, on_every_place};

// ---------------------------------------------------------------------------
// 5. claw's wider tool set — upstream `.archive/examples/
//    claw_tool_coverage.iter` (`sleep`), `claw_subagents.iter` (`agent`).
//    Upstream resolves claw names in its registry
//    (`pkg/backend/tool/claw_builtins.go:46-61`, registry.go:193-246) and
//    fails the node before any model call on a miss (`executor.go:1032-1036`).
//    Names whose behaviour is claw's own orchestration are refused here
//    with a typed error naming the tool; a name nothing provides is C322.
// ---------------------------------------------------------------------------

fn claw_extra_tools(place: Place) {
    let p = Pattern::new(place, Vec::new());
    let nodes = r#"
schema o:
  answer: string

agent coverage:
  model: "anthropic/claude-sonnet-4-6"
  backend: "claw"
  output: o
  tools: [bash, todo_write, sleep, structured_output]
  user: "COVERAGE"
"#;
    let text = p.workflow(nodes, "claw_extra", "coverage", "coverage -> done");
    let file = p.write("claw_extra.iter", &text);
    let res = p.run(&file, &[]);
    assert_finished(&p, &res);
    let offered: Vec<String> = call_with(&p, "COVERAGE").body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str().map(ToOwned::to_owned))
        .collect();
    for name in ["todo_write", "sleep"] {
        assert!(offered.iter().any(|n| n == name), "{place:?}: {offered:?}");
    }

    // An orchestration tool of upstream's claw: accepted by validate, the
    // node fails before its first model call, naming it.
    let p = Pattern::new(place, Vec::new());
    let text = p.workflow(
        &nodes.replace(
            "[bash, todo_write, sleep, structured_output]",
            "[task_create]",
        ),
        "claw_orchestration",
        "coverage",
        "coverage -> done",
    );
    let file = p.write("claw_orchestration.iter", &text);
    let (code, out) = p.validate(&file);
    assert_eq!(code, Some(0), "{out}");
    let res = p.run(&file, &[]);
    assert_ne!(res.status(), "finished", "{place:?}");
    let said = format!("{}{}", res.stderr, res.stdout);
    assert!(
        said.contains("task_create") && said.contains("not available"),
        "{place:?}: {said}"
    );
    assert!(
        p.model_calls().is_empty(),
        "{place:?}: a model call was made"
    );

    // A name nothing provides on claw (upstream: `unknown tool`, later C135).
    let text = p.workflow(
        &nodes.replace("[bash, todo_write, sleep, structured_output]", "[git_log]"),
        "claw_unknown",
        "coverage",
        "coverage -> done",
    );
    let file = p.write("claw_unknown.iter", &text);
    let (code, out) = p.validate(&file);
    assert_ne!(code, Some(0), "{out}");
    assert!(out.contains("C322") && out.contains("git_log"), "{out}");
}
on_every_place!(claw_extra_tools);
