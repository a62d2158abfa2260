//! Issue 20, the engine's own tools through the real binary: `ask_user`
//! (an interactive agent asks the human; on a terminal the answer comes
//! back, otherwise the run pauses like a human node and `iterion resume
//! --answer answer=…` runs the node again with it), the board (`board.*`
//! capabilities, issues in the host store), over the runner channel for
//! claw and the per-run listeners for the real Claude Code CLI, on
//! dockerd and Podman; and `http` MCP servers' `headers:` and
//! `auth: oauth2` against a loopback server of the official SDK
//! (`tests/fixtures/mcp/http_server.cjs`).

use std::path::{Path, PathBuf};

use iterion_testkit::provider::Turn;
use serde_json::{Value, json};

use crate::agents_e2e::Provider;
use crate::egress_e2e::host_ip;
use crate::support::{Engine, busybox, leftovers, of_type};

fn sandbox_block(engine: Option<Engine>, image: &str) -> String {
    match engine {
        None => String::new(),
        Some(_) => format!(
            "  sandbox:\n    image: \"{image}\"\n    host_state: none\n    network:\n      mode: allowlist\n      rules: [\"{}\"]\n",
            host_ip()
        ),
    }
}

fn tool_results(prov: &Provider) -> Vec<String> {
    prov.p
        .model_calls()
        .iter()
        .flat_map(|c| c.tool_results())
        .collect()
}

fn asking_workflow(engine: Option<Engine>, backend: &str, image: &str) -> String {
    format!(
        r#"
schema out:
  colour: string

agent asker:
  model: "anthropic/claude-sonnet-4-6"
  backend: "{backend}"
  user: "Find out the colour."
  output: out
  tools: [read_file]
  tool_max_steps: 4

workflow ask:
  interaction: human
{sandbox}  entry: asker
  asker -> done
"#,
        sandbox = sandbox_block(engine, image),
    )
}

/// Non-interactive: the question pauses the run (`human_input_requested`
/// naming it, `paused_waiting_human`); resume answers it and the node's
/// second ask gets the answer as the tool's result.
fn pause_and_answer(engine: Engine, sandboxed: bool, backend: &str) {
    let ask = Turn::tool(
        if backend == "claw" {
            "ask_user"
        } else {
            "mcp__iterion__ask_user"
        },
        json!({"question": "Which colour?"}),
    );
    let mut turns = vec![ask.clone(), ask];
    if backend == "claw" {
        turns.push(Turn::text("{\"colour\": \"blue\"}"));
    } else {
        // The CLI answers a schema through its structured-output tool.
        turns.push(Turn::Answer(json!({"colour": "blue"})));
        turns.push(Turn::text("done"));
    }
    let prov = Provider::start(turns);
    let sb = prov.sandbox(engine);
    let image = if backend == "claw" {
        busybox()
    } else {
        crate::support::slim()
    };
    let at = sandboxed.then_some(engine);
    let file = sb.write("ask.iter", &asking_workflow(at, backend, &image));
    let extra: &[&str] = if sandboxed {
        &["--no-interactive"]
    } else {
        &["--no-interactive", "--sandbox", "none"]
    };
    let ctx = format!("{engine:?} sandboxed={sandboxed} {backend}");
    let res = sb.run(&file, extra);
    let run_id = res.run_id();
    let events = sb.events(&run_id);
    assert_eq!(
        (res.code, res.status()),
        (Some(0), "paused_waiting_human"),
        "{ctx}: {}\n{}",
        res.stderr,
        serde_json::to_string_pretty(&events).unwrap()
    );
    let asked = of_type(&events, "human_input_requested");
    assert_eq!(asked.len(), 1, "{ctx}: {asked:?}");
    assert_eq!(asked[0]["data"]["questions"]["question"], "Which colour?");
    assert_eq!(asked[0]["data"]["fields"], json!(["answer"]));
    assert_eq!(
        prov.p.model_calls().len(),
        1,
        "{ctx}: the paused node went on"
    );
    let r = sb.resume(&run_id, &["--answer", "answer=blue, the deep one"]);
    assert_eq!(
        (r.code, r.status()),
        (Some(0), "finished"),
        "{ctx}: {}",
        r.stderr
    );
    let results = tool_results(&prov);
    assert!(
        results.iter().any(|t| t.contains("blue, the deep one")),
        "{ctx}: the answer did not reach the model: {results:?}"
    );
    let events = sb.events(&run_id);
    let finished = of_type(&events, "node_finished");
    assert!(
        finished
            .iter()
            .any(|e| e["node_id"] == "asker" && e["data"]["output"]["colour"] == "blue"),
        "{ctx}: {finished:?}"
    );
    // No listener token was recorded anywhere.
    let record = serde_json::to_string(&events).unwrap();
    assert!(!record.contains("Bearer "), "{ctx}: a bearer was recorded");
    if sandboxed {
        assert!(leftovers(engine, &run_id).is_empty(), "{ctx}");
    }
}

#[test]
fn dockerd_claw_ask_user_pauses_and_resumes() {
    pause_and_answer(Engine::Docker, true, "claw");
}

#[test]
fn podman_claw_ask_user_pauses_and_resumes() {
    pause_and_answer(Engine::Podman, true, "claw");
}

#[test]
fn host_claw_ask_user_pauses_and_resumes() {
    pause_and_answer(Engine::Docker, false, "claw");
}

#[test]
fn dockerd_claude_code_ask_user_through_the_listener() {
    pause_and_answer(Engine::Docker, true, "claude_code");
}

#[test]
fn podman_claude_code_ask_user_through_the_listener() {
    pause_and_answer(Engine::Podman, true, "claude_code");
}

/// On a terminal (a pseudo-terminal from `script`) the question is asked
/// there and the answer is the tool's result: no pause.
#[test]
fn host_claw_ask_user_on_a_terminal() {
    let prov = Provider::start(vec![
        Turn::tool("ask_user", json!({"question": "Which colour?"})),
        Turn::text("{\"colour\": \"green\"}"),
    ]);
    let sb = prov.sandbox(Engine::Docker);
    let file = sb.write("ask.iter", &asking_workflow(None, "claw", &busybox()));
    let out = crate::support::run_on_a_terminal(&sb, &file, b"green from the tty\n");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("Which colour?"), "{text}");
    assert!(text.contains("\"status\":\"finished\""), "{text}");
    let results = tool_results(&prov);
    assert!(
        results.iter().any(|t| t.contains("green from the tty")),
        "{results:?}"
    );
}

/// A node that is not interactive is not offered `ask_user`, and the
/// run needs no ask-user listener.
#[test]
fn a_plain_node_is_not_offered_ask_user() {
    let prov = Provider::start(vec![Turn::text("done")]);
    let sb = prov.sandbox(Engine::Docker);
    let text = "agent a:\n  model: \"anthropic/claude-sonnet-4-6\"\n  interaction: none\n  tools: [read_file]\n\nworkflow w:\n  entry: a\n  a -> done\n";
    let file = sb.write("plain.iter", text);
    let res = sb.run(&file, &["--sandbox", "none"]);
    assert_eq!(res.status(), "finished", "{}", res.stderr);
    let calls = prov.p.model_calls();
    let offered = serde_json::to_string(&calls[0].body["tools"]).unwrap();
    assert!(offered.contains("read_file"), "{offered}");
    assert!(!offered.contains("ask_user"), "{offered}");
}

/// The board: a claw agent in the sandbox granted `board.create`,
/// `board.read` and `board.move` creates and moves an issue; it lands in
/// the host store (`ITERION_STORE_DIR`), which the container cannot see;
/// an action it is not granted is refused.
fn claw_board(engine: Engine) {
    let store = tempfile::tempdir().unwrap();
    let prov = Provider::start(vec![
        Turn::tool(
            "mcp__iterion_board__create_issue",
            json!({"title": "Port the board", "labels": ["e2e"]}),
        ),
        Turn::tool("mcp__iterion_board__list_issues", json!({"label": "e2e"})),
        Turn::tool("mcp__iterion_board__close_issue", json!({"id": "native:"})),
        Turn::text("{\"colour\": \"n/a\"}"),
    ]);
    let sb = prov
        .sandbox(engine)
        .with_env("ITERION_STORE_DIR", &store.path().display().to_string());
    let text = format!(
        r#"
schema out:
  colour: string

agent planner:
  model: "anthropic/claude-sonnet-4-6"
  user: "File the work."
  output: out
  capabilities: [board.create, board.read]
  tool_max_steps: 5

workflow board:
{sandbox}  entry: planner
  planner -> done
"#,
        sandbox = sandbox_block(Some(engine), &busybox()),
    );
    let file = sb.write("board.iter", &text);
    let (_, run_id, events) = crate::support::run_to_finish(&sb, &file, &[]);
    let issues: Vec<Value> = std::fs::read_dir(store.path().join("issues"))
        .expect("the issues dir on the host")
        .flatten()
        .map(|e| serde_json::from_slice(&std::fs::read(e.path()).unwrap()).unwrap())
        .collect();
    assert_eq!(issues.len(), 1, "{issues:?}");
    assert_eq!(issues[0]["title"], "Port the board");
    assert_eq!(issues[0]["state"], "backlog");
    let results = tool_results(&prov);
    assert!(
        results
            .iter()
            .any(|r| r.contains("Port the board") && r.contains("backlog")),
        "{results:?}"
    );
    // close_issue needs board.close, which the node is not granted.
    assert!(
        results
            .iter()
            .any(|r| r.contains("close_issue") && (r.contains("not") || r.contains("denied"))),
        "{results:?}"
    );
    let called = of_type(&events, "tool_called");
    assert!(
        called.iter().any(|e| e["data"]["placement"] == "host"
            && e["data"]["tool"]
                .as_str()
                .unwrap_or_default()
                .contains("create_issue")),
        "{called:?}"
    );
    assert!(leftovers(engine, &run_id).is_empty());
}

#[test]
fn dockerd_claw_board_tools_reach_the_host_store() {
    claw_board(Engine::Docker);
}

#[test]
fn podman_claw_board_tools_reach_the_host_store() {
    claw_board(Engine::Podman);
}

/// The real CLI in the sandbox reaches the board through the run's board
/// listener.
fn claude_code_board(engine: Engine) {
    let store = tempfile::tempdir().unwrap();
    let prov = Provider::start(vec![
        Turn::tool(
            "mcp__iterion_board__create_issue",
            json!({"title": "From the CLI"}),
        ),
        Turn::text("filed"),
    ]);
    let sb = prov
        .sandbox(engine)
        .with_env("ITERION_STORE_DIR", &store.path().display().to_string());
    let text = format!(
        r#"
agent planner:
  model: "anthropic/claude-sonnet-4-6"
  backend: "claude_code"
  user: "File the work."
  tools: [read_file]
  capabilities: [board.create]

workflow board:
{sandbox}  entry: planner
  planner -> done
"#,
        sandbox = sandbox_block(Some(engine), &crate::support::slim()),
    );
    let file = sb.write("board.iter", &text);
    let (_, run_id, events) = crate::support::run_to_finish(&sb, &file, &[]);
    let names: Vec<PathBuf> = std::fs::read_dir(store.path().join("issues"))
        .expect("the issues dir on the host")
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    let issue: Value = serde_json::from_slice(&std::fs::read(&names[0]).unwrap()).unwrap();
    assert_eq!(issue["title"], "From the CLI");
    let record = serde_json::to_string(&events).unwrap();
    assert!(!record.contains("Bearer "), "a bearer was recorded");
    assert!(leftovers(engine, &run_id).is_empty());
}

#[test]
fn dockerd_claude_code_board_through_the_listener() {
    claude_code_board(Engine::Docker);
}

#[test]
fn podman_claude_code_board_through_the_listener() {
    claude_code_board(Engine::Podman);
}

// ---- issue 31 item 2: the board never follows what the box planted ----

/// Where the board's store is, relative to the workspace the box writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BoardAt {
    /// The default: outside the workspace; the box plants its links where
    /// the board used to be (`.iterion/dispatcher`), which is imported
    /// once — without following them.
    Default,
    /// `ITERION_STORE_DIR` inside the workspace, made by the box: the
    /// links are there, and every open refuses them.
    ConfiguredInWorkspace,
    /// The same directory, existing when the run starts: masked from the
    /// box like the run store, so it cannot plant anything.
    ConfiguredExisting,
}

/// A host directory holding `*.json` files (one shaped as an issue) and a
/// host file: what the box's links point at.
fn host_targets(sb: &crate::support::Sandbox) -> (PathBuf, PathBuf) {
    let dir = sb.dir.path().join("host-dir");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.json"), r#"{"auths": "HOST-SECRET"}"#).unwrap();
    std::fs::write(
        dir.join("native__ab.json"),
        r#"{"id": "native:ab", "title": "HOST-SECRET"}"#,
    )
    .unwrap();
    let file = sb.dir.path().join("host-file");
    std::fs::write(&file, "host\n").unwrap();
    (dir, file)
}

fn board_links(engine: Engine, at: BoardAt) {
    let prov = Provider::start(vec![
        Turn::tool("mcp__iterion_board__list_issues", json!({})),
        Turn::tool(
            "mcp__iterion_board__get_issue",
            json!({"id": "../../host-dir/config"}),
        ),
        Turn::tool(
            "mcp__iterion_board__create_issue",
            json!({"title": "After the plant"}),
        ),
        Turn::text("{\"planted\": \"n/a\"}"),
    ]);
    let sb = prov.sandbox(engine);
    let state = sb.dir.path().join("state");
    let (host_dir, host_file) = host_targets(&sb);
    let ws = sb.workspace();
    let (sb, planted_in) = match at {
        BoardAt::Default => (
            sb.with_env("XDG_STATE_HOME", &state.display().to_string()),
            ".iterion/dispatcher",
        ),
        BoardAt::ConfiguredInWorkspace | BoardAt::ConfiguredExisting => {
            if at == BoardAt::ConfiguredExisting {
                std::fs::create_dir_all(ws.join("board")).unwrap();
            }
            (
                sb.with_env("ITERION_STORE_DIR", &ws.join("board").display().to_string()),
                "board",
            )
        }
    };
    sb.write(
        "plant.sh",
        &format!(
            "p=no\n\
             if mkdir -p '{planted_in}' 2>/dev/null \\\n\
               && ln -s '{dir}' '{planted_in}/issues' 2>/dev/null \\\n\
               && ln -s '{file}' '{planted_in}/events.jsonl' 2>/dev/null; then p=yes; fi\n\
             printf '{{\"planted\":\"%s\"}}' \"$p\"\n",
            dir = host_dir.display(),
            file = host_file.display(),
        ),
    );
    let text = format!(
        r#"
schema out:
  planted: string

tool plant:
  command: `sh plant.sh`
  output: out

agent planner:
  model: "anthropic/claude-sonnet-4-6"
  user: "File the work."
  output: out
  capabilities: [board.create, board.read]
  tool_max_steps: 5

workflow board:
{sandbox}  entry: plant
  plant -> planner
  planner -> done
"#,
        sandbox = sandbox_block(Some(engine), &busybox()),
    );
    let file = sb.write("board.iter", &text);
    let (_, run_id, events) = crate::support::run_to_finish(&sb, &file, &[]);
    let planted = of_type(&events, "node_finished")
        .into_iter()
        .find(|e| e["node_id"] == "plant")
        .map(|e| e["data"]["output"]["planted"].clone())
        .unwrap();
    assert_eq!(
        planted,
        if at == BoardAt::ConfiguredExisting {
            "no"
        } else {
            "yes"
        },
        "{engine:?} {at:?}"
    );
    // Nothing of the host directory reached the model, nothing was made
    // in it, the host file was not appended to.
    // The last request carries the whole conversation: each result once.
    let results = prov
        .p
        .model_calls()
        .last()
        .map(|c| c.tool_results())
        .unwrap_or_default();
    assert_eq!(results.len(), 3, "{results:?}");
    assert!(
        results.iter().all(|r| !r.contains("HOST-SECRET")),
        "{engine:?} {at:?}: {results:?}"
    );
    assert!(
        results[1].contains("not an issue id"),
        "{engine:?} {at:?}: {results:?}"
    );
    let mut names: Vec<String> = std::fs::read_dir(&host_dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["config.json", "native__ab.json"],
        "{engine:?} {at:?}"
    );
    assert_eq!(std::fs::read_to_string(&host_file).unwrap(), "host\n");
    let issues_in = |root: &Path| -> Vec<Value> {
        std::fs::read_dir(root.join("issues"))
            .map(|d| {
                d.flatten()
                    .filter(|e| !e.path().is_symlink())
                    .map(|e| serde_json::from_slice(&std::fs::read(e.path()).unwrap()).unwrap())
                    .collect()
            })
            .unwrap_or_default()
    };
    match at {
        BoardAt::Default => {
            // The board is in the state directory, one per project; the
            // old place is imported once, its links skipped.
            let boards: Vec<PathBuf> = std::fs::read_dir(state.join("iterion/boards"))
                .unwrap()
                .flatten()
                .map(|e| e.path())
                .collect();
            assert_eq!(boards.len(), 1, "{boards:?}");
            let issues = issues_in(&boards[0]);
            assert_eq!(issues.len(), 1, "{issues:?}");
            assert_eq!(issues[0]["title"], "After the plant");
            assert!(results[2].contains("After the plant"), "{results:?}");
            let report = std::fs::read_to_string(boards[0].join("imported.json")).unwrap();
            assert!(report.contains("issues"), "{report}");
        }
        BoardAt::ConfiguredInWorkspace => {
            // Every open refuses the links: the tools answer errors.
            assert!(results[0].contains("symbolic link"), "{results:?}");
            assert!(results[2].contains("symbolic link"), "{results:?}");
        }
        BoardAt::ConfiguredExisting => {
            assert!(results[2].contains("After the plant"), "{results:?}");
            assert_eq!(issues_in(&ws.join("board")).len(), 1);
        }
    }
    assert!(leftovers(engine, &run_id).is_empty());
}

#[test]
fn dockerd_board_links_planted_in_the_workspace_reach_no_host_file() {
    for at in [
        BoardAt::Default,
        BoardAt::ConfiguredInWorkspace,
        BoardAt::ConfiguredExisting,
    ] {
        board_links(Engine::Docker, at);
    }
}

#[test]
fn podman_board_links_planted_in_the_workspace_reach_no_host_file() {
    for at in [
        BoardAt::Default,
        BoardAt::ConfiguredInWorkspace,
        BoardAt::ConfiguredExisting,
    ] {
        board_links(Engine::Podman, at);
    }
}

fn servers_dir() -> PathBuf {
    PathBuf::from(
        std::env::var("ITERION_MCP_SERVERS_DIR")
            .unwrap_or_else(|_| panic!("ITERION_MCP_SERVERS_DIR is not set: run scripts/test.sh")),
    )
}

/// The loopback HTTP MCP server, accepting `accept` bearers, its token
/// endpoint renewing `refresh` into `renewed`; killed on drop.
struct HttpServer {
    child: std::process::Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl HttpServer {
    fn start(accept: &str, refresh: &str, renewed: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port_file = dir.path().join("port");
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp/http_server.cjs");
        let child = std::process::Command::new("node")
            .arg(&script)
            .arg(&port_file)
            .env("NODE_PATH", servers_dir().join("node_modules"))
            .env("ACCEPT", accept)
            .env("REFRESH", refresh)
            .env("RENEWED", renewed)
            .stdin(std::process::Stdio::null())
            .spawn()
            .expect("node runs");
        // It writes the file once listening; the read blocks on nothing
        // but the process itself.
        let port = loop {
            if let Ok(t) = std::fs::read_to_string(&port_file)
                && let Ok(p) = t.trim().parse()
            {
                break p;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        Self {
            child,
            port,
            _dir: dir,
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn http_workflow(blocks: &str, engine: Engine) -> String {
    format!(
        r#"{blocks}
agent caller:
  model: "anthropic/claude-sonnet-4-6"
  user: "Who am I?"
  tools: [mcp.web.whoami]
  mcp:
    servers: [web]

workflow http_mcp:
{sandbox}  entry: caller
  caller -> done
"#,
        sandbox = sandbox_block(Some(engine), &busybox()),
    )
}

/// `headers:` with a bearer from the operator's environment: the server
/// answers, and the secret is in no event, log line or argv.
fn http_headers(engine: Engine) {
    let secret = format!("hdr-secret-{}", std::process::id());
    let server = HttpServer::start(&secret, "unused", "unused");
    let prov = Provider::start(vec![
        Turn::tool("mcp__web__whoami", json!({})),
        Turn::text("done"),
    ]);
    let sb = prov.sandbox(engine).with_env("WEB_MCP_TOKEN", &secret);
    let blocks = format!(
        "mcp_server web:\n  transport: http\n  url: \"http://127.0.0.1:{}/mcp\"\n  headers:\n    Authorization: \"Bearer ${{WEB_MCP_TOKEN}}\"\n",
        server.port
    );
    let file = sb.write("http.iter", &http_workflow(&blocks, engine));
    let (res, run_id, events) = crate::support::run_to_finish(&sb, &file, &[]);
    let results = tool_results(&prov);
    assert!(
        results.iter().any(|r| r.contains("authorized")),
        "{results:?}"
    );
    let logs = sb.iterion(&["logs", &run_id]);
    let record = serde_json::to_string(&events).unwrap()
        + &String::from_utf8_lossy(&logs.stdout)
        + &res.stderr;
    assert!(
        !record.contains(&secret),
        "the header's secret was recorded"
    );
    drop(server);
}

#[test]
fn dockerd_http_mcp_headers_carry_a_secret_bearer() {
    http_headers(Engine::Docker);
}

#[test]
fn podman_http_mcp_headers_carry_a_secret_bearer() {
    http_headers(Engine::Podman);
}

/// `auth: type: oauth2`: an expired token on file is refreshed at the
/// token endpoint, written back, and the renewed one is what the server
/// accepts; a server with no token on file fails to start, typed, without
/// a token in the error; an `http://` token endpoint off loopback is
/// refused.
#[test]
fn http_mcp_oauth2_refreshes_the_stored_token() {
    let engine = Engine::Docker;
    let pid = std::process::id();
    let (stale, refresh, renewed) = (
        format!("stale-{pid}"),
        format!("refresh-{pid}"),
        format!("renewed-{pid}"),
    );
    // The stale token is not accepted: only the refresh makes the call pass.
    let server = HttpServer::start("nothing-yet", &refresh, &renewed);
    let tokens = tempfile::tempdir().unwrap();
    let token_file = tokens.path().join("mcp_oauth.json");
    std::fs::write(
        &token_file,
        json!({"web": {"access_token": stale, "refresh_token": refresh, "expires_at": 1}})
            .to_string(),
    )
    .unwrap();
    let block = |port: u16, token_host: &str| {
        format!(
            "mcp_server web:\n  transport: http\n  url: \"http://127.0.0.1:{port}/mcp\"\n  auth:\n    type: oauth2\n    auth_url: \"http://127.0.0.1:{port}/authorize\"\n    token_url: \"http://{token_host}:{port}/token\"\n    client_id: \"iterion-test\"\n    scopes: [\"mcp\"]\n"
        )
    };
    let prov = Provider::start(vec![
        Turn::tool("mcp__web__whoami", json!({})),
        Turn::text("done"),
    ]);
    let sb = prov
        .sandbox(engine)
        .with_env("ITERION_MCP_OAUTH_FILE", &token_file.display().to_string());
    let file = sb.write(
        "oauth.iter",
        &http_workflow(&block(server.port, "127.0.0.1"), engine),
    );
    let (res, run_id, events) = crate::support::run_to_finish(&sb, &file, &[]);
    let results = tool_results(&prov);
    assert!(
        results
            .iter()
            .any(|r| r.contains("authorized (refreshes: 1")),
        "{results:?}"
    );
    let stored: Value = serde_json::from_slice(&std::fs::read(&token_file).unwrap()).unwrap();
    assert_eq!(stored["web"]["access_token"], renewed.as_str());
    assert_eq!(stored["web"]["refresh_token"], refresh.as_str());
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&token_file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let logs = sb.iterion(&["logs", &run_id]);
    let record = serde_json::to_string(&events).unwrap()
        + &String::from_utf8_lossy(&logs.stdout)
        + &res.stderr;
    for t in [&stale, &refresh, &renewed] {
        assert!(!record.contains(t.as_str()), "a token was recorded");
    }

    // No token on file for the server: its start fails, typed.
    std::fs::write(&token_file, "{}").unwrap();
    let prov = Provider::start(vec![Turn::text("done")]);
    let sb = prov
        .sandbox(engine)
        .with_env("ITERION_MCP_OAUTH_FILE", &token_file.display().to_string());
    let file = sb.write(
        "oauth.iter",
        &http_workflow(&block(server.port, "127.0.0.1"), engine),
    );
    let res = sb.run(&file, &[]);
    assert_eq!(res.status(), "failed", "{}", res.stderr);
    let events = sb.events(&res.run_id());
    let failed = serde_json::to_string(&of_type(&events, "node_failed")).unwrap();
    assert!(failed.contains("no token for server web"), "{failed}");
    assert!(
        failed.contains("MCP_SERVER_FAILED") || failed.contains("mcp"),
        "{failed}"
    );

    // A plain-http token endpoint off loopback is refused before any call.
    std::fs::write(
        &token_file,
        json!({"web": {"access_token": stale, "refresh_token": refresh, "expires_at": 1}})
            .to_string(),
    )
    .unwrap();
    let prov = Provider::start(vec![Turn::text("done")]);
    let sb = prov
        .sandbox(engine)
        .with_env("ITERION_MCP_OAUTH_FILE", &token_file.display().to_string());
    let file = sb.write(
        "oauth.iter",
        &http_workflow(&block(server.port, "auth.example.com"), engine),
    );
    let res = sb.run(&file, &[]);
    assert_eq!(res.status(), "failed", "{}", res.stderr);
    let events = sb.events(&res.run_id());
    let failed = serde_json::to_string(&of_type(&events, "node_failed")).unwrap();
    assert!(failed.contains("must be https://"), "{failed}");
    drop(server);
}
