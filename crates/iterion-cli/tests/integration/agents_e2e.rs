//! Issue 11 end to end: agent and judge nodes through the real `iterion
//! run` on dockerd and on Podman, against the scripted provider of
//! `iterion-testkit` — claw (its loop inside the container as `iterion
//! __claw-runner`, Anthropic and OpenAI wire formats) and the real Claude
//! Code CLI carried by the slim image.
//!
//! How the container reaches the provider: as in `egress_e2e`, the
//! provider listens on the host's primary IPv4 address and the workflow's
//! allowlist names that address; the container can only reach it through
//! the run's proxy, with the exec's own proxy credential. The provider
//! records every request, so the tests see which key reached it and that
//! nothing else did.

// Helpers outside `#[test]` fns fail the test by panicking, like the tests.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::net::SocketAddr;

use iterion_testkit::agent::static_iterion;
use iterion_testkit::provider::{ScriptedProvider, Turn};
use serde_json::{Value, json};

use crate::egress_e2e::host_ip;
use crate::support::{Engine, RunResult, Sandbox, container_exists, of_type, slim};

const ANTHROPIC_KEY: &str = "sk-ant-api03-e2e-anthropic-key";
const OPENAI_KEY: &str = "sk-e2e-openai-key";
const UNRELATED: &str = "aws-secret-e2e-never-forwarded";

/// A provider on the host's primary address, served by its own runtime
/// (the test thread blocks on `iterion run`).
pub(crate) struct Provider {
    /// Serves the provider while the test thread blocks.
    _rt: tokio::runtime::Runtime,
    pub(crate) p: ScriptedProvider,
}

impl Provider {
    pub(crate) fn start(turns: Vec<Turn>) -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let p = rt.block_on(ScriptedProvider::start_on(
            SocketAddr::new(host_ip(), 0),
            turns,
        ));
        Self { _rt: rt, p }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.p.addr())
    }

    /// The env of an operator holding both keys and an unrelated secret.
    pub(crate) fn sandbox(&self, engine: Engine) -> Sandbox {
        Sandbox::new(engine)
            .with_env("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
            .with_env("ANTHROPIC_BASE_URL", &self.url())
            .with_env("OPENAI_API_KEY", OPENAI_KEY)
            .with_env("OPENAI_BASE_URL", &format!("{}/v1", self.url()))
            .with_env("AWS_SECRET_ACCESS_KEY", UNRELATED)
            .with_env("ITERION_BIN", &static_iterion().display().to_string())
    }
}

/// The workflow, upstream-style: `triage`, a `mode: llm` router (claw by
/// the workflow's `default_backend:`, OpenAI wire), picks `work` over
/// `skip`; `work` (claw on the Anthropic wire, or `work_backend`) runs
/// bash in the box and writes a drained file; `review`, a judge (claw,
/// OpenAI wire), routes the loop back once.
pub(crate) fn refine(image: &str, rules: &str, work_backend: &str) -> String {
    format!(
        r#"
schema work_out:
  summary: string

schema verdict:
  approved: bool
  reasons: string

router triage:
  mode: llm
  model: "openai/gpt-4o-mini"
  system: "Is there work to do?"

tool skip:
  command: "echo skipped"

agent work:
  model: "anthropic/claude-sonnet-4-6"
  backend: "{work_backend}"
  system: "You work in the sandbox."
  user: "Write the report."
  output: work_out
  tools: [bash, write_file]
  tool_max_steps: 4

judge review:
  model: "openai/gpt-4o-mini"
  backend: "claw"
  user: "Check: {{{{input.summary}}}}"
  output: verdict

workflow agents:
  entry: triage
  default_backend: "claw"
  sandbox:
    image: "{image}"
    host_state: none
    read_back: ["/out"]
    network:
      mode: allowlist
      rules: [{rules}]
  triage -> work
  triage -> skip
  skip -> done
  work -> review with {{ summary: "{{{{input.summary}}}}" }}
  review -> work when not approved as refine(3)
  review -> done when approved
"#
    )
}

/// Writes a drained file (`/out` is the workflow's read-back path) and a
/// workspace file, counts the key variables it can see, prints its host.
const PROOF: &str = "mkdir -p /out && echo \"host=$(hostname)\" > /out/report.txt && \
     echo from-bash > proof.txt && env | grep -c _API_KEY; hostname";
/// The same without `/out` (on the host there is no read-back path).
const HOST_PROOF: &str = "echo from-bash > proof.txt && env | grep -c _API_KEY; hostname";

/// The router's pick.
pub(crate) static ROUTE: std::sync::LazyLock<Turn> = std::sync::LazyLock::new(|| {
    Turn::text("{\"selected_route\": \"work\", \"reasoning\": \"there is work\"}")
});

fn claw_turns() -> Vec<Turn> {
    claw_turns_running(PROOF)
}

fn claw_turns_running(proof: &str) -> Vec<Turn> {
    vec![
        ROUTE.clone(),
        // work, first pass: bash in the box, then the schema answer.
        Turn::tool("bash", json!({"command": proof})),
        Turn::text("{\"summary\": \"first\"}"),
        // review: not yet.
        Turn::text("{\"approved\": false, \"reasons\": \"once more\"}"),
        // work, second pass: straight answer.
        Turn::text("{\"summary\": \"second\"}"),
        Turn::text("{\"approved\": true, \"reasons\": \"fine\"}"),
    ]
}

pub(crate) fn output_of<'e>(events: &'e [Value], node: &str) -> Vec<&'e Value> {
    events
        .iter()
        .filter(|e| e["type"] == "node_finished" && e["node_id"] == node)
        .map(|e| &e["data"]["output"])
        .collect()
}

/// What every agent run must show: the key on its own wire only, nothing
/// else of the operator's env, the container gone.
fn assert_clean(engine: Engine, prov: &Provider, run_id: &str, events: &[Value]) {
    for r in prov.p.requests() {
        let raw = format!("{:?} {}", r.headers, r.raw);
        assert!(
            !raw.contains(UNRELATED),
            "unrelated secret reached the provider"
        );
        if !r.is_model_call() {
            assert!(!raw.contains(OPENAI_KEY));
        } else if r.path.contains("chat/completions") {
            assert_eq!(
                r.header("authorization"),
                Some(format!("Bearer {OPENAI_KEY}").as_str())
            );
            assert!(!raw.contains(ANTHROPIC_KEY));
        } else {
            assert_eq!(r.header("x-api-key"), Some(ANTHROPIC_KEY));
            assert!(!raw.contains(OPENAI_KEY));
        }
    }
    let all = serde_json::to_string(events).unwrap();
    for secret in [ANTHROPIC_KEY, OPENAI_KEY, UNRELATED] {
        assert!(!all.contains(secret), "{engine:?}: a secret in the events");
    }
    assert!(
        !container_exists(engine, run_id),
        "{engine:?}: container of {run_id} left behind"
    );
}

/// Run `text` with `extra` flags and expect it to finish: the result,
/// the run id and its events.
fn run_finished(sb: &Sandbox, text: &str, extra: &[&str]) -> (RunResult, String, Vec<Value>) {
    let file = sb.write("agents.iter", text);
    crate::support::run_to_finish(sb, &file, extra)
}

fn claw_refine(engine: Engine, bindless: bool) {
    let prov = Provider::start(claw_turns());
    let mut sb = prov.sandbox(engine);
    if bindless {
        sb = sb.with_env("ITERION_SANDBOX_DOCKER_BINDS", "none");
    }
    let rules = format!("\"{}\"", host_ip());
    let (res, run_id, events) = run_finished(&sb, &refine(&slim(), &rules, "claw"), &[]);
    assert_eq!(prov.p.remaining(), 0, "every scripted turn was played");

    // bash ran in the container: its hostname, no key in the tool's env.
    let calls = prov.p.model_calls();
    // calls[0] is the router's; calls[1] asked for the bash call.
    let tool_out = calls[2].tool_results().join("\n");
    let hostnames: Vec<&str> = tool_out.lines().collect();
    assert_eq!(
        hostnames.first().copied(),
        Some("0"),
        "a tool saw a key: {tool_out}"
    );
    let container_host = hostnames.last().copied().unwrap_or_default();
    assert_ne!(
        container_host,
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .unwrap()
            .trim()
    );
    // The file bash wrote in /out was drained into the run store.
    let files = sb.files(&run_id);
    let listed = files.to_string();
    assert!(listed.contains("report.txt"), "{engine:?}: {listed}");
    // The workspace file came back to the host workspace (bind) or not
    // (bindless keeps it in the box); on a bind it is there.
    if !bindless {
        assert_eq!(
            std::fs::read_to_string(sb.workspace().join("proof.txt")).unwrap(),
            "from-bash\n"
        );
    }

    // The llm router picked work; skip never ran.
    assert_eq!(output_of(&events, "triage")[0]["selected_route"], "work");
    assert!(output_of(&events, "skip").is_empty());
    // The judge routed the loop: work twice, review twice.
    assert_eq!(
        output_of(&events, "work")
            .iter()
            .map(|o| o["summary"].as_str().unwrap())
            .collect::<Vec<_>>(),
        vec!["first", "second"]
    );
    let verdicts: Vec<bool> = output_of(&events, "review")
        .iter()
        .map(|o| o["approved"].as_bool().unwrap())
        .collect();
    assert_eq!(verdicts, vec![false, true]);
    assert_eq!(output_of(&events, "work")[0]["_backend"], "claw");

    // Upstream's event names, persisted about the node.
    for kind in [
        "sandbox_claw_routed_via_runner",
        "delegate_started",
        "llm_request",
        "llm_step_finished",
        "tool_started",
        "tool_called",
        "delegate_finished",
    ] {
        assert!(!of_type(&events, kind).is_empty(), "{engine:?}: no {kind}");
    }
    let tool = of_type(&events, "tool_called")[0];
    assert_eq!(tool["node_id"], "work");
    assert_eq!(tool["data"]["tool"], "bash");
    assert_eq!(tool["data"]["placement"], "container");
    // The live view showed the agent's steps.
    assert!(res.stderr.contains("work: ⚙ bash"), "{}", res.stderr);
    assert_clean(engine, &prov, &run_id, &events);
}

#[test]
fn dockerd_llm_router_agent_and_judge_run_claw_in_the_box() {
    claw_refine(Engine::Docker, false);
}

#[test]
fn dockerd_bindless_claw_runner_is_copied_in() {
    claw_refine(Engine::Docker, true);
}

#[test]
fn podman_llm_router_agent_and_judge_run_claw_in_the_box() {
    claw_refine(Engine::Podman, false);
}

/// The real Claude Code CLI of the slim image does the work; claw judges.
fn claude_refine(engine: Engine) {
    let prov = Provider::start(vec![
        ROUTE.clone(),
        Turn::tool(
            "Bash",
            json!({"command": PROOF, "description": "prove where this runs"}),
        ),
        Turn::Answer(json!({"summary": "first"})),
        Turn::text("done"),
        Turn::text("{\"approved\": true, \"reasons\": \"fine\"}"),
    ]);
    let sb = prov.sandbox(engine);
    let rules = format!("\"{}\"", host_ip());
    let (_, run_id, events) = run_finished(&sb, &refine(&slim(), &rules, "claude_code"), &[]);
    let work = output_of(&events, "work");
    assert_eq!(work[0]["summary"], "first");
    assert_eq!(work[0]["_backend"], "claude_code");
    assert!(
        work[0]["_session_id"]
            .as_str()
            .is_some_and(|s| !s.is_empty())
    );
    let results: Vec<String> = prov
        .p
        .model_calls()
        .iter()
        .flat_map(|c| c.tool_results())
        .collect();
    // The CLI's Bash ran in the container (its hostname is not the
    // host's). Unlike claw's tools, the CLI's own shell inherits the CLI's
    // env, key included: the README says so.
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let box_host = results
        .iter()
        .find_map(|r| r.lines().nth(1).map(str::to_owned))
        .unwrap_or_default();
    assert!(
        !box_host.is_empty() && box_host != host.trim(),
        "{engine:?}: the CLI's Bash did not run in the box: {results:?}"
    );
    assert!(sb.files(&run_id).to_string().contains("report.txt"));
    assert!(
        of_type(&events, "tool_called")
            .iter()
            .any(|e| e["data"]["tool"] == "Bash" && e["node_id"] == "work")
    );
    assert!(
        of_type(&events, "sandbox_claw_routed_via_runner").len() == 1,
        "the judge is claw"
    );
    assert_clean(engine, &prov, &run_id, &events);
}

#[test]
fn dockerd_claude_code_cli_in_the_default_image() {
    claude_refine(Engine::Docker);
}

#[test]
fn podman_claude_code_cli_in_the_default_image() {
    claude_refine(Engine::Podman);
}

/// The provider's address is not on the allowlist: the proxy refuses it
/// with `network_blocked` naming the node, and the node fails typed.
#[test]
fn dockerd_provider_missing_from_the_allowlist_fails_the_node() {
    let prov = Provider::start(claw_turns());
    let sb = prov.sandbox(Engine::Docker);
    let file = sb.write(
        "agents.iter",
        &refine(&slim(), "\"only.example.test\"", "claw"),
    );
    let res = sb.run(&file, &[]);
    let run_id = res.run_id();
    assert_eq!(res.status(), "failed", "{}", res.stderr);
    let events = sb.events(&run_id);
    let blocked = of_type(&events, "network_blocked");
    assert!(!blocked.is_empty(), "{}", res.stderr);
    assert_eq!(blocked[0]["node_id"], "triage");
    assert_eq!(blocked[0]["data"]["host"], host_ip().to_string());
    let failed = of_type(&events, "node_failed");
    let error = failed[0]["data"].to_string();
    assert!(
        error.contains("AGENT_PROVIDER_STATUS") && error.contains("blocked-by-allowlist"),
        "the failure says the proxy refused: {error}"
    );
    assert!(prov.p.requests().is_empty(), "nothing reached the provider");
    assert_clean(Engine::Docker, &prov, &run_id, &events);
}

/// Missing credentials for the resolved backend: refused before the run
/// exists (bad input, exit 2), naming the variable and the node, never a
/// value; nothing is created.
#[test]
fn missing_credentials_refuse_the_run_before_anything_starts() {
    let prov = Provider::start(Vec::new());
    let sb = Sandbox::new(Engine::Docker)
        .with_env("ANTHROPIC_BASE_URL", &prov.url())
        .with_env("ANTHROPIC_API_KEY", "")
        .with_env("OPENAI_API_KEY", OPENAI_KEY)
        .with_env("ITERION_BIN", &static_iterion().display().to_string());
    let rules = format!("\"{}\"", host_ip());
    let file = sb.write("agents.iter", &refine(&slim(), &rules, "claw"));
    let res = sb.run(&file, &[]);
    assert_eq!(res.code, Some(2), "{}", res.stderr);
    assert!(
        res.stderr.contains("node work") && res.stderr.contains("ANTHROPIC_API_KEY"),
        "{}",
        res.stderr
    );
    assert!(!res.stderr.contains(OPENAI_KEY));
    assert!(prov.p.requests().is_empty());
    let runs = sb.iterion(&["runs", "--json"]);
    assert!(
        !String::from_utf8_lossy(&runs.stdout).contains("agents"),
        "a run was recorded"
    );
}

/// An unsandboxed run: the same claw loop on the host, its tools in the
/// run's workspace.
#[test]
fn unsandboxed_claw_runs_on_the_host_in_the_workspace() {
    let prov = Provider::start(claw_turns_running(HOST_PROOF));
    let sb = prov.sandbox(Engine::Docker);
    let text = refine(&slim(), "", "claw");
    let text = text.split("  sandbox:").next().unwrap().to_owned()
        + "  triage -> work\n  triage -> skip\n  skip -> done\n  work -> review with { summary: \"{{input.summary}}\" }\n  review -> work when not approved as refine(3)\n  review -> done when approved\n";
    let (_, _, events) = run_finished(&sb, &text, &["--sandbox", "none"]);
    assert_eq!(
        std::fs::read_to_string(sb.workspace().join("proof.txt")).unwrap(),
        "from-bash\n"
    );
    let tool_out = prov.p.model_calls()[2].tool_results().join("\n");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert!(tool_out.trim_end().ends_with(host.trim()), "{tool_out}");
    assert!(tool_out.starts_with('0'), "a tool saw a key: {tool_out}");
    assert!(of_type(&events, "sandbox_claw_routed_via_runner").is_empty());
    assert_eq!(
        of_type(&events, "tool_called")[0]["data"]["placement"],
        "host"
    );
}

/// `examples/agents.iter` as shipped, its allowlist pointed at the
/// scripted provider (the one line a user with a gateway changes too).
#[test]
fn dockerd_the_agents_example_runs() {
    let example =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/agents.iter");
    let text = std::fs::read_to_string(&example).expect("examples/agents.iter");
    assert!(text.contains("\"api.anthropic.com\""));
    let text = text.replace("\"api.anthropic.com\"", &format!("\"{}\"", host_ip()));
    let prov = Provider::start(vec![
        Turn::tool(
            "bash",
            json!({"command": "mkdir -p /out && uname -a > /out/report.txt && ls | wc -l >> /out/report.txt"}),
        ),
        Turn::text("{\"summary\": \"Linux, 1 file\"}"),
        Turn::text("{\"approved\": true, \"reasons\": \"names both\"}"),
    ]);
    let sb = prov.sandbox(Engine::Docker);
    let (_, run_id, _) = run_finished(&sb, &text, &[]);
    assert!(sb.files(&run_id).to_string().contains("report.txt"));
    assert!(
        prov.p
            .model_calls()
            .iter()
            .all(|r| r.header("x-api-key") == Some(ANTHROPIC_KEY))
    );
    assert!(!container_exists(Engine::Docker, &run_id));
}

/// The workflow's `budget: max_tokens` spans the run's agent nodes: the
/// scripted provider bills 120 tokens a call, so after the router (120)
/// and `work` (240) the run stands at 360 of 400 (`budget_warning`), and
/// the judge's call takes it over (`budget_exceeded`, the run fails).
#[test]
fn dockerd_workflow_budget_spans_the_agent_nodes() {
    let prov = Provider::start(claw_turns());
    let sb = prov.sandbox(Engine::Docker);
    let rules = format!("\"{}\"", host_ip());
    let text = refine(&slim(), &rules, "claw").replace(
        "  default_backend: \"claw\"\n",
        "  default_backend: \"claw\"\n  budget:\n    max_tokens: 400\n",
    );
    let file = sb.write("agents.iter", &text);
    let res = sb.run(&file, &[]);
    let run_id = res.run_id();
    assert_eq!(res.status(), "failed", "{}", res.stderr);
    let events = sb.events(&run_id);
    let warned = of_type(&events, "budget_warning");
    assert_eq!(warned[0]["node_id"], "work", "{warned:?}");
    let exceeded = of_type(&events, "budget_exceeded");
    assert_eq!(exceeded.len(), 1, "{exceeded:?}");
    assert_eq!(exceeded[0]["node_id"], "review");
    assert_eq!(exceeded[0]["data"]["limit"], 400.0);
    assert_eq!(exceeded[0]["data"]["used"], 480.0);
    assert_eq!(prov.p.model_calls().len(), 4);
    assert!(!container_exists(Engine::Docker, &run_id));
}

/// An agent node after a human node runs on `iterion resume` exactly as on
/// `run`: through the same backends (the operator's key on its own wire
/// only), claw's runner bound into the fresh sandbox, the human's answer in
/// its prompt; nothing reached the provider before the answer.
#[test]
fn dockerd_an_agent_after_a_human_node_runs_on_resume() {
    let prov = Provider::start(vec![
        Turn::tool("bash", json!({"command": "hostname"})),
        Turn::text("{\"summary\": \"done\"}"),
    ]);
    let sb = prov.sandbox(Engine::Docker);
    let text = format!(
        r#"
schema verdict:
  approved: bool
  note: string

schema work_out:
  summary: string

human gate:
  output: verdict
  instructions: "go on?"

agent work:
  model: "anthropic/claude-sonnet-4-6"
  backend: "claw"
  system: "You work in the sandbox."
  user: "Note: {{{{outputs.gate.note}}}}"
  output: work_out
  tools: [bash]
  tool_max_steps: 4

workflow gated_agent:
  entry: gate
  sandbox:
    image: "{}"
    host_state: none
    network:
      mode: allowlist
      rules: ["{}"]
  gate -> work when approved
  gate -> fail when not approved
  work -> done
"#,
        slim(),
        host_ip()
    );
    let file = sb.write("gated.iter", &text);
    let res = sb.run(&file, &["--no-interactive"]);
    let run_id = res.run_id();
    assert_eq!(
        (res.code, res.status()),
        (Some(0), "paused_waiting_human"),
        "{}",
        res.stderr
    );
    assert!(
        prov.p.requests().is_empty(),
        "the agent ran before the answer"
    );

    let r = sb.resume(
        &run_id,
        &[
            "--answer",
            "approved=true",
            "--answer",
            "note=from-the-human",
        ],
    );
    let events = sb.events(&run_id);
    assert_eq!(
        (r.code, r.status()),
        (Some(0), "finished"),
        "{}\n{}",
        r.stderr,
        serde_json::to_string_pretty(&events).unwrap()
    );
    assert_eq!(prov.p.remaining(), 0, "every scripted turn was played");
    let calls = prov.p.model_calls();
    assert!(calls[0].raw.contains("from-the-human"), "{}", calls[0].raw);
    // bash ran in the resumed run's container, not on this host.
    let tool_host = calls[1].tool_results().join("\n");
    assert!(!tool_host.trim().is_empty());
    assert_ne!(
        tool_host.trim(),
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .unwrap()
            .trim()
    );
    let work = output_of(&events, "work");
    assert_eq!(work.len(), 1, "{work:?}");
    assert_eq!(
        (&work[0]["summary"], &work[0]["_backend"]),
        (&json!("done"), &json!("claw"))
    );
    assert_clean(Engine::Docker, &prov, &run_id, &events);
}
