//! The engine's agent seam ([`iterion_core::agent::AgentRunner`])
//! implemented on this crate: [`AgentBackends`] is what `iterion run`
//! installs so agent, judge and `mode: llm` router nodes run.
//!
//! It owns the translation only: the engine's [`AgentRequest`] becomes an
//! [`AgentTask`], the node's backend is resolved by the one resolver
//! ([`resolve_backend`]), the run's sandbox (or the host, unsandboxed)
//! becomes the [`AgentPlacement`], this crate's events become the engine's
//! drafts, and its typed errors become the seam's. It does not render
//! prompts, check the output against the schema or persist anything (the
//! engine's), nor decide where a tool runs or which credential travels
//! (the placement table, [`ProviderCredentials::collect`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use async_trait::async_trait;
use iterion_core::EventKind;
use iterion_core::agent::{
    self as seam, AgentEvents, AgentRequest, AgentUsage, BuiltinCall, SessionMode,
};
use iterion_core::id::{NodeId, RunId};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::agent::{AgentContext, AgentPlacement, preflight, run_agent};
use crate::backend::{BackendInputs, BackendName, HostFacts, resolve_backend};
use crate::env::EnvSnapshot;
use crate::error::AgentError;
use crate::events::AgentEventSink;
use crate::mcp::engine_tools::{EngineListener, ListenerKind};
use crate::mcp::listener::{GatewayGuard, RunGateway};
use crate::mcp::{McpHub, NodeLauncher};
use crate::provider::Message;
use crate::runner::{RunnerBinary, routed_via_runner_event};
use crate::task::{AgentTask, BudgetSpec, SessionSpec};
use crate::tools::privacy::PrivacyTools;
use iterion_core::agent::ProcessLedger;
use std::sync::Arc;

mod listeners;

/// The [`seam::AgentRunner`] of `iterion run`.
pub struct AgentBackends {
    env: EnvSnapshot,
    facts: HostFacts,
    runner_binary: Option<PathBuf>,
    /// claw conversations by session id, for a later `session: inherit`
    /// node of the same process (upstream keeps claw sessions in its
    /// store; a resumed run starts them fresh).
    claw_sessions: Mutex<HashMap<String, Vec<Message>>>,
    /// Runs that already recorded `sandbox_claw_routed_via_runner`.
    routed: Mutex<HashSet<RunId>>,
    /// The workflow's `budget:` token and cost limits (`used_*` zero).
    budget: Option<BudgetSpec>,
    /// What each run's agent nodes spent so far (tokens, USD).
    spent: Mutex<HashMap<RunId, (u64, f64)>>,
    /// `privacy_filter` / `privacy_unfilter`, over the run store (none
    /// until [`Self::with_store`]).
    privacy: Option<PrivacyTools>,
    /// Each live run's MCP servers (started lazily, stopped by
    /// `run_finished`).
    hubs: Mutex<HashMap<RunId, Arc<McpHub>>>,
    /// Where server processes are recorded for the reaper.
    ledger: Option<Arc<dyn ProcessLedger>>,
    /// Each live run's MCP listener (seed step 18), with its guard when
    /// this made it for a host run (a sandbox's is the booter's).
    gateways: Mutex<RunGateways>,
    /// Each live run's ask-user and board listeners (seed step 18), the
    /// same way.
    engine_listeners: Mutex<EngineListeners>,
    /// The board the `board.*` capabilities reach.
    board: Arc<crate::tools::board::BoardStore>,
}

/// Each run's listener, and its guard when this process owns its life.
type RunGateways = HashMap<RunId, (Arc<RunGateway>, Option<GatewayGuard>)>;
/// Each run's ask-user and board listeners, the same way.
type EngineListeners = HashMap<(RunId, ListenerKind), (Arc<EngineListener>, Option<GatewayGuard>)>;

impl std::fmt::Debug for AgentBackends {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentBackends")
            .field("facts", &self.facts)
            .field("runner_binary", &self.runner_binary)
            .finish_non_exhaustive()
    }
}

impl AgentBackends {
    /// Agents over the host environment `env` (credentials and defaults
    /// are read from it, nowhere else). `runner_binary` is a static
    /// `iterion` for sandboxed claw nodes (see
    /// [`crate::runner::locate_runner_binary`]); without one, the image
    /// must carry it at [`crate::runner::RUNNER_CONTAINER_PATH`].
    pub fn new(env: EnvSnapshot, runner_binary: Option<PathBuf>) -> Self {
        let facts = HostFacts::probe(&env);
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
        let board = Arc::new(crate::tools::board::BoardStore::for_process(&env, &cwd));
        Self {
            env,
            facts,
            runner_binary,
            claw_sessions: Mutex::new(HashMap::new()),
            routed: Mutex::new(HashSet::new()),
            budget: None,
            spent: Mutex::new(HashMap::new()),
            privacy: None,
            hubs: Mutex::new(HashMap::new()),
            ledger: None,
            gateways: Mutex::new(HashMap::new()),
            engine_listeners: Mutex::new(HashMap::new()),
            board,
        }
    }

    /// Record the MCP server processes this starts in `ledger` (the
    /// reaper's per-run host directories): without it a SIGKILLed iterion
    /// leaves a server only its death signal ends.
    pub fn with_process_ledger(mut self, ledger: Arc<dyn ProcessLedger>) -> Self {
        self.ledger = Some(ledger);
        self
    }

    fn hub_for(&self, run: &RunId, log: Option<&Arc<dyn seam::RunLog>>) -> Arc<McpHub> {
        let mut hubs = self
            .hubs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let hub = hubs
            .entry(run.clone())
            .or_insert_with(|| {
                Arc::new(McpHub::new(
                    run.clone(),
                    self.env.clone(),
                    self.ledger.clone(),
                    Arc::new(crate::mcp::NoLog),
                ))
            })
            .clone();
        if let Some(log) = log {
            hub.attach_log(log.clone());
        }
        hub
    }

    /// The node's host-side tools (its MCP servers started, their
    /// wildcards expanded into `task.tools`; the privacy tools), `None`
    /// when it names none.
    async fn node_launcher(
        &self,
        request: &AgentRequest,
        task: &mut AgentTask,
        log: &Arc<dyn seam::RunLog>,
        ask: Option<Arc<dyn seam::AskHuman>>,
    ) -> Result<Option<NodeLauncher<'_>>, AgentError> {
        let servers = crate::mcp::referenced_servers(&task.tools, &request.mcp_servers)?;
        let wants_privacy = task
            .tools
            .iter()
            .any(|t| crate::tools::privacy::is_privacy_tool(t));
        let board = seam::board_capabilities(&request.properties);
        if servers.is_empty() && !wants_privacy && ask.is_none() && board.is_empty() {
            return Ok(None);
        }
        let mut specs = Vec::new();
        if !board.is_empty() {
            // The tools the capabilities unlock, offered as listed.
            for spec in crate::tools::board::specs(&board) {
                if !task.tools.contains(&spec.name) {
                    task.tools.push(spec.name.clone());
                }
                specs.push(spec);
            }
        }
        let board = (!board.is_empty()).then(|| (self.board.clone(), board));
        if ask.is_some() {
            // An interactive node may ask, listed or not (upstream
            // registers the tool whenever interaction is on).
            if !task.tools.iter().any(|t| t == "ask_user") {
                task.tools.push("ask_user".to_owned());
            }
            specs.push(crate::mcp::engine_tools::tool_spec());
        }
        let hub = if servers.is_empty() {
            None
        } else {
            let hub = self.hub_for(&request.run_id, Some(log));
            let owned: Vec<_> = servers.iter().map(|s| (*s).clone()).collect();
            hub.ensure(&owned).await?;
            task.tools = crate::mcp::expand_wildcards(&task.tools, &hub);
            for s in &servers {
                specs.extend(hub.specs(&s.name));
            }
            Some(hub)
        };
        let privacy = match (&self.privacy, wants_privacy) {
            (Some(p), true) => {
                specs.extend(crate::tools::privacy::specs());
                Some((p, request.run_id.clone()))
            }
            _ => None,
        };
        Ok(Some(NodeLauncher {
            hub,
            privacy,
            ask,
            board,
            specs,
        }))
    }

    /// Keep each run's privacy vault in `store` (the run store of the
    /// runs this serves): without it the privacy tools are refused.
    pub fn with_store(mut self, store: std::sync::Arc<dyn iterion_core::RunStore>) -> Self {
        self.privacy = Some(PrivacyTools::new(store));
        self
    }

    fn runner_for_box(&self) -> RunnerBinary {
        // Probed first: a bind (or the image) already holding the runner
        // makes the copy a no-op.
        self.runner_binary
            .clone()
            .map_or(RunnerBinary::InSandbox, RunnerBinary::Import)
    }

    /// Enforce the workflow's `budget:` (`max_tokens`, `max_cost_usd`) over
    /// every agent node of a run: each claw node gets what the run spent
    /// before it and warns at 80 % (`budget_warning`), stops at 100 %
    /// (`budget_exceeded`, the node fails); a `claude_code` node is refused
    /// once the run is over budget. Nodes running in parallel branches
    /// count each other's spending when they finish.
    pub fn with_budget(mut self, budget: &BTreeMap<String, Value>) -> Self {
        let max_tokens = budget.get("max_tokens").and_then(Value::as_u64);
        let max_cost_usd = budget.get("max_cost_usd").and_then(Value::as_f64);
        self.budget = (max_tokens.is_some() || max_cost_usd.is_some()).then_some(BudgetSpec {
            max_tokens,
            max_cost_usd,
            ..BudgetSpec::default()
        });
        self
    }

    /// The run's budget with what it spent so far.
    fn budget_for(&self, run: &RunId) -> Option<BudgetSpec> {
        let b = self.budget?;
        let (used_tokens, used_cost_usd) = self
            .spent
            .lock()
            .map(|s| s.get(run).copied().unwrap_or_default())
            .unwrap_or_default();
        Some(BudgetSpec {
            used_tokens,
            used_cost_usd,
            ..b
        })
    }

    fn record_spending(&self, run: &RunId, tokens: u64, cost: f64) {
        if let Ok(mut s) = self.spent.lock() {
            let e = s.entry(run.clone()).or_default();
            e.0 += tokens;
            e.1 += cost;
        }
    }

    /// The static runner binary, when one was found.
    pub fn runner_binary(&self) -> Option<&Path> {
        self.runner_binary.as_deref()
    }

    /// The task of one request on `backend`.
    fn task_of(
        &self,
        request: &AgentRequest,
        backend: BackendName,
    ) -> Result<AgentTask, AgentError> {
        let mut task = AgentTask::new(request.node.to_string(), request.user_prompt.clone());
        task.model = resolve_model(request, backend, &self.env)?;
        task.system_prompt = request.system_prompt.clone();
        task.tools = request.tools.clone();
        task.tool_policy = request.tool_policy.clone();
        task.tool_max_steps = request.tool_max_steps;
        task.max_tokens = request.max_tokens;
        task.output_schema = request.output_schema.clone();
        task.reasoning_effort = request.reasoning_effort.clone();
        task.session = match (request.session, &request.session_id) {
            (
                SessionMode::Inherit | SessionMode::InheritIfAvailable | SessionMode::Fork,
                Some(id),
            ) => match backend {
                BackendName::Claw => SessionSpec::Inherit {
                    session_id: None,
                    messages: self
                        .claw_sessions
                        .lock()
                        .map(|s| s.get(id).cloned().unwrap_or_default())
                        .unwrap_or_default(),
                },
                _ => SessionSpec::Inherit {
                    session_id: Some(id.clone()),
                    messages: Vec::new(),
                },
            },
            _ => SessionSpec::Fresh,
        };
        Ok(task)
    }

    /// The node's effective backend (the one resolver).
    fn backend_of(&self, request: &AgentRequest) -> Result<BackendName, AgentError> {
        resolve_backend(
            BackendInputs {
                node: request.backend.as_deref(),
                workflow_default: request.default_backend.as_deref(),
            },
            &self.env,
            &self.facts,
        )
        .map(|r| r.name)
    }

    /// Check one node before anything of its run exists, from its
    /// properties as written (`backend:`, `model:`, `provider:`, `tools:`,
    /// its effective `tool_policy:`)
    /// and the workflow's `default_backend:`: its backend resolves, its
    /// model names a known provider, the credentials that backend needs
    /// are in the environment (named, never shown), its tools are
    /// classified. A host Claude login counts (the run may be
    /// unsandboxed); a sandboxed run without a key still fails the node.
    pub fn admit(
        &self,
        node: &NodeId,
        properties: &BTreeMap<String, Value>,
        default_backend: Option<&str>,
        mcp_servers: &[String],
    ) -> Result<BackendName, AgentError> {
        let request = admission_request(node, properties, default_backend);
        let backend = self.backend_of(&request)?;
        let mut task = self.task_of(&request, backend)?;
        // No server runs yet: a named MCP tool of one of the node's servers
        // stands for itself (a wildcard is judged once expanded, at run
        // time); one of another server is refused now.
        let mut placeholders = Vec::new();
        let mut kept = Vec::new();
        for name in &task.tools {
            match crate::tools::classify(name) {
                Some(crate::tools::ToolClass::Mcp { server, .. })
                    if server == crate::tools::board::SERVER =>
                {
                    // The engine's board: what the capabilities unlock.
                    let caps = seam::board_capabilities(properties);
                    placeholders.extend(crate::tools::board::specs(&caps));
                    if !name.ends_with(".*") {
                        kept.push(name.clone());
                    }
                }
                Some(crate::tools::ToolClass::Mcp { server, tool }) => {
                    if !mcp_servers.contains(&server) {
                        return Err(AgentError::ToolRefused {
                            tool: name.clone(),
                            reason: format!(
                                "MCP server {server} is not one of the node's servers (declare it with mcp_server and list it under mcp: servers:)"
                            ),
                        });
                    }
                    if tool != "*" {
                        placeholders.push(crate::tools::ToolSpec {
                            name: crate::tools::qualify(name),
                            description: String::new(),
                            input_schema: serde_json::json!({"type": "object"}),
                        });
                        kept.push(name.clone());
                    }
                }
                Some(crate::tools::ToolClass::AskUser) => {
                    // Served on an interactive node (the engine's call).
                    placeholders.push(crate::mcp::engine_tools::tool_spec());
                    kept.push(name.clone());
                }
                Some(crate::tools::ToolClass::Privacy) => {
                    placeholders.extend(
                        crate::tools::privacy::specs()
                            .into_iter()
                            .filter(|s| &s.name == name),
                    );
                    kept.push(name.clone());
                }
                _ => kept.push(name.clone()),
            }
        }
        task.tools = kept;
        let stand_ins = AdmissionTools(placeholders);
        preflight(
            &task,
            backend,
            &self.env,
            &self.facts,
            false,
            Some(&stand_ins),
        )?;
        Ok(backend)
    }

    /// Whether this is the run's first sandboxed claw node.
    fn first_routed(&self, run: &RunId) -> bool {
        self.routed
            .lock()
            .map(|mut r| r.insert(run.clone()))
            .unwrap_or(false)
    }
}

/// Launcher tools as admission sees them: named, not yet served.
struct AdmissionTools(Vec<crate::tools::ToolSpec>);

#[async_trait]
impl crate::LauncherTools for AdmissionTools {
    fn specs(&self) -> Vec<crate::tools::ToolSpec> {
        let mut seen = HashSet::new();
        self.0
            .iter()
            .filter(|s| seen.insert(s.name.clone()))
            .cloned()
            .collect()
    }

    async fn call(&self, name: &str, _input: &Value) -> Result<String, String> {
        Err(format!("{name} is not served at admission"))
    }
}

/// A request carrying only what admission reads: the node's backend
/// fields, model and tools as written.
fn admission_request(
    node: &NodeId,
    properties: &BTreeMap<String, Value>,
    default_backend: Option<&str>,
) -> AgentRequest {
    let text = |key: &str| {
        properties
            .get(key)
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let names = |key: &str| -> Option<Vec<String>> {
        properties.get(key).and_then(Value::as_array).map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
    };
    // A `mode: llm` router's model falls back like a router's at run time.
    let role = if text("mode").as_deref() == Some("llm") {
        seam::AgentRole::Router {
            multi: false,
            candidates: Vec::new(),
        }
    } else {
        seam::AgentRole::Agent
    };
    AgentRequest {
        run_id: RunId::generate(),
        node: node.clone(),
        role,
        system_prompt: None,
        user_prompt: String::new(),
        model: text("model"),
        backend: text("backend"),
        default_backend: default_backend.map(str::to_owned),
        provider: text("provider"),
        tools: names("tools").unwrap_or_default(),
        // The effective one: the caller merges the workflow's in.
        tool_policy: names("tool_policy"),
        output_schema: None,
        session: SessionMode::Fresh,
        session_id: None,
        tool_max_steps: None,
        max_tokens: None,
        reasoning_effort: None,
        input: Map::new(),
        properties: properties.clone(),
        mcp_servers: Vec::new(),
    }
}

/// The variable that stands for an absent or empty `model:` (upstream
/// `pkg/dsl/ir/compile.go`: agents, judges and routers alike).
pub const DEFAULT_SUPERVISOR_MODEL_VAR: &str = "ITERION_DEFAULT_SUPERVISOR_MODEL";
/// The last fallback of an LLM router, and claw's pick with an Anthropic key.
pub const FALLBACK_ANTHROPIC_MODEL: &str = "anthropic/claude-sonnet-4-6";
/// claw's pick with only an OpenAI key.
pub const FALLBACK_OPENAI_MODEL: &str = "openai/gpt-5.4-mini";

/// `model:` as written, with an absent or empty one taking
/// `ITERION_DEFAULT_SUPERVISOR_MODEL` (upstream does it at compile time,
/// which for a run is its launch); `${VAR:-default}` expanded; a bare
/// model name with a `provider:` becomes `provider/model` (the form
/// [`crate::model`] parses). `None`: nothing written, nothing inherited.
fn model_of(request: &AgentRequest, env: &EnvSnapshot) -> Option<String> {
    let written = request
        .model
        .as_deref()
        .filter(|m| !m.trim().is_empty())
        .or_else(|| {
            env.get(DEFAULT_SUPERVISOR_MODEL_VAR)
                .filter(|m| !m.is_empty())
        })?;
    let model = env.expand(written).value;
    match &request.provider {
        Some(p) if !model.is_empty() && !model.contains('/') => {
            Some(format!("{}/{model}", env.expand(p).value))
        }
        _ => Some(model),
    }
}

/// The model a node runs with (upstream `pkg/backend/model/executor.go`
/// `resolvedModel` and the router's fallback). When `model:` expands to
/// nothing: an LLM router takes `ITERION_DEFAULT_SUPERVISOR_MODEL`, then
/// `anthropic/claude-sonnet-4-6`; `claw` picks from the credentials it
/// finds, Anthropic first (`anthropic/claude-sonnet-4-6`, unless
/// `ANTHROPIC_BASE_URL` is a z.ai gateway), then OpenAI
/// (`openai/gpt-5.4-mini`), else refuses the node naming the variables
/// it tried; `claude_code` runs its CLI's own default (no `--model`). A
/// `{{…}}` template is never rendered in `model:` (as upstream): refused
/// with that said.
fn resolve_model(
    request: &AgentRequest,
    backend: BackendName,
    env: &EnvSnapshot,
) -> Result<Option<String>, AgentError> {
    if let Some(written) = &request.model
        && written.contains("{{")
    {
        return Err(AgentError::ModelTemplate {
            node: request.node.to_string(),
            written: written.clone(),
        });
    }
    let model = model_of(request, env).filter(|m| !m.is_empty());
    if model.is_some() {
        return Ok(model);
    }
    if matches!(request.role, seam::AgentRole::Router { .. }) {
        return Ok(Some(
            env.get(DEFAULT_SUPERVISOR_MODEL_VAR)
                .filter(|m| !m.is_empty())
                .map_or_else(|| FALLBACK_ANTHROPIC_MODEL.to_owned(), str::to_owned),
        ));
    }
    match backend {
        BackendName::Claw => {
            let set = |k: &str| env.get(k).is_some_and(|v| !v.is_empty());
            let zai = env
                .get("ANTHROPIC_BASE_URL")
                .is_some_and(|u| u.contains("z.ai"));
            if set("ANTHROPIC_API_KEY") && !zai {
                return Ok(Some(FALLBACK_ANTHROPIC_MODEL.to_owned()));
            }
            if set("OPENAI_API_KEY") {
                return Ok(Some(FALLBACK_OPENAI_MODEL.to_owned()));
            }
            let mut tried = Vec::new();
            if let Some(w) = request.model.as_deref() {
                tried.extend(crate::env::referenced_vars(w));
            }
            for v in [
                DEFAULT_SUPERVISOR_MODEL_VAR,
                "ANTHROPIC_API_KEY",
                "OPENAI_API_KEY",
            ] {
                if !tried.iter().any(|t| t == v) {
                    tried.push(v.to_owned());
                }
            }
            Err(AgentError::ModelUnresolved {
                node: request.node.to_string(),
                written: request.model.clone().unwrap_or_default(),
                tried,
            })
        }
        BackendName::ClaudeCode | BackendName::Codex => Ok(None),
    }
}

/// Who answers a node's `ask_user`: its interaction model under
/// `interaction: llm` / `llm_or_human` (the engine puts the effective
/// word and the rendered `interaction_prompt:` in the request's
/// properties), else the engine's human asker.
fn interaction_asker(
    request: &AgentRequest,
    env: &EnvSnapshot,
    human: Option<Arc<dyn seam::AskHuman>>,
) -> Option<Arc<dyn seam::AskHuman>> {
    let text = |k: &str| {
        request
            .properties
            .get(k)
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let or_human = match text("interaction").as_deref() {
        Some("llm") => false,
        Some("llm_or_human") => true,
        _ => return human,
    };
    Some(Arc::new(crate::interaction::LlmAsker {
        env: env.clone(),
        node: request.node.to_string(),
        model: text("interaction_model").filter(|m| !m.is_empty()),
        system: text("interaction_prompt"),
        human,
        or_human,
        rounds: std::sync::atomic::AtomicU32::new(0),
    }))
}

/// This crate's events, as the engine's drafts.
struct Forward<'a>(&'a dyn AgentEvents);

impl AgentEventSink for Forward<'_> {
    fn emit(&self, event: EventKind) {
        self.0.emit(event.into());
    }
}

/// The agents' provider keys as the booter binds them (issue 17 item 5):
/// the one reading of which credentials reach an agent,
/// [`ProviderCredentials::collect`], over this runner's environment.
impl seam::ProviderSecrets for AgentBackends {
    fn bindable(&self) -> Vec<seam::ProviderSecret> {
        crate::credentials::ProviderCredentials::collect(&self.env).bindable()
    }
}

#[async_trait]
impl seam::AgentRunner for AgentBackends {
    async fn run(
        &self,
        request: AgentRequest,
        cx: seam::AgentContext<'_>,
    ) -> Result<seam::AgentOutcome, seam::AgentError> {
        let backend = self
            .backend_of(&request)
            .map_err(|e| to_seam(e, request.backend.as_deref().unwrap_or("(unresolved)")))?;
        let mut task = self
            .task_of(&request, backend)
            .map_err(|e| to_seam(e, backend.as_str()))?;
        task.budget = self.budget_for(&request.run_id);
        let sink = Forward(cx.events);
        if backend != BackendName::Claw
            && let Some(e) = task.budget.and_then(over_budget)
        {
            // claw checks its budget itself, call by call; a CLI cannot be
            // stopped mid-conversation, so it is refused up front.
            if let AgentError::BudgetExceeded {
                dimension,
                used,
                limit,
            } = &e
            {
                sink.emit(EventKind::BudgetExceeded {
                    dimension: dimension.clone(),
                    used: *used,
                    limit: *limit,
                });
            }
            return Err(to_seam(e, backend.as_str()));
        }
        let run_log = cx.run_log.clone();
        let sandboxed = cx.sandboxed;
        let placement = if cx.sandboxed {
            if backend == BackendName::Claw && self.first_routed(&request.run_id) {
                sink.emit(routed_via_runner_event());
            }
            AgentPlacement::Sandbox {
                run: cx.sandbox,
                runner: self.runner_for_box(),
                image: None,
                exec_env: cx.exec_env,
                placeholders: cx.provider_placeholders,
            }
        } else {
            AgentPlacement::Host {
                workspace: PathBuf::from(cx.sandbox.workdir()),
            }
        };
        // The seam cancels by dropping this future: the guard cancels the
        // node's token with it, which kills its tools and processes.
        let cancel = CancellationToken::new();
        let _guard = cancel.clone().drop_guard();
        let ask = interaction_asker(&request, &self.env, cx.ask.clone());
        let launcher = match backend {
            BackendName::Claw => self
                .node_launcher(&request, &mut task, &cx.run_log, ask.clone())
                .await
                .map_err(|e| {
                    sink.emit(EventKind::DelegateError {
                        backend: backend.as_str().to_owned(),
                        duration_ms: 0,
                        tokens: 0,
                        exit_code: None,
                        code: e.code().to_owned(),
                        error: e.to_string(),
                    });
                    to_seam(e, backend.as_str())
                })?,
            _ => None,
        };
        let cli = match backend {
            BackendName::ClaudeCode => self
                .cli_mcp(&request, &mut task, &run_log, sandboxed, ask.clone())
                .await
                .map_err(|e| to_seam(e, backend.as_str()))?,
            _ => None,
        };
        let ctx = AgentContext {
            env: &self.env,
            facts: self.facts,
            sink: &sink,
            launcher: launcher.as_ref().map(|l| l as &dyn crate::LauncherTools),
            cli_mcp: cli.as_ref().map(|(m, _)| m.clone()),
            cancel,
        };
        let out = run_agent(&task, backend, placement, &ctx).await;
        if let Some((_, lease)) = &cli {
            lease.release();
        }
        let out = out.map_err(|e| to_seam(e, backend.as_str()))?;
        self.record_spending(
            &request.run_id,
            out.usage.input_tokens + out.usage.output_tokens,
            out.usage.cost_usd.unwrap_or(0.0),
        );
        let session_id = match backend {
            BackendName::Claw => {
                let id = format!("claw-{}-{}", request.run_id, uuid_like());
                if let Ok(mut s) = self.claw_sessions.lock() {
                    s.insert(id.clone(), out.messages.clone());
                }
                Some(id)
            }
            _ => out.session_id.clone(),
        };
        let output = match out.output {
            Value::Object(map) => map,
            // A node without an output schema answers prose (upstream's
            // `text` field).
            _ => {
                let mut m = Map::new();
                m.insert("text".to_owned(), Value::String(out.text.clone()));
                m
            }
        };
        Ok(seam::AgentOutcome {
            output,
            usage: AgentUsage {
                input_tokens: out.usage.input_tokens,
                output_tokens: out.usage.output_tokens,
                cost_usd: out.usage.cost_usd,
            },
            backend: backend.as_str().to_owned(),
            session_id,
        })
    }

    fn is_builtin_tool(&self, command: &str) -> bool {
        crate::tool_node::is_node_builtin(command)
    }

    async fn call_builtin(
        &self,
        call: BuiltinCall,
        cx: seam::AgentContext<'_>,
    ) -> Result<Map<String, Value>, seam::AgentError> {
        let creds = crate::credentials::ProviderCredentials::collect(&self.env);
        let forward = Forward(cx.events);
        let sink = crate::events::Redacting::new(&forward, creds.redactor());
        crate::tool_node::call(
            &call,
            crate::tool_node::NodeTools {
                env: &self.env,
                sandbox: cx.sandbox,
                sandboxed: cx.sandboxed,
                exec_env: cx.exec_env,
                runner: self.runner_for_box(),
                privacy: self.privacy.as_ref(),
                sink: &sink,
            },
        )
        .await
        .map_err(|e| to_seam(e, "builtin"))
    }

    fn builtin_output_for_event(&self, tool: &str, output: Value) -> Value {
        crate::tool_node::output_for_event(tool, output)
    }

    async fn run_finished(&self, run: &RunId) {
        if let Some(p) = &self.privacy {
            p.forget(run);
        }
        let hub = self.hubs.lock().ok().and_then(|mut h| h.remove(run));
        if let Some(hub) = hub {
            hub.shutdown().await;
        }
        // A host run's listener stops here; a sandbox's with its teardown.
        let gateway = self.gateways.lock().ok().and_then(|mut g| g.remove(run));
        drop(gateway);
        let listeners: Vec<_> = self
            .engine_listeners
            .lock()
            .map(|mut g| {
                let keys: Vec<_> = g.keys().filter(|(r, _)| r == run).cloned().collect();
                keys.into_iter().filter_map(|k| g.remove(&k)).collect()
            })
            .unwrap_or_default();
        drop(listeners);
    }
}

/// The budget's first exhausted dimension, as the error claw gives.
fn over_budget(b: BudgetSpec) -> Option<AgentError> {
    #[allow(clippy::cast_precision_loss)]
    let dims = [
        (
            "tokens",
            b.used_tokens as f64,
            b.max_tokens.map(|m| m as f64),
        ),
        ("cost_usd", b.used_cost_usd, b.max_cost_usd),
    ];
    dims.into_iter().find_map(|(dimension, used, limit)| {
        let limit = limit.filter(|l| *l > 0.0)?;
        (used >= limit).then(|| AgentError::BudgetExceeded {
            dimension: dimension.to_owned(),
            used,
            limit,
        })
    })
}

/// A process-unique suffix for claw session ids.
fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!(
        "{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// This crate's error as the seam's, keeping its stable code in the text
/// (the engine records `message (code)`).
fn to_seam(e: AgentError, backend: &str) -> seam::AgentError {
    let text = format!("{e} [{}]", e.code());
    match e {
        AgentError::Sandbox { source, .. } => seam::AgentError::Sandbox { source },
        AgentError::Cancelled => seam::AgentError::Sandbox {
            source: iterion_core::DriverError::Cancelled,
        },
        AgentError::ProviderStatus {
            provider, status, ..
        } => seam::AgentError::Provider {
            provider,
            message: text,
            status: Some(status),
        },
        AgentError::RetriesExhausted {
            provider, status, ..
        } => seam::AgentError::Provider {
            provider,
            message: text,
            status,
        },
        AgentError::ProviderTransport { provider, .. }
        | AgentError::ProviderGarbage { provider, .. } => seam::AgentError::Provider {
            provider,
            message: text,
            status: None,
        },
        AgentError::SchemaMismatch { .. } => seam::AgentError::Output { message: text },
        AgentError::ToolMaxStepsExceeded { max } => seam::AgentError::LimitExceeded {
            what: format!("tool_max_steps: {text}"),
            limit: u64::from(max),
        },
        AgentError::BudgetExceeded {
            ref dimension,
            limit,
            ..
        } => seam::AgentError::LimitExceeded {
            what: format!("budget {dimension}: {text}"),
            // Whole tokens or whole cents would both read as a limit.
            limit: limit.max(0.0).round() as u64,
        },
        _ => seam::AgentError::Backend {
            backend: backend.to_owned(),
            reason: text,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(model: Option<&str>, provider: Option<&str>) -> AgentRequest {
        let mut props = BTreeMap::new();
        for (k, v) in [("model", model), ("provider", provider)] {
            if let Some(v) = v {
                props.insert(k.to_owned(), Value::String(v.to_owned()));
            }
        }
        admission_request(&NodeId::new("n"), &props, None)
    }

    #[test]
    fn model_expansion_and_provider_join() {
        let env = EnvSnapshot::new().with("M", "openai/gpt-4o");
        let cases = [
            (Some("${M:-anthropic/x}"), None, Some("openai/gpt-4o")),
            (Some("${UNSET:-anthropic/x}"), None, Some("anthropic/x")),
            (Some("gpt-4o"), Some("openai"), Some("openai/gpt-4o")),
            (Some("anthropic/x"), Some("openai"), Some("anthropic/x")),
            (None, Some("openai"), None),
        ];
        for (model, provider, want) in cases {
            assert_eq!(
                model_of(&request(model, provider), &env).as_deref(),
                want,
                "{model:?} {provider:?}"
            );
        }
    }

    /// Upstream `pkg/backend/model/executor.go` (`resolvedModel`, the LLM
    /// router's fallback) and `pkg/backend/detect/detect.go` (claw's pick
    /// by credentials), `pkg/dsl/ir/compile.go` (an absent `model:` takes
    /// `ITERION_DEFAULT_SUPERVISOR_MODEL`).
    #[test]
    fn empty_models_resolve_as_upstream() {
        let resolve =
            |model: Option<&str>, router: bool, backend: BackendName, env: &EnvSnapshot| {
                let mut props = BTreeMap::new();
                if let Some(m) = model {
                    props.insert("model".to_owned(), Value::String(m.to_owned()));
                }
                if router {
                    props.insert("mode".to_owned(), Value::String("llm".to_owned()));
                }
                resolve_model(
                    &admission_request(&NodeId::new("n"), &props, None),
                    backend,
                    env,
                )
            };
        let none = EnvSnapshot::new();
        let anthropic = EnvSnapshot::new().with("ANTHROPIC_API_KEY", "k");
        let openai = EnvSnapshot::new().with("OPENAI_API_KEY", "k");
        let zai = anthropic
            .clone()
            .with("ANTHROPIC_BASE_URL", "https://api.z.ai/api/anthropic")
            .with("OPENAI_API_KEY", "k");
        let sup = EnvSnapshot::new().with(DEFAULT_SUPERVISOR_MODEL_VAR, "openai/sup");
        let claw = BackendName::Claw;
        let cc = BackendName::ClaudeCode;
        let ok = |r: Result<Option<String>, AgentError>| r.expect("resolves");
        // `${X}` unset: claw picks by credentials, Anthropic first.
        assert_eq!(
            ok(resolve(Some("${X}"), false, claw, &anthropic)).as_deref(),
            Some(FALLBACK_ANTHROPIC_MODEL)
        );
        assert_eq!(
            ok(resolve(Some("${X}"), false, claw, &openai)).as_deref(),
            Some(FALLBACK_OPENAI_MODEL)
        );
        assert_eq!(
            ok(resolve(Some("${X}"), false, claw, &zai)).as_deref(),
            Some(FALLBACK_OPENAI_MODEL)
        );
        assert_eq!(
            ok(resolve(Some("${X:-anthropic/d}"), false, claw, &none)).as_deref(),
            Some("anthropic/d")
        );
        // Absent or empty: the supervisor variable, as written at compile time.
        assert_eq!(
            ok(resolve(None, false, claw, &sup)).as_deref(),
            Some("openai/sup")
        );
        assert_eq!(
            ok(resolve(Some(""), false, claw, &sup)).as_deref(),
            Some("openai/sup")
        );
        // ...but not for a written `${X}` that expands to nothing.
        assert_eq!(ok(resolve(Some("${X}"), false, cc, &sup)), None);
        // claude_code: its CLI's default model.
        assert_eq!(ok(resolve(Some("${X}"), false, cc, &none)), None);
        assert_eq!(ok(resolve(None, false, cc, &none)), None);
        // An LLM router: the supervisor variable, then sonnet.
        assert_eq!(
            ok(resolve(Some("${X}"), true, claw, &sup)).as_deref(),
            Some("openai/sup")
        );
        assert_eq!(
            ok(resolve(Some("${X}"), true, cc, &none)).as_deref(),
            Some(FALLBACK_ANTHROPIC_MODEL)
        );
        // claw with nothing: a typed error naming the node and what was tried.
        let err = resolve(Some("${CONTEXT_MODEL}"), false, claw, &none).expect_err("unresolved");
        assert_eq!(err.code(), "AGENT_MODEL_UNRESOLVED");
        let text = err.to_string();
        for name in [
            "node n",
            "CONTEXT_MODEL",
            DEFAULT_SUPERVISOR_MODEL_VAR,
            "ANTHROPIC_API_KEY",
            "OPENAI_API_KEY",
        ] {
            assert!(text.contains(name), "{name}: {text}");
        }
        // A template is never rendered in `model:`; the error says so.
        let err =
            resolve(Some("{{vars.default_model}}"), false, claw, &anthropic).expect_err("template");
        assert_eq!(err.code(), "AGENT_MODEL_TEMPLATE");
        assert!(err.to_string().contains("not rendered"), "{err}");
        assert_eq!(
            crate::env::referenced_vars("${A:-${B}}x${A}"),
            vec!["A", "B"]
        );
    }

    #[test]
    fn run_budget_accumulates_per_run() {
        let mut budget = BTreeMap::new();
        budget.insert("max_tokens".to_owned(), Value::from(100));
        let a = AgentBackends::new(EnvSnapshot::new(), None).with_budget(&budget);
        let (r1, r2) = (RunId::generate(), RunId::generate());
        a.record_spending(&r1, 60, 0.0);
        a.record_spending(&r1, 50, 0.0);
        let b1 = a.budget_for(&r1).unwrap();
        assert_eq!((b1.used_tokens, b1.max_tokens), (110, Some(100)));
        assert!(
            matches!(over_budget(b1), Some(AgentError::BudgetExceeded { ref dimension, .. }) if dimension == "tokens")
        );
        let b2 = a.budget_for(&r2).unwrap();
        assert_eq!(b2.used_tokens, 0);
        assert!(over_budget(b2).is_none());
        let none = AgentBackends::new(EnvSnapshot::new(), None).with_budget(&BTreeMap::new());
        assert!(none.budget_for(&r1).is_none());
    }

    #[test]
    fn errors_map_onto_the_seam_keeping_the_code() {
        let e = to_seam(
            AgentError::MissingCredential {
                provider: "anthropic".into(),
                variables: vec!["ANTHROPIC_API_KEY".into()],
            },
            "claw",
        );
        assert_eq!(e.code(), "AGENT_BACKEND");
        assert!(e.to_string().contains("ANTHROPIC_API_KEY"), "{e}");
        assert!(e.to_string().contains("AGENT_MISSING_CREDENTIAL"), "{e}");
        let e = to_seam(AgentError::ToolMaxStepsExceeded { max: 3 }, "claw");
        assert_eq!(e.code(), "AGENT_LIMIT_EXCEEDED");
        let e = to_seam(AgentError::Cancelled, "claw");
        assert!(matches!(
            e,
            seam::AgentError::Sandbox {
                source: iterion_core::DriverError::Cancelled
            }
        ));
    }
}
