//! Issue 20 item 3 through the real binary: MCP servers on the launcher
//! (host) side, real ones from the npm registry (`server-filesystem`,
//! installed by `scripts/setup.sh`) and a small server of our own on the
//! official SDK for the failure cases (`tests/fixtures/mcp/test_server.cjs`),
//! called by a claw agent in the sandbox through the runner channel, on
//! dockerd and Podman, with the scripted provider.
//!
//! Every test checks that nothing the run started is left running: no
//! process carries the run's marker after it, and its process directory
//! is gone.

use std::path::{Path, PathBuf};

use iterion_testkit::provider::Turn;
use serde_json::{Value, json};

use crate::agents_e2e::Provider;
use crate::egress_e2e::host_ip;
use crate::support::{Engine, Sandbox, busybox, leftovers, of_type};

fn servers_dir() -> PathBuf {
    PathBuf::from(
        std::env::var("ITERION_MCP_SERVERS_DIR")
            .unwrap_or_else(|_| panic!("ITERION_MCP_SERVERS_DIR is not set: run scripts/test.sh")),
    )
}

fn fs_server() -> String {
    let p =
        servers_dir().join("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
    assert!(p.is_file(), "{} missing: run scripts/setup.sh", p.display());
    p.display().to_string()
}

fn test_server() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/mcp/test_server.cjs")
        .display()
        .to_string()
}

/// The `mcp_server` blocks: the registry's filesystem server over
/// `host_dir`, and our test server in `mode`.
fn server_blocks(host_dir: &Path, mode: &str) -> String {
    format!(
        r#"
mcp_server fs:
  transport: stdio
  command: "node"
  args: ["{fs}", "{dir}"]

mcp_server t:
  transport: stdio
  command: "node"
  args: ["{test}", "{mode}"]
  env:
    NODE_PATH: "{modules}"
"#,
        fs = fs_server(),
        dir = host_dir.display(),
        test = test_server(),
        modules = servers_dir().join("node_modules").display(),
    )
}

fn sandbox_block(engine: Option<Engine>) -> String {
    match engine {
        None => String::new(),
        Some(_) => format!(
            "  sandbox:\n    image: \"{}\"\n    host_state: none\n    network:\n      mode: allowlist\n      rules: [\"{}\"]\n",
            busybox(),
            host_ip()
        ),
    }
}

/// The run's processes are all gone, and so is its process directory.
fn nothing_left(run_id: &str) {
    assert!(
        iterion_runtime::procs::marked_processes(run_id).is_empty(),
        "a process of run {run_id} is still running"
    );
    let dir = iterion_runtime::procs::root(&iterion_runtime::sandbox_boot::default_state_dir())
        .join(run_id);
    assert!(!dir.exists(), "{} left behind", dir.display());
}

fn run_logs(sb: &Sandbox, run_id: &str) -> String {
    let out = sb.iterion(&["logs", run_id]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// An agent in the sandbox reads, through the filesystem MCP server on the
/// host, a host directory the container cannot see; the same path through
/// the built-in `read_file` (in the container) fails; a second server's
/// tool answers; a tool result over the runner channel's cap reaches the
/// model cut with the marker; a call that crashes its server fails that
/// call and the run goes on.
fn claw_mcp(engine: Engine) {
    let host = tempfile::tempdir().unwrap();
    let secret = format!("host-only-{}", std::process::id());
    std::fs::write(host.path().join("note.txt"), &secret).unwrap();
    let note = host.path().join("note.txt").display().to_string();
    let prov = Provider::start(vec![
        Turn::tool("mcp__fs__read_text_file", json!({ "path": note })),
        Turn::tool("read_file", json!({ "path": note })),
        Turn::tool("mcp__t__echo", json!({ "message": "hello" })),
        Turn::tool("mcp__t__big", json!({})),
        Turn::tool("mcp__t__crash", json!({})),
        Turn::tool("mcp__t__echo", json!({ "message": "after the crash" })),
        Turn::text("{\"done\": true}"),
    ]);
    let sb = prov.sandbox(engine);
    let text = format!(
        r#"{servers}
schema out:
  done: bool

agent reader:
  model: "anthropic/claude-sonnet-4-6"
  user: "Read the note."
  output: out
  tools: [read_file, mcp.fs.read_text_file, mcp.t.*]
  tool_max_steps: 8
  mcp:
    servers: [t]

workflow claw_mcp:
  mcp:
    servers: [fs]
{sandbox}  entry: reader
  reader -> done
"#,
        servers = server_blocks(host.path(), "tools"),
        sandbox = sandbox_block(Some(engine)),
    );
    let file = sb.write("mcp.iter", &text);
    let (_, run_id, events) = crate::support::run_to_finish(&sb, &file, &[]);
    let calls = prov.p.model_calls();
    let results: Vec<String> = calls.last().unwrap().tool_results();
    assert_eq!(results.len(), 6, "{results:?}");
    assert_eq!(results[0].trim(), secret, "the host file through MCP");
    assert!(
        !results[1].contains(&secret),
        "read_file saw the host: {}",
        results[1]
    );
    assert_eq!(results[2], "echo: hello");
    assert!(
        results[3].contains("[iterion: tool result truncated]"),
        "{} bytes, no marker",
        results[3].len()
    );
    assert!(results[3].len() < 4 * 1024 * 1024);
    assert!(results[4].contains("MCP server t failed"), "{}", results[4]);
    assert!(
        results[5].contains("is not running") || results[5].contains("failed"),
        "{}",
        results[5]
    );
    let called: Vec<&Value> = of_type(&events, "tool_called");
    let fs = called
        .iter()
        .find(|e| e["data"]["tool"] == "mcp.fs.read_text_file")
        .expect("mcp call recorded");
    assert_eq!(fs["data"]["placement"], "host", "{fs}");
    assert_eq!(fs["data"]["server"], "fs", "{fs}");
    let errors: Vec<&Value> = of_type(&events, "tool_error");
    assert!(
        errors
            .iter()
            .any(|e| e["data"]["tool"] == "read_file" && e["data"]["placement"] == "container"),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e["data"]["tool"] == "mcp.t.crash" && e["data"]["server"] == "t"),
        "{errors:?}"
    );
    let logs = run_logs(&sb, &run_id);
    assert!(
        logs.contains("mcp server t: test server up in mode tools"),
        "{logs}"
    );
    assert!(logs.contains("crashing on purpose"), "{logs}");
    assert!(
        !logs.contains(&secret),
        "the host file's content is not logged"
    );
    nothing_left(&run_id);
    assert!(leftovers(engine, &run_id).is_empty());
}

#[test]
fn dockerd_claw_calls_host_mcp_servers_through_the_runner() {
    claw_mcp(Engine::Docker);
}

#[test]
fn podman_claw_calls_host_mcp_servers_through_the_runner() {
    claw_mcp(Engine::Podman);
}

/// A host run (the same loop in-process): the workflow's `tool_policy:`
/// denies one MCP tool; the model calls it anyway and gets a refusal with
/// `tool_denied`; the server never sees the call.
#[test]
fn a_denied_mcp_tool_is_refused_with_an_event() {
    let host = tempfile::tempdir().unwrap();
    let prov = Provider::start(vec![
        Turn::tool("mcp__t__echo", json!({ "message": "nope" })),
        Turn::tool("mcp__t__pid", json!({})),
        Turn::text("{\"done\": true}"),
    ]);
    let sb = prov.sandbox(Engine::Docker);
    let text = format!(
        r#"{servers}
schema out:
  done: bool

agent a:
  model: "anthropic/claude-sonnet-4-6"
  output: out
  tools: [mcp.t.echo, mcp.t.pid]
  mcp:
    servers: [t]

workflow denied:
  tool_policy: ["mcp.t.*", "!mcp.t.echo"]
  entry: a
  a -> done
"#,
        servers = server_blocks(host.path(), "tools"),
    );
    let file = sb.write("deny.iter", &text);
    let res = sb.run(&file, &["--sandbox", "none"]);
    let run_id = res.run_id();
    let events = sb.events(&run_id);
    assert_eq!(res.code, Some(0), "{}\n{events:?}", res.stderr);
    let denied = of_type(&events, "tool_denied");
    assert_eq!(denied.len(), 1, "{denied:?}");
    assert_eq!(denied[0]["data"]["tool"], "mcp.t.echo");
    assert_eq!(denied[0]["data"]["rule"], "!mcp.t.echo");
    let results = prov.p.model_calls().last().unwrap().tool_results();
    assert!(!results[0].contains("echo:"), "{results:?}");
    let pid: u32 = results[1].trim().parse().expect("the server's pid");
    // The server ran on the host for the run, and is gone after it.
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "server {pid} still running"
    );
    nothing_left(&run_id);
}

/// Run a host workflow expected to fail; its node error.
fn failing(sb: &Sandbox, name: &str, text: &str) -> (String, String) {
    let file = sb.write(name, text);
    let res = sb.run(&file, &["--sandbox", "none"]);
    assert_eq!(res.code, Some(1), "{name}: {}", res.stderr);
    let run_id = res.run_id();
    let events = sb.events(&run_id);
    let failed = of_type(&events, "node_failed");
    assert!(!failed.is_empty(), "{name}: {events:?}");
    nothing_left(&run_id);
    (
        run_id,
        failed[0]["data"]["error"].as_str().unwrap().to_owned(),
    )
}

/// Our test server as server `s` in `mode`.
fn test_server_block(mode: &str) -> String {
    format!(
        "mcp_server s:\n  transport: stdio\n  command: \"node\"\n  args: [\"{}\", \"{mode}\"]\n  env:\n    NODE_PATH: \"{}\"\n",
        test_server(),
        servers_dir().join("node_modules").display()
    )
}

fn one_server_agent(block: &str, tools: &str) -> String {
    format!(
        r#"{block}
agent a:
  model: "anthropic/claude-sonnet-4-6"
  tools: [{tools}]
  mcp:
    servers: [s]

workflow bad:
  entry: a
  a -> done
"#
    )
}

/// Bad input, each a typed error and nothing left running: a server
/// command that does not exist, a server that never answers `initialize`
/// (bounded by ITERION_MCP_STARTUP_TIMEOUT), two tools of a server that
/// meet on the wire, and a policy that denies every tool (refused before
/// anything starts).
#[test]
fn bad_mcp_servers_fail_typed_and_leave_nothing() {
    let prov = Provider::start(Vec::new());
    // The bound must let a real node server start on a loaded machine
    // (seen at ~1.8 s under a parallel build, which failed a 2 s bound)
    // while the silent server still runs into it.
    let sb = prov
        .sandbox(Engine::Docker)
        .with_env("ITERION_MCP_STARTUP_TIMEOUT", "8s");

    let missing = one_server_agent(
        "mcp_server s:\n  transport: stdio\n  command: \"/nonexistent/iterion-mcp-server\"\n",
        "mcp.s.anything",
    );
    let (_, error) = failing(&sb, "missing.iter", &missing);
    assert!(error.contains("AGENT_MCP_SPAWN_FAILED"), "{error}");
    assert!(error.contains("/nonexistent/iterion-mcp-server"), "{error}");

    let silent = one_server_agent(&test_server_block("silent"), "mcp.s.anything");
    let (_, error) = failing(&sb, "silent.iter", &silent);
    assert!(error.contains("AGENT_MCP_STARTUP_TIMEOUT"), "{error}");

    let collide = one_server_agent(&test_server_block("collide"), "read_file, mcp.s.*");
    let (_, error) = failing(&sb, "collide.iter", &collide);
    assert!(error.contains("AGENT_TOOL_COLLISION"), "{error}");
    assert!(error.contains("mcp__s__read_file"), "{error}");

    let deny_all = one_server_agent(&test_server_block("tools"), "mcp.s.echo")
        .replace("  entry: a\n", "  tool_policy: []\n  entry: a\n");
    let file = sb.write("denyall.iter", &deny_all);
    let res = sb.run(&file, &["--sandbox", "none"]);
    assert_eq!(res.code, Some(2), "{}", res.stderr);
    assert!(
        res.stderr.contains("AGENT_TOOL_POLICY_DENIES_ALL"),
        "{}",
        res.stderr
    );
    assert_eq!(prov.p.model_calls().len(), 0, "no model was asked");
}

/// A tool naming a server the node does not use is bad input, and an
/// `mcp: servers:` entry no block declares is C323 at validate.
#[test]
fn undeclared_servers_are_refused_before_the_run() {
    let sb = Sandbox::new(Engine::Docker)
        .with_env("ANTHROPIC_API_KEY", "sk-ant-api03-test-key-0001")
        .with_env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9");
    let text = "agent a:\n  model: \"anthropic/claude-sonnet-4-6\"\n  tools: [mcp.ghost.x]\n  mcp:\n    servers: [ghost]\n\nworkflow w:\n  entry: a\n  a -> done\n";
    let file = sb.write("ghost.iter", text);
    let out = sb.iterion(&["validate", file.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("C323"));
    let text = format!(
        "{}agent a:\n  model: \"anthropic/claude-sonnet-4-6\"\n  tools: [mcp.other.x]\n\nworkflow w:\n  entry: a\n  a -> done\n",
        "mcp_server other:\n  transport: stdio\n  command: \"true\"\n\n"
    );
    let file = sb.write("other.iter", &text);
    let res = sb.run(&file, &["--sandbox", "none"]);
    assert_eq!(res.code, Some(2), "{}", res.stderr);
    assert!(res.stderr.contains("AGENT_TOOL_REFUSED"), "{}", res.stderr);
    assert!(
        res.stderr.contains("not one of the node's servers"),
        "{}",
        res.stderr
    );
}

/// iterion SIGKILLed in the middle of an MCP call: the server process it
/// started dies with it (its death signal); what that server spawned and
/// that outlives it (a stubborn grandchild) carries the run's marker, and
/// the reaper ends it once the run is provably over, then removes the
/// run's process directory.
#[test]
fn a_sigkilled_iterion_leaves_no_mcp_server_behind() {
    use crate::support::{signal, spawn_until_node_started, wait_until};
    use std::time::Duration;
    let prov = Provider::start(vec![Turn::tool("mcp__t__hang", json!({}))]);
    // A state dir of its own: every `iterion run` of the tests running
    // beside this one starts a reap pass, and this run's orphan is
    // reapable by any of them once iterion is dead, before the check that
    // it outlived its parent.
    let tmp = tempfile::tempdir().unwrap();
    let sb = prov
        .sandbox(Engine::Docker)
        .with_env("TMPDIR", &tmp.path().display().to_string());
    let modules = servers_dir().join("node_modules").display().to_string();
    let text = format!(
        r#"mcp_server t:
  transport: stdio
  command: "sh"
  args: ["-c", "node {test} stubborn; :"]
  env:
    NODE_PATH: "{modules}"

agent a:
  model: "anthropic/claude-sonnet-4-6"
  tools: [mcp.t.hang]
  mcp:
    servers: [t]

workflow killed:
  sandbox: none
  entry: a
  a -> done
"#,
        test = test_server(),
    );
    let file = sb.write("killed.iter", &text);
    let spawned = spawn_until_node_started(&sb, &file);
    let run_id = spawned.run_id.clone();
    let mut child = spawned.child;
    // The server is up (sh and its node) and the model's call is in flight.
    assert!(
        wait_until(Duration::from_secs(60), || {
            iterion_runtime::procs::marked_processes(&run_id).len() >= 2 && prov.p.remaining() == 0
        }),
        "the server never started"
    );
    let dir = iterion_runtime::procs::root(&tmp.path().join("iterion")).join(&run_id);
    let leader = iterion_runtime::procs::records(&dir)[0].pid;
    let marked = iterion_runtime::procs::marked_processes(&run_id);
    let grandchild = *marked.iter().find(|p| **p != leader).unwrap();
    signal(&child, "-KILL");
    let _ = child.wait();
    let gone = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
            s.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        })
    };
    assert!(
        wait_until(Duration::from_secs(10), || gone(leader)),
        "the server {leader} outlived iterion"
    );
    assert!(
        !gone(grandchild),
        "the stubborn grandchild is expected to outlive its parent"
    );
    let reap = sb.iterion(&["sandbox", "reap", "--json"]);
    assert!(
        reap.status.success(),
        "{}",
        String::from_utf8_lossy(&reap.stderr)
    );
    assert!(
        wait_until(Duration::from_secs(10), || gone(grandchild)),
        "the reaper left {grandchild} running"
    );
    nothing_left(&run_id);
}

/// The real Claude Code CLI in the sandbox uses the filesystem MCP server
/// on the host through the run's listener (seed step 18): a host
/// directory the container cannot see is read; the listener's port is
/// admitted by the run's firewall, its token travels in the exec env only.
fn claude_code_mcp(engine: Engine) {
    let host = tempfile::tempdir().unwrap();
    let secret = format!("cli-host-only-{}", std::process::id());
    std::fs::write(host.path().join("note.txt"), &secret).unwrap();
    let note = host.path().join("note.txt").display().to_string();
    let prov = Provider::start(vec![
        Turn::tool("mcp__fs__read_text_file", json!({ "path": note })),
        Turn::text("read it"),
    ]);
    let sb = prov.sandbox(engine);
    let text = format!(
        r#"mcp_server fs:
  transport: stdio
  command: "node"
  args: ["{fs}", "{dir}"]

agent reader:
  model: "anthropic/claude-sonnet-4-6"
  backend: "claude_code"
  user: "Read the note."
  tools: [mcp.fs.read_text_file]
  mcp:
    servers: [fs]

workflow cli_mcp:
  sandbox:
    image: "{image}"
    host_state: none
    network:
      mode: allowlist
      rules: ["{ip}"]
  entry: reader
  reader -> done
"#,
        fs = fs_server(),
        dir = host.path().display(),
        image = crate::support::slim(),
        ip = host_ip(),
    );
    let file = sb.write("cli.iter", &text);
    let (_, run_id, events) = crate::support::run_to_finish(&sb, &file, &[]);
    let results: Vec<String> = prov
        .p
        .model_calls()
        .iter()
        .flat_map(|c| c.tool_results())
        .collect();
    assert!(
        results.iter().any(|r| r.contains(&secret)),
        "{engine:?}: the CLI did not read the host file through MCP: {results:?}"
    );
    let called: Vec<&Value> = of_type(&events, "tool_called");
    assert!(
        called
            .iter()
            .any(|e| e["data"]["server"] == "fs" && e["data"]["placement"] == "host"),
        "{called:?}"
    );
    // The token never shows: no bearer value in events or logs.
    let record = serde_json::to_string(&events).unwrap() + &run_logs(&sb, &run_id);
    assert!(!record.contains("Bearer "), "a bearer header was recorded");
    nothing_left(&run_id);
    assert!(leftovers(engine, &run_id).is_empty());
}

#[test]
fn dockerd_claude_code_uses_host_mcp_servers_through_the_listener() {
    claude_code_mcp(Engine::Docker);
}

#[test]
fn podman_claude_code_uses_host_mcp_servers_through_the_listener() {
    claude_code_mcp(Engine::Podman);
}

/// Upstream's templates (`pr_refine_single_model.iter`, shortened): a
/// context builder on the read-only built-ins, an actor that patches and
/// runs commands, a judge; claw in the sandbox, the workspace a git
/// checkout. Every built-in runs in the container and the patch lands in
/// the host workspace through its bind.
fn template_style(engine: Engine) {
    let prov = Provider::start(vec![
        Turn::tool("git_status", json!({})),
        Turn::tool("tree", json!({})),
        Turn::tool("search_codebase", json!({ "query": "hello" })),
        Turn::tool("list_files", json!({})),
        Turn::text("{\"summary\": \"one file\"}"),
        Turn::tool("read_file", json!({ "path": "hello.txt" })),
        Turn::tool(
            "patch",
            json!({ "patch": "--- a/hello.txt\n+++ b/hello.txt\n@@ -1 +1 @@\n-hello\n+hello patched\n" }),
        ),
        Turn::tool("run_command", json!({ "command": "cat hello.txt" })),
        Turn::tool("git_diff", json!({})),
        Turn::text("{\"applied\": true, \"summary\": \"patched\"}"),
        Turn::text("{\"approved\": true, \"issues\": []}"),
    ]);
    let sb = prov.sandbox(engine);
    let ws = sb.workspace();
    std::fs::write(ws.join("hello.txt"), "hello\n").unwrap();
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
            .args(args)
            .current_dir(&ws)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    git(&["init", "-q"]);
    git(&["add", "hello.txt"]);
    git(&["commit", "-q", "-m", "init"]);
    let text = format!(
        r#"schema ctx_out:
  summary: string

schema act_out:
  applied: bool
  summary: string

schema verdict:
  approved: bool
  issues: string[]

agent context_builder:
  model: "anthropic/claude-sonnet-4-6"
  user: "Build the context."
  output: ctx_out
  session: fresh
  tools: [git_diff, git_status, read_file, list_files, search_codebase, tree]
  tool_max_steps: 8

agent act_on_plan:
  model: "anthropic/claude-sonnet-4-6"
  user: "Apply the plan: {{{{input.summary}}}}"
  output: act_out
  tools: [read_file, write_file, patch, list_files, search_codebase, git_diff, git_status, run_command]
  tool_max_steps: 10

judge final_verify:
  model: "anthropic/claude-sonnet-4-6"
  user: "Verify: {{{{input.summary}}}}"
  output: verdict

workflow pr_refine_single_model:
  sandbox:
    image: "{image}"
    host_state: none
    network:
      mode: allowlist
      rules: ["{ip}"]
  entry: context_builder
  context_builder -> act_on_plan with {{ summary: "{{{{outputs.context_builder.summary}}}}" }}
  act_on_plan -> final_verify with {{ summary: "{{{{outputs.act_on_plan.summary}}}}" }}
  final_verify -> done when approved
  final_verify -> fail when not approved
"#,
        image = crate::support::slim(),
        ip = host_ip(),
    );
    let file = sb.write("template.iter", &text);
    let (_, run_id, events) = crate::support::run_to_finish(&sb, &file, &[]);
    assert_eq!(prov.p.remaining(), 0);
    assert_eq!(
        std::fs::read_to_string(ws.join("hello.txt")).unwrap(),
        "hello patched\n"
    );
    let called = of_type(&events, "tool_called");
    for tool in [
        "git_status",
        "tree",
        "search_codebase",
        "list_files",
        "read_file",
        "patch",
        "run_command",
        "git_diff",
    ] {
        let e = called
            .iter()
            .find(|e| e["data"]["tool"] == tool)
            .unwrap_or_else(|| panic!("{engine:?}: no tool_called for {tool}: {called:?}"));
        assert_eq!(e["data"]["placement"], "container", "{e}");
    }
    assert!(
        of_type(&events, "tool_error").is_empty(),
        "{:?}",
        of_type(&events, "tool_error")
    );
    let results: Vec<String> = prov
        .p
        .model_calls()
        .iter()
        .flat_map(|c| c.tool_results())
        .collect();
    assert!(
        results.iter().any(|r| r.contains("+hello patched")),
        "the diff: {results:?}"
    );
    assert!(leftovers(engine, &run_id).is_empty());
}

#[test]
fn dockerd_template_style_workflow_runs_its_builtins_in_the_box() {
    template_style(Engine::Docker);
}

#[test]
fn podman_template_style_workflow_runs_its_builtins_in_the_box() {
    template_style(Engine::Podman);
}
