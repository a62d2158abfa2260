//! Issue 30, the patterns whose engine change landed after the harness:
//! each on the host, dockerd and Podman, written against the semantics
//! upstream's code gives (2322ab49), cited per pattern; the harness is
//! `upstream_patterns.rs`. What still waits is in
//! `upstream_patterns_pending.rs` (not compiled).

use iterion_testkit::provider::Turn;
use serde_json::{Value, json};

use crate::support::of_type;
use crate::upstream_patterns::{
    Pattern, Place, WRITERS_EDGES, WRITERS_NODES, assert_finished, call_with, on_every_place,
    request_text,
};

fn node_outputs<'e>(events: &'e [Value], node: &str) -> Vec<&'e Value> {
    events
        .iter()
        .filter(|e| e["type"] == "node_finished" && e["node_id"] == node)
        .map(|e| &e["data"]["output"])
        .collect()
}

// ---------------------------------------------------------------------------
// 1. A review/fix loop whose first review reads the output of a fixer that
//    has not run yet — upstream `examples/whole_improve_loop/main.bot:596-604`
//    (`alt -> reviewer_claude with { previous_scanned_areas:
//    "{{outputs.streak_check.…}}" }`, streak_check reached from alt only
//    through the loop, so not yet run on the first pass). Upstream: a `with` value that is exactly one
//    ref resolves to null when its node has not run (`engine.go:1377-1407`),
//    null renders "" in a prompt (`executor.go:2372-2384`); the node runs.
// ---------------------------------------------------------------------------

fn review_fix_loop_reads_nodes_not_yet_run(place: Place) {
    // The first review rejects (scripted); everything after is automatic.
    let p = Pattern::new(
        place,
        vec![Turn::Answer(
            json!({"approved": false, "notes": "tighten the parser"}),
        )],
    );
    let nodes = r#"
schema plan_out:
  steps: string

schema review_in:
  plan: string
  previous: string

schema verdict:
  approved: bool
  notes: string

schema fix_out:
  summary: string

tool plan:
  command: `echo '{"steps": "step one"}'`
  output: plan_out

tool alt:
  command: "echo next round"

agent reviewer:
  model: "anthropic/claude-sonnet-4-6"
  backend: "claw"
  input: review_in
  output: verdict
  user: "REVIEWER plan=<{{input.plan}}> previous=<{{input.previous}}>"

agent fixer:
  model: "anthropic/claude-sonnet-4-6"
  backend: "claw"
  output: fix_out
  tools: [bash]
  user: "FIXER notes=<{{input.notes}}>"
"#;
    let text = p.workflow(
        nodes,
        "review_fix",
        "plan",
        r#"
plan -> alt
alt -> reviewer with { plan: "{{outputs.plan.steps}}", previous: "{{outputs.fixer.summary}}" }
reviewer -> done when approved
reviewer -> fixer when not approved with { notes: "{{outputs.reviewer.notes}}" }
fixer -> alt as fix_loop(3)
"#,
    );
    let file = p.write("review_fix.iter", &text);
    let res = p.run(&file, &[]);
    let events = assert_finished(&p, &res);
    let reviews: Vec<String> = p
        .model_calls()
        .iter()
        .map(request_text)
        .filter(|t| t.contains("REVIEWER"))
        .collect();
    assert_eq!(reviews.len(), 2, "{place:?}: {reviews:#?}");
    assert!(
        reviews[0].contains("REVIEWER plan=<step one> previous=<>"),
        "{place:?}: the fixer had not run: its ref is null, rendered empty: {}",
        reviews[0]
    );
    assert!(
        reviews[1].contains("previous=<scripted summary>"),
        "{place:?}: {}",
        reviews[1]
    );
    assert!(call_with(&p, "FIXER notes=<tighten the parser>").is_model_call());
    assert_eq!(node_outputs(&events, "reviewer").len(), 2);
    assert_eq!(node_outputs(&events, "fixer").len(), 1);
}
on_every_place!(review_fix_loop_reads_nodes_not_yet_run);

// ---------------------------------------------------------------------------
// 2. `model: "${X}"` with X unset — upstream `.archive/examples/
//    ci_fix_until_green.iter`, `pr_refine_single_model.iter` (`model:
//    "${CLAUDE_MODEL}"`). Upstream expands `${V}` / `${V:-d}` at run time
//    (`executor.go:958-961`); empty on claw → the detector's pick, Anthropic
//    key first → `anthropic/claude-sonnet-4-6` (`detect.go:214-247`).
// ---------------------------------------------------------------------------

fn model_from_an_unset_variable(place: Place) {
    let p = Pattern::new(place, Vec::new());
    let nodes = r#"
schema o:
  answer: string

agent unset_model:
  model: "${ITERION_PATTERN_UNSET_MODEL}"
  backend: "claw"
  output: o
  user: "MODEL-UNSET"

agent defaulted_model:
  model: "${ITERION_PATTERN_UNSET_MODEL:-openai/gpt-4o-mini}"
  backend: "claw"
  output: o
  user: "MODEL-DEFAULTED"
"#;
    let text = p.workflow(
        nodes,
        "models",
        "unset_model",
        "unset_model -> defaulted_model\ndefaulted_model -> done",
    );
    let file = p.write("models.iter", &text);
    let res = p.run(&file, &[]);
    assert_finished(&p, &res);
    let unset = call_with(&p, "MODEL-UNSET");
    assert!(unset.path.starts_with("/v1/messages"), "{}", unset.path);
    assert_eq!(unset.body["model"], "claude-sonnet-4-6");
    let defaulted = call_with(&p, "MODEL-DEFAULTED");
    assert!(
        defaulted.path.ends_with("/chat/completions"),
        "{}",
        defaulted.path
    );
    assert_eq!(defaulted.body["model"], "gpt-4o-mini");
}
on_every_place!(model_from_an_unset_variable);

// ---------------------------------------------------------------------------
// 3. `{{input.task}}` on the entry node — upstream `.archive/examples/
//    session_inherit_validation.iter:31` (`Task : {{input.task}}` on the
//    entry) and `examples/doc-align/main.bot` (`workspace_dir: string =
//    "${PROJECT_DIR}"`). Upstream: the entry's input is the var defaults
//    (raw), then `--var` (`engine.go:1308-1366`); an absent key stays
//    literal (`executor.go:1988`); `{{vars.X}}` is `${…}`-expanded
//    (`engine.go:1610-1640`).
// ---------------------------------------------------------------------------

fn entry_input_is_the_variables(place: Place) {
    let p = Pattern::new(place, Vec::new());
    let nodes = r#"
vars:
  task: string = "the default task"
  workspace_dir: string = "${PROJECT_DIR}"

schema o:
  answer: string

agent implement:
  model: "anthropic/claude-sonnet-4-6"
  backend: "claw"
  output: o
  tools: [bash]
  user: "IMPLEMENT task=<{{input.task}}> raw=<{{input.workspace_dir}}> var=<{{vars.workspace_dir}}> absent=<{{input.not_given}}>"

tool in_workspace:
  command: "test -d '{{vars.workspace_dir}}' && echo present"
"#;
    let text = p.workflow(
        nodes,
        "entry_input",
        "implement",
        "implement -> in_workspace\nin_workspace -> done",
    );
    let file = p.write("entry_input.iter", &text);
    let res = p.run(&file, &["--var", "task=from the flag"]);
    assert_finished(&p, &res);
    let t = request_text(&call_with(&p, "IMPLEMENT"));
    assert!(t.contains("task=<from the flag>"), "{place:?}: {t}");
    assert!(t.contains("raw=<${PROJECT_DIR}>"), "{place:?}: {t}");
    assert!(t.contains("absent=<{{input.not_given}}>"), "{place:?}: {t}");
    let var = t
        .split("var=<")
        .nth(1)
        .and_then(|r| r.split('>').next())
        .unwrap_or("");
    assert!(
        var.starts_with('/') && !var.contains("${"),
        "{place:?}: vars.workspace_dir is expanded: {var:?}"
    );
}
on_every_place!(entry_input_is_the_variables);

// ---------------------------------------------------------------------------
// 4. CLI tool names on `claude_code` — upstream `.archive/examples/
//    feature_dev_review_fix_dual.iter` (`tools: [Bash, Read, …]`),
//    `pr_review.iter` (`git_log`). Upstream never checks these names: they
//    go verbatim to `--allowedTools` (`executor.go:974`,
//    `claude_code.go:129-130`).
// ---------------------------------------------------------------------------

fn cli_tool_names_on_claude_code(place: Place) {
    let p = Pattern::new(place, Vec::new());
    let nodes = r#"
schema plan_out:
  plan: string

agent planner:
  model: "anthropic/claude-sonnet-4-6"
  backend: "claude_code"
  output: plan_out
  tools: [Bash, Read, Edit, Write, Glob, Grep, git_log]
  user: "PLANNER make a plan"
"#;
    let text = p.workflow(nodes, "cli_tools", "planner", "planner -> done");
    let file = p.write("cli_tools.iter", &text);
    let (code, out) = p.validate(&file);
    assert_eq!(code, Some(0), "{out}");
    let res = p.run(&file, &[]);
    let events = assert_finished(&p, &res);
    let offered: Vec<String> = call_with(&p, "PLANNER").body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str().map(ToOwned::to_owned))
        .collect();
    assert!(offered.iter().any(|n| n == "Bash"), "{offered:?}");
    assert!(
        of_type(&events, "tool_called")
            .iter()
            .any(|e| e["data"]["tool"] == "Bash"),
        "{place:?}: the CLI ran its Bash"
    );
    assert_eq!(node_outputs(&events, "planner")[0]["plan"], "scripted plan");
}
on_every_place!(cli_tool_names_on_claude_code);

// ---------------------------------------------------------------------------
// 6. A tool's output that does not match its schema — upstream
//    `.archive/examples/sandbox_cloud_smoke.iter` (`echo` with `output:
//    greet_output {output: string}`). Upstream wraps non-JSON stdout as
//    `{"result": "<trimmed>"}` (`executor_tool.go:196-200`) and does not
//    validate tool outputs (`helpers.go:515-537`); here a warning event
//    says so, and strict checking is the opt-in.
// ---------------------------------------------------------------------------

fn tool_output_off_its_schema(place: Place) {
    let p = Pattern::new(place, Vec::new());
    let nodes = r#"
schema greet_output:
  output: string

schema o:
  answer: string

tool greet:
  command: "echo hello from the tool"
  output: greet_output

agent read_back:
  model: "anthropic/claude-sonnet-4-6"
  backend: "claw"
  output: o
  user: "READBACK whole=<{{input.whole}}> field=<{{input.field}}>"
"#;
    let text = p.workflow(
        nodes,
        "tool_output",
        "greet",
        "greet -> read_back with { whole: \"{{outputs.greet}}\", field: \"{{outputs.greet.output}}\" }\nread_back -> done",
    );
    let file = p.write("tool_output.iter", &text);
    let res = p.run(&file, &[]);
    let events = assert_finished(&p, &res);
    assert_eq!(
        node_outputs(&events, "greet")[0]["result"],
        "hello from the tool"
    );
    let warned = of_type(&events, "node_output_schema_mismatch");
    assert_eq!(warned.len(), 1, "{place:?}: one warning");
    assert_eq!(warned[0]["node_id"], "greet");
    // The whole output is the wrapped object; its declared field is
    // absent, so null, rendered empty (`engine.go:1397-1407`).
    let t = request_text(&call_with(&p, "READBACK"));
    let whole = t
        .split("whole=<")
        .nth(1)
        .and_then(|r| r.split('>').next())
        .unwrap_or("");
    assert!(whole.contains("hello from the tool"), "{place:?}: {t}");
    assert!(t.contains("field=<>"), "{place:?}: {t}");

    // Strict checking, opted into: the same tool fails its node.
    let strict = Pattern::new(place, Vec::new());
    let file = strict.write("tool_output.iter", &text);
    let mut args = vec!["--no-interactive"];
    if place == Place::Host {
        args.extend(["--sandbox", "none"]);
    }
    let mut cmd = strict
        .sb
        .command(&["run", &file.to_string_lossy(), "--json"]);
    cmd.args(&args).env("ITERION_STRICT_TOOL_OUTPUTS", "1");
    let res = crate::support::parse_run_output(&cmd.output().unwrap());
    assert_eq!(res.status(), "failed", "{place:?}: {}", res.stderr);
    assert_eq!(res.failure_code(), Some("NODE_FAILED"));
}
on_every_place!(tool_output_off_its_schema);

// ---------------------------------------------------------------------------
// 7. Human nodes answered by a model — upstream `.archive/examples/
//    exhaustive_dsl_coverage.iter:202-207` (`interaction: llm`) and
//    `rust_to_go_port.iter:798-803` (`interaction: llm_or_human`).
//    Upstream: a structured call with the node's model and system prompt,
//    the node's input as JSON for the user message, the node's output
//    schema (`executor.go:1231-1327`); llm_or_human adds
//    `needs_human_input`, true pauses (`resume.go:490-570`).
// ---------------------------------------------------------------------------

fn human_nodes_answered_by_a_model(place: Place) {
    let nodes = r#"
schema plan_out:
  plan: string

schema gate_in:
  plan: string

schema gate_out:
  approved: bool
  note: string

tool plan:
  command: `echo '{"plan": "port the parser"}'`
  output: plan_out

human gate:
  input: gate_in
  output: gate_out
  interaction: llm
  model: "anthropic/claude-sonnet-4-6"
  system: "GATE-LLM decide for the human"

human second_gate:
  input: gate_in
  output: gate_out
  interaction: llm_or_human
  model: "openai/gpt-4o-mini"
  system: "SECOND-GATE decide or ask"
"#;
    let edges = r#"
plan -> gate with { plan: "{{outputs.plan.plan}}" }
gate -> second_gate when approved with { plan: "{{outputs.plan.plan}}" }
gate -> fail when not approved
second_gate -> done when approved
second_gate -> fail when not approved
"#;
    let p = Pattern::new(place, Vec::new());
    let text = p.workflow(nodes, "llm_humans", "plan", edges);
    let file = p.write("llm_humans.iter", &text);
    let res = p.run(&file, &[]);
    let events = assert_finished(&p, &res);
    let gate = call_with(&p, "GATE-LLM");
    assert!(gate.path.starts_with("/v1/messages"), "{}", gate.path);
    assert!(
        request_text(&gate).contains("port the parser"),
        "the node's input is the user message"
    );
    let second = call_with(&p, "SECOND-GATE");
    assert!(second.path.ends_with("/chat/completions"));
    assert!(
        second.raw.contains("needs_human_input"),
        "llm_or_human asks the model whether a human is needed"
    );
    assert_eq!(node_outputs(&events, "gate")[0]["approved"], true);
    let out = node_outputs(&events, "second_gate")[0];
    assert_eq!(out["approved"], true);
    assert!(out.get("needs_human_input").is_none(), "{out}");

    // The model says a human is needed: the run pauses there.
    let p = Pattern::new(
        place,
        vec![
            Turn::Answer(json!({"approved": true, "note": "fine"})),
            Turn::Answer(json!({"approved": true, "note": "?", "needs_human_input": true})),
        ],
    );
    let file = p.write("llm_humans.iter", &text);
    let res = p.run(&file, &[]);
    assert_eq!(
        res.status(),
        "paused_waiting_human",
        "{place:?}: {}",
        res.stderr
    );
}
on_every_place!(human_nodes_answered_by_a_model);

// ---------------------------------------------------------------------------
// 8. Parallel writers — upstream `examples/sec-audit-deps/main.bot:441-444`
//    (four tool branches of one `fan_out_all`). Upstream refuses at
//    dispatch with WORKSPACE_SAFETY when more than one branch may write
//    (`fan_out.go:51`, `:737-858`): tool nodes always, agents unless
//    `readonly: true` or only read-only tools.
// ---------------------------------------------------------------------------

fn parallel_writers(place: Place) {
    let p = Pattern::new(place, Vec::new());
    let text = p.workflow(WRITERS_NODES, "writers", "heuristic_fanout", WRITERS_EDGES);
    let file = p.write("writers.iter", &text);
    let res = p.run(&file, &[]);
    assert_eq!(res.status(), "failed", "{place:?}: {}", res.stderr);
    assert_eq!(
        res.failure_code(),
        Some("WORKSPACE_SAFETY"),
        "{}",
        res.stderr
    );
    for f in ["js.txt", "py.txt"] {
        assert!(
            !p.sb.workspace().join(f).exists(),
            "{place:?}: a branch ran"
        );
    }
}
on_every_place!(parallel_writers);
