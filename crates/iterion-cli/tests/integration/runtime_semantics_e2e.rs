//! What a run *does* with upstream Iterion's workflows (issue 30 items 3,
//! 4, 5, 7, 9): the entry node's input, references to nodes that have not
//! run, tool outputs against their schema, parallel writers and required
//! variables. Each test names the upstream file whose behaviour it pins
//! (SocialGouv/iterion at 2322ab49); the workflows are ours, shaped like
//! upstream's, run by the real binary on the host and in the sandbox on
//! dockerd and Podman.

use serde_json::{Value, json};

use crate::agents_e2e::{Provider, output_of};
use crate::support::{Engine, Sandbox, busybox, node_output, of_type};

/// The sandbox block of a workflow on `engine` (`""` on the host).
fn sandbox_block(engine: Option<Engine>) -> String {
    match engine {
        Some(_) => format!(
            "  sandbox:\n    image: \"{}\"\n    host_state: none\n    workspace_folder: \"/workspace\"\n",
            busybox()
        ),
        None => String::new(),
    }
}

fn sandbox_for(engine: Option<Engine>) -> Sandbox {
    Sandbox::new(engine.unwrap_or(Engine::Docker))
}

fn host_flags(engine: Option<Engine>) -> Vec<&'static str> {
    match engine {
        Some(_) => vec![],
        None => vec!["--sandbox", "none"],
    }
}

/// A review/fix chain shaped like upstream's `whole_improve_loop`:
/// variables with `${PROJECT_DIR}` defaults, a preset, an entry node whose
/// `{{input.task}}` nobody gave, `with` values naming a node that has not
/// run yet, read by a script and by a command.
fn chain(engine: Option<Engine>) -> String {
    format!(
        r#"vars:
  workspace_dir: string = "${{PROJECT_DIR}}"
  scan_dir: string = "${{PROJECT_DIR}}/.iterion/scan"
  who: string = "world"
  level: int = 1

presets:
  loud:
    who: "WORLD"
    level: 3

tool start:
  command: `printf '{{"ws_var": "%s", "scan": "%s", "ws_input": "%s", "task": "%s", "who": "%s", "level": "%s"}}' {{{{vars.workspace_dir}}}} {{{{vars.scan_dir}}}} {{{{input.workspace_dir}}}} "x{{{{input.task}}}}" {{{{input.who}}}} {{{{input.level}}}}`

tool check:
  language: sh
  script: `p={{{{input.pushback}}}}; s={{{{input.seen}}}}; printf '{{"pushback_was": "%s", "seen": "%s"}}' "$p" "$s"`

tool fix:
  command: `printf '{{"pushback": "fixed", "raw": "%s", "prior": "%s"}}' '{{{{input.pushback}}}}' {{{{input.prior}}}}`

workflow chain:
{sandbox}  entry: start
  start -> check with {{ seen: "{{{{outputs.start.who}}}}" }}
  check -> done when "pushback_was == 'fixed'"
  check -> fix with {{ pushback: "{{{{outputs.fix.pushback}}}}", prior: "{{{{outputs.check.pushback_was}}}}" }}
  fix -> check as again(2) with {{ pushback: "{{{{outputs.fix.pushback}}}}", seen: "{{{{outputs.start.who}}}}" }}
"#,
        sandbox = sandbox_block(engine)
    )
}

/// Items 3 and 4: upstream `pkg/runtime/engine.go` (`buildNodeInputRS`,
/// `resolveVars`, `resolveRef`), `pkg/cli/run_inputs.go` and
/// `pkg/backend/model/executor_tool.go` (`resolveCommandTemplate`,
/// `resolveScriptTemplate`).
fn entry_input_and_refs_to_nodes_not_run(engine: Option<Engine>) {
    let sb = sandbox_for(engine);
    let file = sb.write("chain.iter", &chain(engine));
    let mut args = host_flags(engine);
    args.extend(["--preset", "loud", "--var", "who=me"]);
    let r = sb.run(&file, &args);
    assert_eq!(r.status(), "finished", "{engine:?}: {}", r.stderr);
    let events = sb.events(&r.run_id());
    let ws = match engine {
        Some(_) => "/workspace".to_owned(),
        None => sb
            .workspace()
            .canonicalize()
            .expect("ws")
            .display()
            .to_string(),
    };
    let start = node_output(&events, "start");
    // `{{vars.X}}` reads the expanded default, `{{input.X}}` the raw one
    // (shell-quoted: the shell never expands it either).
    assert_eq!(start["ws_var"], ws.as_str(), "{engine:?}");
    assert_eq!(start["scan"], format!("{ws}/.iterion/scan"), "{engine:?}");
    assert_eq!(start["ws_input"], "${PROJECT_DIR}", "{engine:?}");
    // Absent from the input: the placeholder stays, no TEMPLATE_ERROR.
    assert_eq!(start["task"], "x{{input.task}}", "{engine:?}");
    // Defaults, then the preset, then `--var`.
    assert_eq!(start["who"], "me", "{engine:?}");
    assert_eq!(start["level"], "3", "{engine:?}");
    // A script reads an absent input as `null`, then the value.
    let check = output_of(&events, "check");
    assert_eq!(check.len(), 2, "{engine:?}");
    assert_eq!(check[0]["pushback_was"], "null", "{engine:?}");
    assert_eq!(check[0]["seen"], "me", "{engine:?}");
    assert_eq!(check[1]["pushback_was"], "fixed", "{engine:?}");
    // A command keeps the placeholder of a null input (the `with` named
    // `fix` before it ran) literally.
    let fix = node_output(&events, "fix");
    assert_eq!(fix["raw"], "{{input.pushback}}", "{engine:?}");
    assert_eq!(fix["prior"], "null", "{engine:?}");
    // The `with` values were recorded typed: null, not an error.
    let started: Vec<&Value> = of_type(&events, "run_checkpoint")
        .into_iter()
        .filter(|e| e["data"]["step"]["op"] == "advanced")
        .collect();
    assert!(
        started
            .iter()
            .any(|e| e["data"]["step"]["input"]["pushback"] == Value::Null),
        "{engine:?}: {started:?}"
    );
}

#[test]
fn host_entry_input_and_refs_to_nodes_not_run() {
    entry_input_and_refs_to_nodes_not_run(None);
}

#[test]
fn dockerd_entry_input_and_refs_to_nodes_not_run() {
    entry_input_and_refs_to_nodes_not_run(Some(Engine::Docker));
}

#[test]
fn podman_entry_input_and_refs_to_nodes_not_run() {
    entry_input_and_refs_to_nodes_not_run(Some(Engine::Podman));
}

/// Items 3 and 4 in prompts (upstream `pkg/backend/model/executor.go`
/// `resolveTemplate`): `{{input.task}}` nobody gave stays literally in the
/// prompt; a `with` value naming a node that has not run renders `""`;
/// the review/fix loop of upstream's `whole_improve_loop` runs its first
/// iteration instead of failing it.
#[test]
fn host_prompts_keep_absent_refs_and_render_null_empty() {
    let prov = Provider::start(vec![
        iterion_testkit::provider::Turn::Answer(json!({"approved": false, "blockers": "b1"})),
        iterion_testkit::provider::Turn::Answer(json!({"approved": true, "blockers": ""})),
    ]);
    let sb = prov.sandbox(Engine::Docker);
    let text = r#"vars:
  workspace_dir: string = "${PROJECT_DIR}"

schema review_out:
  approved: bool
  blockers: string

agent reviewer:
  model: "anthropic/claude-sonnet-4-6"
  backend: "claw"
  user: "Task: {{input.task}}. Dir: {{vars.workspace_dir}}. Pushback: [{{input.prior_pushback}}]. Iteration {{loop.review.iteration}}, previous [{{loop.review.previous_output}}]."
  output: review_out

tool fixer:
  command: `printf '{"pushback": "pushed %s"}' {{input.blockers}}`

tool entry:
  command: "echo '{}'"

tool alt:
  command: "echo '{}'"

workflow review_fix:
  entry: entry
  entry -> alt
  alt -> reviewer with { prior_pushback: "{{outputs.fixer.pushback}}" }
  reviewer -> done when approved
  reviewer -> fixer when not approved with { blockers: "{{outputs.reviewer.blockers}}" }
  fixer -> alt as review(3)
"#;
    let file = sb.write("review.iter", text);
    let r = sb.run(&file, &["--sandbox", "none"]);
    assert_eq!(r.status(), "finished", "{}", r.stderr);
    let calls = prov.p.model_calls();
    assert_eq!(calls.len(), 2, "one review per iteration");
    let ws = sb.workspace().canonicalize().expect("ws");
    let first = calls[0].raw.clone();
    // `fixer` has not run: the `with` value is null, rendered `""`.
    assert!(first.contains("Pushback: []"), "{first}");
    // No edge gave `task`: the placeholder stays literally.
    assert!(first.contains("Task: {{input.task}}."), "{first}");
    assert!(first.contains(&format!("Dir: {}", ws.display())), "{first}");
    assert!(first.contains("previous []"), "{first}");
    let second = calls[1].raw.clone();
    assert!(second.contains("Pushback: [pushed b1]"), "{second}");
}
