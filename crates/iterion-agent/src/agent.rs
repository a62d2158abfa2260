//! The entry point the engine calls for one agent, judge or LLM-router
//! node: [`run_agent`] takes the rendered [`AgentTask`], the effective
//! backend (from [`crate::backend::resolve_backend`]) and where the run
//! lives ([`AgentPlacement`]), emits the node's events, and returns its
//! typed outcome. [`preflight`] checks, before any container starts, what
//! can be checked without one (model, provider, credentials, tools,
//! schema, codex in a sandbox).
//!
//! | Backend | Sandboxed run | Unsandboxed run |
//! |---|---|---|
//! | `claw` | `iterion __claw-runner` exec'd in the container | the same loop in this process, file tools confined to the workspace |
//! | `claude_code` | `claude` exec'd in the container, `IS_SANDBOX=1` | `claude` from the host `PATH` as a host process |
//! | `codex` | refused: its own sandbox cannot nest in a container | refused: not built in this release |

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use iterion_core::{EventKind, SandboxRun};
use tokio_util::sync::CancellationToken;

use crate::backend::{BackendName, HostFacts};
use crate::claude_code::CliPlace;
use crate::claw::{ClawLoop, bash_timeout, prepare_client};
use crate::credentials::{CLAUDE_CODE_ONLY_VARS, PROVIDER_CREDENTIAL_VARS, ProviderCredentials};
use crate::dispatch::{LauncherTools, LocalDispatch};
use crate::env::EnvSnapshot;
use crate::error::AgentError;
use crate::events::{AgentEventSink, Redacting};
use crate::http::{HttpSettings, ResolverMode};
use crate::model::ModelSpec;
use crate::runner::RunnerBinary;
use crate::runner::launcher::{Launch, drive, ensure_runner, start_in_sandbox};
use crate::schema::OutputSchema;
use crate::task::{AgentOutcome, AgentTask};
use crate::tools::builtin::{ToolArea, ToolContext};
use crate::tools::{ToolEntry, ToolRegistry};

/// Where the node's run lives.
pub enum AgentPlacement<'a> {
    /// No sandbox: the agent runs on the host, in `workspace`.
    Host {
        /// The run's workspace (file tools are confined to it).
        workspace: PathBuf,
    },
    /// The run's sandbox.
    Sandbox {
        /// The live sandbox.
        run: &'a dyn SandboxRun,
        /// How the claw runner binary gets there.
        runner: RunnerBinary,
        /// The image (named when a CLI is missing from it).
        image: Option<String>,
        /// What every exec of this node carries besides the provider
        /// credentials (the engine's node env: identity, workspace, the
        /// exec's own egress proxy credential). Secret: exec env only.
        exec_env: BTreeMap<String, String>,
        /// Provider credential variable → the run's placeholder: carried
        /// instead of the value (issue 17 item 5; empty: the values).
        placeholders: BTreeMap<String, String>,
    },
}

impl AgentPlacement<'_> {
    fn sandboxed(&self) -> bool {
        matches!(self, Self::Sandbox { .. })
    }
}

/// What surrounds one node.
pub struct AgentContext<'a> {
    /// The host environment snapshot (credentials are taken from it).
    pub env: &'a EnvSnapshot,
    /// Host facts (a Claude login the CLI would find by itself).
    pub facts: HostFacts,
    /// Receives the node's events.
    pub sink: &'a dyn AgentEventSink,
    /// Launcher-side tools the engine serves (ask_user, MCP, engine tools).
    pub launcher: Option<&'a dyn LauncherTools>,
    /// The run's MCP servers for a `claude_code` node (through the run's
    /// listener).
    pub cli_mcp: Option<crate::claude_code::CliMcp>,
    /// Cancels the node.
    pub cancel: CancellationToken,
}

/// Run one node to its outcome, emitting `delegate_started`, the loop's
/// events and `delegate_finished` / `delegate_error`.
pub async fn run_agent(
    task: &AgentTask,
    backend: BackendName,
    placement: AgentPlacement<'_>,
    ctx: &AgentContext<'_>,
) -> Result<AgentOutcome, AgentError> {
    let creds = ProviderCredentials::collect(ctx.env);
    let redactor = creds.redactor();
    let sink = Redacting::new(ctx.sink, redactor.clone());
    sink.emit(EventKind::DelegateStarted {
        backend: backend.as_str().to_owned(),
    });
    let started = Instant::now();
    let result = match backend {
        BackendName::Claw => run_claw(task, placement, &creds, ctx, &sink).await,
        BackendName::ClaudeCode => {
            let has_login = !placement.sandboxed() && ctx.facts.claude_login;
            match creds.for_claude_code(has_login) {
                Err(e) => Err(e),
                Ok(vars) => {
                    let (place, vars) = match &placement {
                        AgentPlacement::Sandbox {
                            run,
                            image,
                            exec_env,
                            placeholders,
                            ..
                        } => (
                            CliPlace::Sandbox {
                                run: *run,
                                image: image.as_deref(),
                                exec_env,
                            },
                            ProviderCredentials::with_placeholders(vars, placeholders),
                        ),
                        AgentPlacement::Host { workspace } => (CliPlace::Host { workspace }, vars),
                    };
                    crate::claude_code::run(
                        task,
                        place,
                        vars,
                        ctx.env,
                        ctx.cli_mcp.as_ref(),
                        &sink,
                        &redactor,
                        &ctx.cancel,
                    )
                    .await
                }
            }
        }
        BackendName::Codex => Err(codex_refusal(placement.sandboxed())),
    };
    let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    match &result {
        Ok(o) => sink.emit(EventKind::DelegateFinished {
            backend: backend.as_str().to_owned(),
            duration_ms,
            tokens: o.usage.input_tokens + o.usage.output_tokens,
            cost_usd: o.usage.cost_usd,
            exit_code: None,
            formatting_pass_used: o.formatting_pass_used,
            session_id: o.session_id.clone(),
        }),
        Err(e) => sink.emit(EventKind::DelegateError {
            backend: backend.as_str().to_owned(),
            duration_ms,
            tokens: 0,
            exit_code: match e {
                AgentError::RunnerExited { exit_code, .. } => Some(*exit_code),
                _ => None,
            },
            code: e.code().to_owned(),
            error: redactor.redact(&e.to_string()),
        }),
    }
    result
}

/// Check what can be checked before a container starts: the engine calls
/// this at admission so a missing key or an unknown tool refuses the run
/// with nothing created.
pub fn preflight(
    task: &AgentTask,
    backend: BackendName,
    env: &EnvSnapshot,
    facts: &HostFacts,
    sandboxed: bool,
    launcher: Option<&dyn LauncherTools>,
) -> Result<(), AgentError> {
    if let Some(s) = &task.output_schema {
        OutputSchema::compile(s)?;
    }
    let creds = ProviderCredentials::collect(env);
    match backend {
        BackendName::Claw => {
            let model = ModelSpec::parse(task.model.as_deref().unwrap_or_default())?;
            creds.for_provider(model.provider)?;
            node_tools(task, launcher)?;
            Ok(())
        }
        BackendName::ClaudeCode => creds
            .for_claude_code(!sandboxed && facts.claude_login)
            .map(|_| ()),
        BackendName::Codex => Err(codex_refusal(sandboxed)),
    }
}

fn codex_refusal(sandboxed: bool) -> AgentError {
    AgentError::CodexRefused {
        reason: if sandboxed {
            "codex runs its own sandbox, which cannot nest inside the run's container; use claw or claude_code, or run unsandboxed"
                .to_owned()
        } else {
            "the codex backend is not built in this release; use claw or claude_code".to_owned()
        },
    }
}

/// The node's tools: built-ins plus what the launcher serves, through the
/// placement table, minus what its `tool_policy:` denies (never offered to
/// the model; a call of one anyway is refused with `tool_denied`). A
/// policy that leaves a node with tools none is refused before any call.
fn node_tools(
    task: &AgentTask,
    launcher: Option<&dyn LauncherTools>,
) -> Result<Vec<ToolEntry>, AgentError> {
    let mut registry = ToolRegistry::builtins();
    if let Some(l) = launcher {
        for spec in l.specs() {
            registry.register_launcher_tool(spec)?;
        }
    }
    let selected = registry.select(&task.tools)?;
    let policy = task.policy();
    let allowed: Vec<ToolEntry> = selected
        .iter()
        .filter(|e| policy.check(&e.name).is_ok())
        .cloned()
        .collect();
    if allowed.is_empty() && !selected.is_empty() {
        return Err(AgentError::ToolPolicyDeniesAll {
            patterns: policy
                .patterns()
                .map(<[String]>::to_vec)
                .unwrap_or_default(),
            tools: selected.into_iter().map(|e| e.name).collect(),
        });
    }
    Ok(allowed)
}

/// The variables a built-in's child processes never inherit.
pub(crate) fn scrub_list() -> Vec<String> {
    PROVIDER_CREDENTIAL_VARS
        .iter()
        .chain(CLAUDE_CODE_ONLY_VARS)
        .map(|s| (*s).to_owned())
        .collect()
}

async fn run_claw(
    task: &AgentTask,
    placement: AgentPlacement<'_>,
    creds: &ProviderCredentials,
    ctx: &AgentContext<'_>,
    sink: &dyn AgentEventSink,
) -> Result<AgentOutcome, AgentError> {
    let tools = node_tools(task, ctx.launcher)?;
    match placement {
        AgentPlacement::Host { workspace } => {
            let (model, client) = prepare_client(task, creds, ctx.env, ResolverMode::System)?;
            let root = canonical(&workspace)?;
            let dispatch = LocalDispatch {
                ctx: ToolContext {
                    workdir: root.clone(),
                    area: ToolArea::Confined(root),
                    http: HttpSettings::from_env(ctx.env, ResolverMode::System).client()?,
                    bash_timeout: bash_timeout(ctx.env),
                    scrub_env: scrub_list(),
                    cancel: ctx.cancel.clone(),
                },
                launcher: ctx.launcher,
            };
            ClawLoop {
                task,
                model,
                client,
                tools,
                dispatch: &dispatch,
                sink,
                cancel: ctx.cancel.clone(),
                in_sandbox: false,
            }
            .run()
            .await
        }
        AgentPlacement::Sandbox {
            run,
            runner,
            exec_env,
            placeholders,
            ..
        } => {
            // Checked here, on the host, so nothing is exec'd without them.
            let model = ModelSpec::parse(task.model.as_deref().unwrap_or_default())?;
            let mut env = exec_env;
            env.extend(ProviderCredentials::with_placeholders(
                creds.for_provider(model.provider)?,
                &placeholders,
            ));
            if let Some(t) = ctx.env.get("CLAW_BASH_TIMEOUT") {
                env.insert("CLAW_BASH_TIMEOUT".to_owned(), t.to_owned());
            }
            ensure_runner(run, &runner).await?;
            let mut session = start_in_sandbox(run, env).await?;
            drive(
                session.as_mut(),
                Launch {
                    task,
                    tools,
                    launcher: ctx.launcher,
                    sink,
                    redactor: creds.redactor(),
                    cancel: ctx.cancel.clone(),
                },
            )
            .await
        }
    }
}

fn canonical(p: &Path) -> Result<PathBuf, AgentError> {
    p.canonicalize()
        .map_err(AgentError::io(format!("workspace {}", p.display())))
}

/// Drive an already started runner session (a host process in tests and
/// benches, or any [`iterion_core::ExecSession`]) with the same host side a
/// sandboxed claw node uses.
pub async fn drive_runner_session(
    session: &mut dyn iterion_core::ExecSession,
    task: &AgentTask,
    ctx: &AgentContext<'_>,
) -> Result<AgentOutcome, AgentError> {
    let creds = ProviderCredentials::collect(ctx.env);
    let redactor = creds.redactor();
    let sink = Redacting::new(ctx.sink, redactor.clone());
    let tools = node_tools(task, ctx.launcher)?;
    drive(
        session,
        Launch {
            task,
            tools,
            launcher: ctx.launcher,
            sink: &sink,
            redactor,
            cancel: ctx.cancel.clone(),
        },
    )
    .await
}
