//! The `claude_code` backend: the real Claude Code CLI in stream-json mode
//! (upstream `delegate/claude_code.go` + `claudesdk`), exec'd through
//! [`SandboxRun::exec`] with stdin held open (facts §5.6: bare `claude`,
//! the container's workspace as cwd), or as a host process on an
//! unsandboxed run.
//!
//! `claude --print --output-format stream-json --input-format stream-json
//! --verbose --permission-mode bypassPermissions|dontAsk [--model]
//! [--system-prompt] [--allowedTools] [--json-schema] [--resume]`; the
//! prompt goes in as one
//! stream-json user message on stdin. `IS_SANDBOX=1` is set only when a
//! container is the boundary (as root the CLI refuses `bypassPermissions`
//! without it; on a host it must never be claimed).
//! `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1` keeps the CLI from calling
//! anything but the provider. Credentials ride the exec's env only.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use bytes::Bytes;
use iterion_core::{EventKind, ExecRequest, ExecSession, OutputStream, SandboxRun};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::backend::BackendName;
use crate::credentials::Redactor;
use crate::env::EnvSnapshot;
use crate::error::{AgentError, bounded};
use crate::events::AgentEventSink;
use crate::provider::Usage;
use crate::provider::anthropic::usage_of;
use crate::runner::protocol::{Line, LineSplitter};
use crate::schema::OutputSchema;
use crate::task::{AgentOutcome, AgentTask, SessionSpec};

/// The CLI's name (pinned bare inside a sandbox: the host's path means
/// nothing there).
pub const CLAUDE_CLI: &str = "claude";

/// Host variables a host-process CLI needs to find its home and tools
/// (its environment is otherwise exactly what we pass).
const HOST_PASSTHROUGH: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_ALL",
    "TMPDIR",
    "XDG_CONFIG_HOME",
];

/// Where the CLI runs.
pub(crate) enum CliPlace<'a> {
    /// In the sandbox; `image` names it in a "CLI missing" error.
    Sandbox {
        run: &'a dyn SandboxRun,
        image: Option<&'a str>,
        /// The engine's node env (the exec's egress proxy credential…).
        exec_env: &'a BTreeMap<String, String>,
    },
    /// On the host, in `workspace`.
    Host { workspace: &'a Path },
}

/// The run's MCP servers as the CLI reaches them: through the per-run
/// listener (`crate::mcp::listener`), its `--mcp-config` document naming
/// the token only as `${ITERION_MCP_TOKEN}`, and the exec env carrying it.
#[derive(Clone, Default)]
pub struct CliMcp {
    /// The `--mcp-config` JSON (no secret in it).
    pub config: String,
    /// Env of the CLI's exec (the token, the listener's host direct).
    pub env: BTreeMap<String, String>,
}

impl std::fmt::Debug for CliMcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CliMcp")
            .field("config", &self.config)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// The node's tool names as the CLI spells them (a workflow written with
/// claw's names works on both backends; `mcp.<s>.<t>` is the CLI's
/// `mcp__<s>__<t>`, `mcp.<s>.*` its server-wide `mcp__<s>`); other names
/// pass through.
fn cli_tool_name(name: &str) -> std::borrow::Cow<'_, str> {
    if let Some(crate::tools::ToolClass::Mcp { server, tool }) = crate::tools::classify(name) {
        if tool == "*" {
            return format!("mcp__{server}").into();
        }
        if let Some(w) = crate::tools::wire_name(name) {
            return w.into();
        }
    }
    let plain = match name {
        "bash" => "Bash",
        "read_file" => "Read",
        "write_file" => "Write",
        "file_edit" => "Edit",
        "glob" => "Glob",
        "grep" => "Grep",
        "web_fetch" => "WebFetch",
        "ask_user" => crate::mcp::engine_tools::CLI_TOOL_NAME,
        other => other,
    };
    plain.into()
}

/// The CLI's argv (no secret ever appears here). In a sandbox the
/// container is the boundary: `bypassPermissions`. On the host the CLI
/// refuses that mode to root, and an unsandboxed agent gets no more than
/// it declared: `dontAsk`, where only the node's tools run.
pub fn cli_args(task: &AgentTask, sandboxed: bool) -> Vec<String> {
    cli_args_with(task, sandboxed, None)
}

/// [`cli_args`] with the run's MCP servers (`--mcp-config`, and
/// `--strict-mcp-config`: no server of the workspace's own `.mcp.json`).
pub fn cli_args_with(task: &AgentTask, sandboxed: bool, mcp: Option<&CliMcp>) -> Vec<String> {
    let mode = if sandboxed {
        "bypassPermissions"
    } else {
        "dontAsk"
    };
    let mut args: Vec<String> = [
        "--print",
        "--output-format",
        "stream-json",
        "--input-format",
        "stream-json",
        "--verbose",
        "--permission-mode",
        mode,
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    if let Some(model) = &task.model {
        args.push("--model".to_owned());
        args.push(model.strip_prefix("anthropic/").unwrap_or(model).to_owned());
    }
    if let Some(system) = &task.system_prompt {
        args.push("--system-prompt".to_owned());
        args.push(system.clone());
    }
    if !task.tools.is_empty() {
        let names: Vec<String> = task
            .tools
            .iter()
            .map(|t| cli_tool_name(t).into_owned())
            .collect();
        args.push("--allowedTools".to_owned());
        args.push(names.join(","));
    }
    if let Some(steps) = task.tool_max_steps.filter(|n| *n > 0) {
        // Upstream maps tool_max_steps to the CLI's turn bound.
        args.push("--max-turns".to_owned());
        args.push(steps.to_string());
    }
    if let Some(schema) = &task.output_schema {
        args.push("--json-schema".to_owned());
        args.push(schema.to_string());
    }
    if let SessionSpec::Inherit {
        session_id: Some(id),
        ..
    } = &task.session
    {
        args.push("--resume".to_owned());
        args.push(id.clone());
    }
    if let Some(m) = mcp {
        args.push("--mcp-config".to_owned());
        args.push(m.config.clone());
        args.push("--strict-mcp-config".to_owned());
    }
    args
}

/// The CLI's env: its credentials, the traffic switch, the sandbox claim
/// only when `sandboxed`.
pub fn cli_env(
    task: &AgentTask,
    credentials: BTreeMap<String, String>,
    host_env: Option<&EnvSnapshot>,
    sandboxed: bool,
) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    if let Some(host) = host_env {
        for name in HOST_PASSTHROUGH {
            if let Some(v) = host.get(name) {
                env.insert((*name).to_owned(), v.to_owned());
            }
        }
    }
    env.extend(credentials);
    env.insert(
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".to_owned(),
        "1".to_owned(),
    );
    if sandboxed {
        env.insert("IS_SANDBOX".to_owned(), "1".to_owned());
    }
    if let Some(effort) = &task.reasoning_effort {
        env.insert("CLAUDE_CODE_EFFORT_LEVEL".to_owned(), effort.clone());
    }
    env
}

/// The stdin line carrying the prompt.
fn prompt_line(task: &AgentTask) -> Bytes {
    let msg = json!({
        "type": "user",
        "message": {"role": "user", "content": [{"type": "text", "text": task.user_prompt}]},
        "parent_tool_use_id": null,
    });
    let mut line = msg.to_string().into_bytes();
    line.push(b'\n');
    Bytes::from(line)
}

/// Run one node on the CLI.
#[allow(clippy::too_many_arguments)] // one per part of the node the CLI sees
pub(crate) async fn run(
    task: &AgentTask,
    place: CliPlace<'_>,
    credentials: BTreeMap<String, String>,
    host_env: &EnvSnapshot,
    mcp: Option<&CliMcp>,
    sink: &dyn AgentEventSink,
    redactor: &Redactor,
    cancel: &CancellationToken,
) -> Result<AgentOutcome, AgentError> {
    let schema = task
        .output_schema
        .as_ref()
        .map(OutputSchema::compile)
        .transpose()?;
    let sandboxed = matches!(place, CliPlace::Sandbox { .. });
    let args = cli_args_with(task, sandboxed, mcp);
    let mut session: Box<dyn ExecSession> = match &place {
        CliPlace::Sandbox { run, exec_env, .. } => {
            let mut argv = vec![CLAUDE_CLI.to_owned()];
            argv.extend(args);
            let mut env = (*exec_env).clone();
            env.extend(cli_env(task, credentials, None, true));
            env.extend(mcp.map(|m| m.env.clone()).unwrap_or_default());
            crate::runner::launcher::exec_attached(*run, argv, env, "exec the claude CLI").await?
        }
        CliPlace::Host { workspace } => {
            let cli = crate::backend::find_on_path(host_env, CLAUDE_CLI).ok_or_else(|| {
                AgentError::CliMissing {
                    cli: CLAUDE_CLI.to_owned(),
                    location: "the host PATH".to_owned(),
                }
            })?;
            let mut argv = vec![cli.display().to_string()];
            argv.extend(args);
            let mut env = cli_env(task, credentials, Some(host_env), false);
            env.extend(mcp.map(|m| m.env.clone()).unwrap_or_default());
            Box::new(
                crate::process::HostProcess::spawn(&argv, &env, workspace)
                    .map_err(AgentError::io("start the claude CLI"))?,
            )
        }
    };
    let result = drive(
        session.as_mut(),
        task,
        schema.as_ref(),
        sandboxed,
        sink,
        redactor,
        cancel,
    )
    .await;
    match result {
        Ok(outcome) => Ok(outcome),
        Err(Failure::Typed(e)) => {
            let _ = session.kill().await;
            Err(e)
        }
        Err(Failure::NoStream { exit_code, stderr }) => {
            if let CliPlace::Sandbox { run, image, .. } = place
                && !cli_present(run).await
            {
                return Err(AgentError::CliMissing {
                    cli: CLAUDE_CLI.to_owned(),
                    location: format!("image {}", image.unwrap_or("of this sandbox")),
                });
            }
            Err(AgentError::ClaudeCode {
                subtype: format!("exit_{exit_code}"),
                message: redactor.redact(&bounded(stderr.trim(), 2000)),
            })
        }
    }
}

async fn cli_present(run: &dyn SandboxRun) -> bool {
    match run.exec(ExecRequest::new([CLAUDE_CLI, "--version"])).await {
        Ok(mut s) => s.wait().await.is_ok_and(|c| c == 0),
        Err(_) => false,
    }
}

enum Failure {
    Typed(AgentError),
    /// The process ended without a result message.
    NoStream {
        exit_code: i64,
        stderr: String,
    },
}

impl From<AgentError> for Failure {
    fn from(e: AgentError) -> Self {
        Self::Typed(e)
    }
}

struct Pending {
    name: String,
    started: Instant,
    input_size: u64,
}

#[allow(clippy::too_many_arguments)]
async fn drive(
    session: &mut dyn ExecSession,
    task: &AgentTask,
    schema: Option<&OutputSchema>,
    sandboxed: bool,
    sink: &dyn AgentEventSink,
    redactor: &Redactor,
    cancel: &CancellationToken,
) -> Result<AgentOutcome, Failure> {
    session
        .write_stdin(prompt_line(task))
        .await
        .map_err(|source| AgentError::Sandbox {
            operation: "write the prompt to the claude CLI".to_owned(),
            source,
        })?;
    let placement = if sandboxed { "container" } else { "host" };
    let mut splitter = LineSplitter::default();
    let mut stderr = Vec::new();
    let mut steps = 0u32;
    let mut last_text = String::new();
    let mut tools: BTreeMap<String, Pending> = BTreeMap::new();
    let mut result: Option<Value> = None;
    while result.is_none() {
        let chunk = tokio::select! {
            c = session.next_chunk() => c,
            () = cancel.cancelled() => return Err(AgentError::Cancelled.into()),
        };
        let Some(chunk) = chunk else { break };
        let chunk = chunk.map_err(|source| AgentError::Sandbox {
            operation: "read the claude CLI's output".to_owned(),
            source,
        })?;
        if chunk.stream != OutputStream::Stdout {
            stderr.extend_from_slice(&chunk.data);
            if stderr.len() > 16 * 1024 {
                stderr.drain(..stderr.len() - 16 * 1024);
            }
            continue;
        }
        for line in splitter.feed(&chunk.data) {
            let Line::Complete(line) = line else { continue };
            // The CLI may print non-JSON notices; only messages count.
            let Ok(msg) = serde_json::from_slice::<Value>(&line) else {
                continue;
            };
            match msg.get("type").and_then(Value::as_str) {
                Some("assistant") => {
                    steps += 1;
                    let m = msg.get("message").cloned().unwrap_or_default();
                    let content = m
                        .get("content")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default();
                    let mut calls = 0;
                    let mut text = String::new();
                    for block in &content {
                        match block.get("type").and_then(Value::as_str) {
                            Some("text") => text.push_str(
                                block
                                    .get("text")
                                    .and_then(Value::as_str)
                                    .unwrap_or_default(),
                            ),
                            Some("tool_use") => {
                                let name = block
                                    .get("name")
                                    .and_then(Value::as_str)
                                    .unwrap_or_default();
                                let id =
                                    block.get("id").and_then(Value::as_str).unwrap_or_default();
                                if name == "StructuredOutput" {
                                    continue;
                                }
                                calls += 1;
                                let input_size =
                                    block.get("input").map_or(0, |i| i.to_string().len() as u64);
                                let server = crate::tools::mcp_server_of(name);
                                sink.emit(EventKind::ToolStarted {
                                    tool: name.to_owned(),
                                    tool_use_id: id.to_owned(),
                                    input_size,
                                    // An MCP tool runs on the host, through
                                    // the run's listener.
                                    placement: if server.is_some() { "host" } else { placement }
                                        .to_owned(),
                                    server,
                                });
                                tools.insert(
                                    id.to_owned(),
                                    Pending {
                                        name: name.to_owned(),
                                        started: Instant::now(),
                                        input_size,
                                    },
                                );
                            }
                            _ => {}
                        }
                    }
                    if !text.is_empty() {
                        last_text = text;
                    }
                    let usage = m.get("usage").map(usage_of).unwrap_or_default();
                    sink.emit(EventKind::LlmStepFinished {
                        step: steps,
                        input_tokens: usage.input_tokens,
                        output_tokens: usage.output_tokens,
                        finish_reason: m
                            .get("stop_reason")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned(),
                        tool_calls: calls,
                        cost_usd: None,
                    });
                }
                Some("user") => {
                    let content = msg
                        .pointer("/message/content")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default();
                    for block in content {
                        if block.get("type").and_then(Value::as_str) != Some("tool_result") {
                            continue;
                        }
                        let id = block
                            .get("tool_use_id")
                            .and_then(Value::as_str)
                            .unwrap_or_default();
                        let Some(p) = tools.remove(id) else { continue };
                        let output = match block.get("content") {
                            Some(Value::String(s)) => s.clone(),
                            Some(other) => other.to_string(),
                            None => String::new(),
                        };
                        let duration_ms =
                            u64::try_from(p.started.elapsed().as_millis()).unwrap_or(u64::MAX);
                        if block
                            .get("is_error")
                            .and_then(Value::as_bool)
                            .unwrap_or(false)
                        {
                            let server = crate::tools::mcp_server_of(&p.name);
                            let placement = if server.is_some() { "host" } else { placement };
                            sink.emit(EventKind::ToolError {
                                server,
                                tool: p.name,
                                tool_use_id: id.to_owned(),
                                input_size: p.input_size,
                                duration_ms,
                                error: redactor.redact(&bounded(&output, 500)),
                                placement: placement.to_owned(),
                            });
                        } else {
                            let server = crate::tools::mcp_server_of(&p.name);
                            let placement = if server.is_some() { "host" } else { placement };
                            sink.emit(EventKind::ToolCalled {
                                server,
                                tool: p.name,
                                tool_use_id: id.to_owned(),
                                input_size: p.input_size,
                                output_size: output.len() as u64,
                                duration_ms,
                                placement: placement.to_owned(),
                            });
                        }
                    }
                }
                Some("result") => result = Some(msg),
                _ => {}
            }
        }
    }
    let _ = session.close_stdin().await;
    let Some(result) = result else {
        let exit_code = session.wait().await.unwrap_or(-1);
        return Err(Failure::NoStream {
            exit_code,
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
        });
    };
    crate::runner::launcher::finish_after_result(session).await;
    outcome(
        &result,
        task.tool_max_steps,
        schema,
        steps,
        last_text,
        redactor,
    )
    .map_err(Failure::Typed)
}

fn outcome(
    result: &Value,
    max_turns: Option<u32>,
    schema: Option<&OutputSchema>,
    steps: u32,
    last_text: String,
    redactor: &Redactor,
) -> Result<AgentOutcome, AgentError> {
    let subtype = result
        .get("subtype")
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    let text = result
        .get("result")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if subtype == "error_max_turns" {
        return Err(AgentError::ToolMaxStepsExceeded {
            max: max_turns.unwrap_or_default(),
        });
    }
    if subtype != "success"
        || result
            .get("is_error")
            .and_then(Value::as_bool)
            .unwrap_or(false)
    {
        let message = if text.is_empty() {
            result
                .get("errors")
                .map(Value::to_string)
                .unwrap_or_else(|| subtype.to_owned())
        } else {
            text
        };
        return Err(AgentError::ClaudeCode {
            subtype: subtype.to_owned(),
            message: redactor.redact(&bounded(&message, 2000)),
        });
    }
    let usage = Usage {
        cost_usd: result.get("total_cost_usd").and_then(Value::as_f64),
        ..result.get("usage").map(usage_of).unwrap_or_default()
    };
    let output = match schema {
        Some(schema) => {
            let value = result
                .get("structured_output")
                .filter(|v| !v.is_null())
                .cloned()
                .or_else(|| crate::schema::extract_json(&text))
                .ok_or_else(|| AgentError::SchemaMismatch {
                    errors: vec!["the CLI returned no structured output".to_owned()],
                })?;
            let errors = schema.errors(&value);
            if !errors.is_empty() {
                return Err(AgentError::SchemaMismatch { errors });
            }
            value
        }
        None => json!({ "text": if text.is_empty() { last_text.clone() } else { text.clone() } }),
    };
    Ok(AgentOutcome {
        backend: BackendName::ClaudeCode,
        output,
        text: if text.is_empty() { last_text } else { text },
        usage,
        steps: u32::try_from(
            result
                .get("num_turns")
                .and_then(Value::as_u64)
                .unwrap_or(u64::from(steps)),
        )
        .unwrap_or(steps),
        formatting_pass_used: false,
        session_id: result
            .get("session_id")
            .and_then(Value::as_str)
            .map(ToOwned::to_owned),
        messages: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_map_tools_schema_and_resume() {
        let mut t = AgentTask::new("n", "p");
        t.model = Some("anthropic/claude-sonnet-4-6".into());
        t.tools = vec!["bash".into(), "Read".into()];
        t.output_schema = Some(json!({"type": "object"}));
        t.tool_max_steps = Some(7);
        t.session = SessionSpec::Inherit {
            session_id: Some("abc".into()),
            messages: vec![],
        };
        assert!(
            cli_args(&t, false)
                .join(" ")
                .contains("--permission-mode dontAsk")
        );
        let a = cli_args(&t, true);
        let joined = a.join(" ");
        assert!(joined.starts_with(
            "--print --output-format stream-json --input-format stream-json --verbose"
        ));
        assert!(joined.contains("--permission-mode bypassPermissions"));
        assert!(joined.contains("--model claude-sonnet-4-6"));
        assert!(joined.contains("--allowedTools Bash,Read"));
        assert!(joined.contains("--json-schema {\"type\":\"object\"}"));
        assert!(joined.contains("--resume abc"));
        assert!(joined.contains("--max-turns 7"));
    }

    #[test]
    fn is_sandbox_only_in_a_sandbox() {
        let t = AgentTask::new("n", "p");
        let creds = BTreeMap::from([("ANTHROPIC_API_KEY".to_owned(), "k".to_owned())]);
        let boxed = cli_env(&t, creds.clone(), None, true);
        assert_eq!(boxed.get("IS_SANDBOX").map(String::as_str), Some("1"));
        let host = cli_env(
            &t,
            creds,
            Some(&EnvSnapshot::new().with("PATH", "/bin").with("SECRET", "x")),
            false,
        );
        assert!(!host.contains_key("IS_SANDBOX"));
        assert_eq!(
            host.get("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC")
                .map(String::as_str),
            Some("1")
        );
        assert_eq!(host.get("PATH").map(String::as_str), Some("/bin"));
        assert!(!host.contains_key("SECRET"));
    }

    #[test]
    fn result_messages_become_outcomes_or_typed_errors() {
        let r = Redactor::default();
        let ok = json!({"type":"result","subtype":"success","is_error":false,"result":"done","session_id":"s1",
            "num_turns":2,"total_cost_usd":0.01,"usage":{"input_tokens":5,"output_tokens":6},
            "structured_output":{"verdict":"pass"}});
        let schema = OutputSchema::compile(&json!({"type":"object","required":["verdict"]}))
            .expect("schema");
        let o = outcome(&ok, None, Some(&schema), 0, String::new(), &r).expect("ok");
        assert_eq!(o.output["verdict"], "pass");
        assert_eq!(o.session_id.as_deref(), Some("s1"));
        assert_eq!(o.usage.cost_usd, Some(0.01));
        let bad = json!({"type":"result","subtype":"success","is_error":false,"result":"x","structured_output":{"v":1}});
        assert_eq!(
            outcome(&bad, None, Some(&schema), 0, String::new(), &r)
                .expect_err("mismatch")
                .code(),
            "AGENT_SCHEMA_MISMATCH"
        );
        let turns = json!({"type":"result","subtype":"error_max_turns","is_error":true});
        let e = outcome(&turns, Some(3), None, 0, String::new(), &r).expect_err("turns");
        assert!(
            matches!(e, AgentError::ToolMaxStepsExceeded { max: 3 }),
            "{e}"
        );
        let exec = json!({"type":"result","subtype":"error_during_execution","is_error":true});
        let e = outcome(&exec, None, None, 0, String::new(), &r).expect_err("exec");
        assert!(
            matches!(e, AgentError::ClaudeCode { ref subtype, .. } if subtype == "error_during_execution")
        );
    }
}
