//! Tool nodes whose `command:` is a built-in's bare name (upstream
//! resolves such a command in its tool registry instead of a shell): the
//! built-in runs with the node's input, where the placement table says —
//! a file or process built-in in the sandbox (one `builtin` message to
//! the in-box runner) or in-process on an unsandboxed run, confined to
//! the workspace; a privacy tool on the host against the run's vault.
//!
//! The workflow's `tool_policy:` is checked first (`tool_denied`, the node
//! fails); `tool_started` and `tool_called` / `tool_error` are recorded
//! with the placement. A JSON-object answer is the node's output as is,
//! any other text becomes `{"result": text}` (upstream). It decides no
//! placement (the table) and no routing (the engine).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use iterion_core::agent::BuiltinCall;
use iterion_core::{EventKind, SandboxRun};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::claw::bash_timeout;
use crate::env::EnvSnapshot;
use crate::error::AgentError;
use crate::events::AgentEventSink;
use crate::http::{HttpSettings, ResolverMode};
use crate::runner::RunnerBinary;
use crate::runner::launcher::{ensure_runner, run_builtin_session, start_in_sandbox};
use crate::tools::builtin::{self, ToolArea, ToolContext};
use crate::tools::privacy::{self, PrivacyTools};
use crate::tools::{Placement, ToolClass, ToolPolicy, classify};

/// Whether a tool node's command names a built-in run by [`call`].
pub fn is_node_builtin(command: &str) -> bool {
    matches!(
        classify(command),
        Some(ToolClass::Builtin { .. } | ToolClass::Privacy)
    )
}

/// Whether a tool node's command names a built-in that runs in the box
/// (the runner must be there).
pub fn runs_in_box(command: &str) -> bool {
    matches!(classify(command), Some(ToolClass::Builtin { .. }))
}

/// Where the node's run lives and what serves its host-side tools.
pub(crate) struct NodeTools<'a> {
    pub env: &'a EnvSnapshot,
    pub sandbox: &'a dyn SandboxRun,
    pub sandboxed: bool,
    pub exec_env: BTreeMap<String, String>,
    pub runner: RunnerBinary,
    pub privacy: Option<&'a PrivacyTools>,
    pub sink: &'a dyn AgentEventSink,
}

/// Run one tool node's built-in.
pub(crate) async fn call(
    call: &BuiltinCall,
    cx: NodeTools<'_>,
) -> Result<Map<String, Value>, AgentError> {
    let name = call.tool.as_str();
    let class = classify(name)
        .filter(|c| matches!(c, ToolClass::Builtin { .. } | ToolClass::Privacy))
        .ok_or_else(|| AgentError::ToolRefused {
            tool: name.to_owned(),
            reason: "not a built-in a tool node can call".to_owned(),
        })?;
    let placement = match (&class, cx.sandboxed) {
        (ToolClass::Builtin { .. }, true) => Placement::Sandbox,
        _ => Placement::Launcher,
    };
    let where_ = match (&class, cx.sandboxed) {
        // An unsandboxed built-in runs on the host, in this process.
        (ToolClass::Builtin { .. }, true) => "container",
        _ => "host",
    };
    let id = format!("{}-{name}", call.node);
    let policy = call
        .tool_policy
        .clone()
        .map_or_else(ToolPolicy::open, ToolPolicy::new);
    policy
        .admit_call(name, &id, where_, cx.sink)
        .map_err(|reason| AgentError::ToolDenied {
            tool: name.to_owned(),
            reason,
        })?;
    let input = Value::Object(call.input.clone());
    let input_size = input.to_string().len() as u64;
    cx.sink.emit(EventKind::ToolStarted {
        tool: name.to_owned(),
        tool_use_id: id.clone(),
        input_size,
        placement: where_.to_owned(),
        server: None,
    });
    let started = Instant::now();
    let cancel = CancellationToken::new();
    let _guard = cancel.clone().drop_guard();
    let answer = match (class, placement) {
        (ToolClass::Privacy, _) => match cx.privacy {
            Some(p) => p.call(&call.run_id, name, &input).await,
            None => Err(format!(
                "{name}: no run store is wired for the privacy vault"
            )),
        },
        (ToolClass::Builtin { .. }, Placement::Sandbox) => {
            in_box(
                cx.sandbox,
                &cx.runner,
                cx.exec_env.clone(),
                name,
                &input,
                &cancel,
            )
            .await?
        }
        (ToolClass::Builtin { builtin: b }, _) => {
            let ctx = host_context(cx.env, PathBuf::from(cx.sandbox.workdir()), cancel.clone())?;
            builtin::execute(b, &input, &ctx).await
        }
        _ => Err(format!("{name} is not a tool-node built-in")),
    };
    let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    match answer {
        Ok(text) => {
            cx.sink.emit(EventKind::ToolCalled {
                tool: name.to_owned(),
                tool_use_id: id,
                input_size,
                output_size: text.len() as u64,
                duration_ms,
                placement: where_.to_owned(),
                server: None,
            });
            Ok(match serde_json::from_str::<Value>(&text) {
                Ok(Value::Object(map)) => map,
                _ => {
                    let mut m = Map::new();
                    m.insert("result".to_owned(), Value::String(text));
                    m
                }
            })
        }
        Err(error) => {
            cx.sink.emit(EventKind::ToolError {
                tool: name.to_owned(),
                tool_use_id: id,
                input_size,
                duration_ms,
                error: error.clone(),
                placement: where_.to_owned(),
                server: None,
            });
            Err(AgentError::ToolFailed {
                tool: name.to_owned(),
                error,
            })
        }
    }
}

/// How a built-in's output shows in `node_finished`.
pub fn output_for_event(tool: &str, output: Value) -> Value {
    if tool == privacy::UNFILTER {
        privacy::for_event(output)
    } else {
        output
    }
}

async fn in_box(
    run: &dyn SandboxRun,
    runner: &RunnerBinary,
    env: BTreeMap<String, String>,
    name: &str,
    input: &Value,
    cancel: &CancellationToken,
) -> Result<Result<String, String>, AgentError> {
    ensure_runner(run, runner).await?;
    let mut session = start_in_sandbox(run, env).await?;
    let data = run_builtin_session(session.as_mut(), name, input, cancel).await?;
    Ok(if data.is_error {
        Err(data.content)
    } else {
        Ok(data.content)
    })
}

fn host_context(
    env: &EnvSnapshot,
    workspace: PathBuf,
    cancel: CancellationToken,
) -> Result<ToolContext, AgentError> {
    let root = workspace
        .canonicalize()
        .map_err(AgentError::io(format!("workspace {}", workspace.display())))?;
    Ok(ToolContext {
        workdir: root.clone(),
        area: ToolArea::Confined(root),
        http: HttpSettings::from_env(env, ResolverMode::System).client()?,
        bash_timeout: bash_timeout(env),
        scrub_env: crate::agent::scrub_list(),
        cancel,
    })
}
