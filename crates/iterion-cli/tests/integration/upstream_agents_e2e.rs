//! Issue 30 items 1 and 2 through the real binary: workflows shaped like
//! upstream Iterion's own, against the testkit's scripted provider, on the
//! host and in the sandbox on dockerd and Podman.
//!
//! - Tool names (upstream `pkg/backend/tool/registry.go` `Resolve`,
//!   `pkg/backend/tool/claw_builtins.go` `RegisterClawAll`,
//!   `pkg/backend/delegate/claude_code.go` `WithAllowedTools`): a
//!   `claude_code` node's list passes verbatim; a `claw` node may use
//!   claw's simple tools; claw's orchestration names pass `validate` and
//!   refuse the node before any container or model call.
//! - Model resolution (upstream `pkg/backend/model/executor.go`
//!   `resolvedModel`, `pkg/backend/detect/detect.go`): `model: "${X}"`
//!   with X unset on claw picks the model from the credentials found.

use serde_json::{Value, json};

use iterion_testkit::provider::Turn;

use crate::agents_e2e::{Provider, output_of};
use crate::egress_e2e::host_ip;
use crate::support::{
    Engine, Sandbox, busybox, container_exists, of_type, run_to_finish, runs, slim,
};

/// Upstream-shaped: `model: "${…}"` with the variable unset, claw's
/// `todo_write`, `sleep` and `structured_output` next to `bash`.
fn extra_tools(sandbox: &str) -> String {
    format!(
        r#"
schema plan_out:
  summary: string

agent planner:
  model: "${{ITERION_E2E_UNSET_MODEL}}"
  backend: "claw"
  system: "You plan."
  user: "Plan the work."
  output: plan_out
  tools: [bash, todo_write, sleep, structured_output, send_user_message]
  tool_max_steps: 6

workflow upstream_tools:
  entry: planner
{sandbox}  planner -> done
"#
    )
}

fn extra_tool_turns() -> Vec<Turn> {
    vec![
        Turn::tool(
            "todo_write",
            json!({"action": "write", "todos": [
                {"id": "1", "content": "port the loop", "status": "in_progress", "priority": "high"}]}),
        ),
        Turn::tool("sleep", json!({"duration_ms": 20})),
        Turn::tool("structured_output", json!({"payload": {"ok": true}})),
        Turn::tool(
            "send_user_message",
            json!({"message": "planning done", "status": "normal"}),
        ),
        Turn::text("{\"summary\": \"planned\"}"),
    ]
}

fn run_extra_tools(engine: Engine, sandboxed: bool) {
    let prov = Provider::start(extra_tool_turns());
    let sb = prov.sandbox(engine);
    let sandbox = if sandboxed {
        format!(
            "  sandbox:\n    image: \"{}\"\n    host_state: none\n    network:\n      mode: allowlist\n      rules: [\"{}\"]\n",
            slim(),
            host_ip()
        )
    } else {
        String::new()
    };
    let file = sb.write("tools.iter", &extra_tools(&sandbox));
    let extra: &[&str] = if sandboxed {
        &[]
    } else {
        &["--sandbox", "none"]
    };
    let (_, run_id, events) = run_to_finish(&sb, &file, extra);
    assert_eq!(prov.p.remaining(), 0, "{engine:?}: every turn was played");
    // `${ITERION_E2E_UNSET_MODEL}` is unset: claw took the Anthropic pick.
    let calls = prov.p.model_calls();
    for c in &calls {
        assert!(c.path.starts_with("/v1/messages"), "{}", c.path);
        assert_eq!(c.body["model"], "claude-sonnet-4-6");
    }
    // Each tool ran and answered for real.
    let results: Vec<String> = calls.iter().flat_map(|c| c.tool_results()).collect();
    let all = results.join("\n");
    assert!(all.contains("Wrote 1 todo item(s)"), "{all}");
    assert!(all.contains("Slept for 20 ms"), "{all}");
    assert!(all.contains("\"ok\": true"), "{all}");
    assert!(all.contains("planning done"), "{all}");
    let placement = if sandboxed { "container" } else { "host" };
    let tools: Vec<&str> = of_type(&events, "tool_called")
        .iter()
        .map(|e| {
            assert_eq!(e["data"]["placement"], placement);
            e["data"]["tool"].as_str().unwrap()
        })
        .collect();
    assert_eq!(
        tools,
        [
            "todo_write",
            "sleep",
            "structured_output",
            "send_user_message"
        ]
    );
    assert_eq!(output_of(&events, "planner")[0]["summary"], "planned");
    // todo_write kept its list in the workspace (back on the host).
    let todos: Value = serde_json::from_str(
        &std::fs::read_to_string(sb.workspace().join(".claude/todos.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(todos[0]["content"], "port the loop");
    if sandboxed {
        assert!(!container_exists(engine, &run_id));
    }
}

#[test]
fn claw_extra_tools_and_an_unset_model_on_the_host() {
    run_extra_tools(Engine::Docker, false);
}

#[test]
fn dockerd_claw_extra_tools_and_an_unset_model_in_the_box() {
    run_extra_tools(Engine::Docker, true);
}

#[test]
fn podman_claw_extra_tools_and_an_unset_model_in_the_box() {
    run_extra_tools(Engine::Podman, true);
}

/// Upstream's examples list Claude Code's own tool names on `claude_code`
/// nodes: `validate` accepts them (they go to `--allowedTools` as
/// written); the same names on a `claw` node are C322; claw's
/// orchestration names pass `validate`, and `run` refuses the node with
/// a typed error naming the tool, before any run, container or model call.
#[test]
fn tool_names_follow_the_backend_and_orchestration_names_refuse_the_node() {
    let prov = Provider::start(Vec::new());
    let sb = prov.sandbox(Engine::Docker);
    let cli = "agent a:\n  model: \"anthropic/claude-sonnet-4-6\"\n  backend: \"claude_code\"\n  tools: [Bash, Read, Edit, Write, Glob, Grep, git_log, git_diff]\n\nworkflow w:\n  entry: a\n  a -> done\n";
    let file = sb.write("cli.iter", cli);
    let out = sb.iterion(&["validate", file.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let claw = cli.replace("claude_code", "claw");
    let file = sb.write("claw.iter", &claw);
    let out = sb.iterion(&["validate", file.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let c322: Vec<String> = doc["files"][0]["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["code"] == "C322")
        .map(|d| d["message"].as_str().unwrap().to_owned())
        .collect();
    // git_diff is a claw built-in here; the other seven are not.
    assert_eq!(c322.len(), 7, "{c322:?}");
    assert!(c322[0].contains("`Bash`"), "{c322:?}");

    let orch = "agent a:\n  model: \"anthropic/claude-sonnet-4-6\"\n  backend: \"claw\"\n  tools: [bash, task_create]\n\nworkflow orchestrated:\n  entry: a\n  sandbox:\n    image: \"IMAGE\"\n  a -> done\n";
    let file = sb.write("orch.iter", &orch.replace("IMAGE", &busybox()));
    let out = sb.iterion(&["validate", file.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let res = sb.run(&file, &[]);
    assert_eq!(res.code, Some(2), "{}", res.stderr);
    assert!(
        res.stderr.contains("node a")
            && res.stderr.contains("task_create")
            && res.stderr.contains("not available in this engine")
            && res.stderr.contains("AGENT_TOOL_UNAVAILABLE"),
        "{}",
        res.stderr
    );
    assert!(runs(&sb).is_empty(), "a run was recorded");
    assert!(prov.p.requests().is_empty(), "a model was called");
}

/// `model: "${X}"` with X unset and no provider key: the run is refused
/// at launch naming the node and every variable tried; a `{{…}}` model
/// says templates are not rendered there.
#[test]
fn an_unresolvable_model_refuses_the_run_naming_what_was_tried() {
    let sb = Sandbox::new(Engine::Docker);
    let text = "agent writer:\n  model: \"${CONTEXT_MODEL}\"\n  backend: \"claw\"\n\nworkflow unresolved:\n  entry: writer\n  writer -> done\n";
    let file = sb.write("m.iter", text);
    let res = sb.run(&file, &["--sandbox", "none"]);
    assert_eq!(res.code, Some(2), "{}", res.stderr);
    for needle in [
        "node writer",
        "AGENT_MODEL_UNRESOLVED",
        "CONTEXT_MODEL",
        "ITERION_DEFAULT_SUPERVISOR_MODEL",
        "ANTHROPIC_API_KEY",
        "OPENAI_API_KEY",
    ] {
        assert!(res.stderr.contains(needle), "{needle}: {}", res.stderr);
    }
    assert!(runs(&sb).is_empty(), "a run was recorded");
    let templ = text.replace("${CONTEXT_MODEL}", "{{vars.default_model}}");
    let file = sb.write("t.iter", &templ);
    let res = sb.run(&file, &["--sandbox", "none"]);
    assert_eq!(res.code, Some(2), "{}", res.stderr);
    assert!(
        res.stderr.contains("AGENT_MODEL_TEMPLATE") && res.stderr.contains("not rendered"),
        "{}",
        res.stderr
    );
}

/// Upstream-shaped human gates answered by a model (upstream
/// `pkg/backend/model/executor.go` `executeHumanLLM`,
/// `pkg/runtime/resume.go`): `gate` (`interaction: llm`) is one
/// structured call with the node's input as the user message; `check`
/// (`llm_or_human`, by the workflow's default) answers with
/// `needs_human_input` — false goes on, true pauses the run with the
/// node's input as the questions, and `resume --answer` finishes it.
fn human_llm(sandbox: &str) -> String {
    format!(
        r#"
schema decision:
  approved: bool
  notes: string

tool prep:
  command: `printf '{{"task":"ship the port"}}'`

human gate:
  interaction: llm
  model: "anthropic/claude-sonnet-4-6"
  system: "You approve on the operator's behalf."
  output: decision

human check:
  model: "anthropic/claude-sonnet-4-6"
  output: decision

workflow gates:
  entry: prep
  interaction: llm_or_human
{sandbox}  prep -> gate with {{ task: "{{{{outputs.prep.task}}}}" }}
  gate -> check with {{ notes: "{{{{outputs.gate.notes}}}}" }}
  check -> done
"#
    )
}

fn run_human_llm(engine: Engine, sandboxed: bool) {
    let sandbox = if sandboxed {
        format!(
            "  sandbox:\n    image: \"{}\"\n    host_state: none\n    network:\n      mode: allowlist\n      rules: [\"{}\"]\n",
            slim(),
            host_ip()
        )
    } else {
        String::new()
    };
    let extra: &[&str] = if sandboxed {
        &[]
    } else {
        &["--sandbox", "none"]
    };
    // The model decides alone: the run finishes.
    let prov = Provider::start(vec![
        Turn::text("{\"approved\": true, \"notes\": \"looks right\"}"),
        Turn::text("{\"approved\": true, \"notes\": \"confirmed\", \"needs_human_input\": false}"),
    ]);
    let sb = prov.sandbox(engine);
    let file = sb.write("gates.iter", &human_llm(&sandbox));
    let (_, _, events) = run_to_finish(&sb, &file, extra);
    let calls = prov.p.model_calls();
    assert_eq!(calls.len(), 2, "{engine:?}");
    let first = calls[0].raw.clone();
    assert!(
        first.contains("ship the port"),
        "input as the user message: {first}"
    );
    assert!(
        first.contains("on the operator's behalf"),
        "system prompt: {first}"
    );
    assert!(
        calls[1].raw.contains("needs_human_input"),
        "llm_or_human schema: {}",
        calls[1].raw
    );
    assert_eq!(output_of(&events, "gate")[0]["approved"], true);
    let check = output_of(&events, "check")[0];
    assert_eq!(check["notes"], "confirmed");
    assert!(check.get("needs_human_input").is_none(), "{check}");
    assert!(of_type(&events, "human_input_requested").is_empty());

    // The model asks for a person: the run pauses on `check`.
    let prov = Provider::start(vec![
        Turn::text("{\"approved\": true, \"notes\": \"looks right\"}"),
        Turn::text("{\"approved\": false, \"notes\": \"unsure\", \"needs_human_input\": true}"),
    ]);
    let sb = prov.sandbox(engine);
    let file = sb.write("gates.iter", &human_llm(&sandbox));
    let res = sb.run(&file, extra);
    assert_eq!(
        (res.code, res.status()),
        (Some(0), "paused_waiting_human"),
        "{engine:?}: {}",
        res.stderr
    );
    let run_id = res.run_id();
    let events = sb.events(&run_id);
    let asked = of_type(&events, "human_input_requested");
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0]["node_id"], "check");
    assert_eq!(
        asked[0]["data"]["questions"]["input"]["notes"],
        "looks right"
    );
    let resumed = sb.resume(
        &run_id,
        &["--answer", "approved=true", "--answer", "notes=by hand"],
    );
    assert_eq!(
        (resumed.code, resumed.status()),
        (Some(0), "finished"),
        "{engine:?}: {}",
        resumed.stderr
    );
    let events = sb.events(&run_id);
    let outs = output_of(&events, "check");
    assert_eq!(outs.last().unwrap()["notes"], "by hand");
    assert_eq!(prov.p.model_calls().len(), 2, "resume asked no model");
}

#[test]
fn human_nodes_answered_by_a_model_on_the_host() {
    run_human_llm(Engine::Docker, false);
}

#[test]
fn dockerd_human_nodes_answered_by_a_model_in_the_box() {
    run_human_llm(Engine::Docker, true);
}

#[test]
fn podman_human_nodes_answered_by_a_model_in_the_box() {
    run_human_llm(Engine::Podman, true);
}

const AWS_KEY_ID: &str = "AKIDE2EBEDROCK";
const AWS_SECRET: &str = "e2e/bedrock+secret-never-shown";
const AWS_TOKEN: &str = "e2e-session-token";
const BEDROCK_MODEL: &str = "anthropic.claude-3-5-sonnet-20240620-v1:0";

/// `bedrock/<model-id>` on claw (upstream claw's `providers/bedrock`):
/// SigV4 from the AWS variables, to `AWS_ENDPOINT_URL_BEDROCK_RUNTIME` —
/// here the scripted provider on loopback (or the host's address, for
/// the box). Each request's signature is checked by
/// `iterion_testkit::sigv4`, written from AWS's algorithm, not by the
/// signer the engine uses.
fn run_bedrock(engine: Engine, sandboxed: bool) {
    let prov = Provider::start(vec![
        Turn::tool("bash", json!({"command": "echo on-bedrock"})),
        Turn::text("{\"summary\": \"signed\"}"),
    ]);
    let sb = Sandbox::new(engine)
        .with_env("AWS_REGION", "eu-west-3")
        .with_env("AWS_ACCESS_KEY_ID", AWS_KEY_ID)
        .with_env("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
        .with_env("AWS_SESSION_TOKEN", AWS_TOKEN)
        .with_env("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", &prov.url())
        .with_env(
            "ITERION_BIN",
            &iterion_testkit::agent::static_iterion()
                .display()
                .to_string(),
        );
    let sandbox = if sandboxed {
        format!(
            "  sandbox:\n    image: \"{}\"\n    host_state: none\n    network:\n      mode: allowlist\n      rules: [\"{}\"]\n",
            slim(),
            host_ip()
        )
    } else {
        String::new()
    };
    let text = format!(
        "schema out:\n  summary: string\n\nagent a:\n  model: \"bedrock/{BEDROCK_MODEL}\"\n  backend: \"claw\"\n  user: \"Say where you run.\"\n  output: out\n  tools: [bash]\n\nworkflow on_bedrock:\n  entry: a\n{sandbox}  a -> done\n"
    );
    let file = sb.write("bedrock.iter", &text);
    let extra: &[&str] = if sandboxed {
        &[]
    } else {
        &["--sandbox", "none"]
    };
    let (_, _, events) = run_to_finish(&sb, &file, extra);
    assert_eq!(output_of(&events, "a")[0]["summary"], "signed");
    let calls = prov.p.model_calls();
    assert_eq!(calls.len(), 2, "{engine:?}");
    for c in &calls {
        assert_eq!(
            c.path,
            "/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/invoke"
        );
        assert_eq!(c.body["anthropic_version"], "bedrock-2023-05-31");
        assert!(c.body.get("model").is_none(), "the model is in the URL");
        let v = iterion_testkit::sigv4::verify(c, AWS_SECRET, "eu-west-3", "bedrock")
            .unwrap_or_else(|e| panic!("{engine:?}: {e}"));
        assert_eq!(v.access_key_id, AWS_KEY_ID);
        assert_eq!(c.header("x-amz-security-token"), Some(AWS_TOKEN));
        // The check is not vacuous: another secret does not verify.
        assert!(
            iterion_testkit::sigv4::verify(c, "another-secret", "eu-west-3", "bedrock").is_err()
        );
        assert!(!c.raw.contains(AWS_SECRET));
    }
    assert!(calls[1].tool_results().join("\n").contains("on-bedrock"));
    let all = serde_json::to_string(&events).unwrap();
    assert!(!all.contains(AWS_SECRET), "the secret key in the events");

    // A Bedrock API key is preferred over SigV4 (as the AWS SDK does).
    let prov = Provider::start(vec![Turn::text("{\"summary\": \"bearer\"}")]);
    let sb = sb
        .with_env("AWS_BEARER_TOKEN_BEDROCK", "bedrock-api-key-e2e")
        .with_env("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", &prov.url());
    let text = text.replace("  tools: [bash]\n", "");
    let file = sb.write("bearer.iter", &text);
    run_to_finish(&sb, &file, extra);
    let calls = prov.p.model_calls();
    assert_eq!(
        calls[0].header("authorization"),
        Some("Bearer bedrock-api-key-e2e")
    );
}

#[test]
fn bedrock_signs_with_sigv4_on_the_host() {
    run_bedrock(Engine::Docker, false);
}

#[test]
fn dockerd_bedrock_signs_with_sigv4_in_the_box() {
    run_bedrock(Engine::Docker, true);
}

#[test]
fn podman_bedrock_signs_with_sigv4_in_the_box() {
    run_bedrock(Engine::Podman, true);
}

/// An agent whose `interaction: llm` (the workflow's) has its `ask_user`
/// answered by its `interaction_model:` with `interaction_prompt:` as the
/// system prompt (upstream `ExecuteHumanLLMForInteraction`,
/// `pkg/runtime/resume.go`): no pause, the answer is the tool's result.
fn run_agent_interaction(engine: Engine, sandboxed: bool) {
    let prov = Provider::start(vec![
        Turn::tool(
            "ask_user",
            json!({"question": "Which branch should I use?"}),
        ),
        Turn::text("{\"answer\": \"main\"}"),
        Turn::text("{\"summary\": \"used the answer\"}"),
    ]);
    let sb = prov.sandbox(engine);
    let sandbox = if sandboxed {
        format!(
            "  sandbox:\n    image: \"{}\"\n    host_state: none\n    network:\n      mode: allowlist\n      rules: [\"{}\"]\n",
            slim(),
            host_ip()
        )
    } else {
        String::new()
    };
    let text = format!(
        "schema out:\n  summary: string\n\nprompt operator:\n  You answer for the operator, briefly.\n\nagent a:\n  model: \"anthropic/claude-sonnet-4-6\"\n  backend: \"claw\"\n  user: \"Pick a branch, asking if unsure.\"\n  output: out\n  interaction_model: \"openai/gpt-4o-mini\"\n  interaction_prompt: operator\n\nworkflow answered:\n  entry: a\n  interaction: llm\n{sandbox}  a -> done\n"
    );
    let file = sb.write("interaction.iter", &text);
    let extra: &[&str] = if sandboxed {
        &[]
    } else {
        &["--sandbox", "none"]
    };
    let (_, _, events) = run_to_finish(&sb, &file, extra);
    assert!(of_type(&events, "human_input_requested").is_empty());
    assert_eq!(output_of(&events, "a")[0]["summary"], "used the answer");
    let calls = prov.p.model_calls();
    assert_eq!(calls.len(), 3, "{engine:?}");
    // The interaction model was asked on its own wire, with its prompt.
    assert!(
        calls[1].path.ends_with("/chat/completions"),
        "{}",
        calls[1].path
    );
    assert!(calls[1].raw.contains("Which branch should I use?"));
    assert!(calls[1].raw.contains("You answer for the operator"));
    assert!(calls[2].tool_results().join("\n").contains("main"));
}

#[test]
fn agent_questions_answered_by_the_interaction_model_on_the_host() {
    run_agent_interaction(Engine::Docker, false);
}

#[test]
fn dockerd_agent_questions_answered_by_the_interaction_model_in_the_box() {
    run_agent_interaction(Engine::Docker, true);
}

#[test]
fn podman_agent_questions_answered_by_the_interaction_model_in_the_box() {
    run_agent_interaction(Engine::Podman, true);
}
