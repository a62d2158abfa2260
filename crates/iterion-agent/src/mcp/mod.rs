//! MCP servers, launcher side (facts §5.6: MCP-family tools run on the
//! host and are proxied back over the runner channel): one [`McpHub`] per
//! run holds one client per declared server, on the official Rust SDK
//! (`rmcp`), started lazily by the first node that uses the server (the
//! `initialize` handshake bounded by `ITERION_MCP_STARTUP_TIMEOUT`,
//! default 30 s) and stopped when the run ends ([`McpHub::shutdown`]).
//! A stdio server is a host process ([`process`]: its own group, the
//! run's marker, a death signal, the process ledger, stderr to the run
//! log); an `http` server is a streamable-HTTP endpoint (headers and the
//! URL's `${VAR}` expanded from the host, never logged).
//!
//! A server's tools are the registry's `mcp.<server>.<tool>`; a call
//! answers the text of its content (a structured result as JSON), an
//! error result or a dead server is an error result for the model — it
//! fails the call, never the run. It decides no placement (the table) and
//! no policy (the node's, checked by the loop and the launcher).

pub mod engine_tools;
mod gateway;
pub mod listener;
mod oauth;
pub(crate) mod process;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use iterion_core::RunId;
use iterion_core::agent::{McpServerSpec, McpTransport, ProcessLedger, RunLog};
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, Tool};
use rmcp::service::{Peer, RoleClient, RunningService};
use serde_json::Value;
use tokio::sync::{Mutex, OnceCell};

use crate::env::EnvSnapshot;
use crate::error::AgentError;
use crate::http::{HttpSettings, ResolverMode};
use crate::tools::ToolSpec;

/// Default bound of a server's start and `initialize` handshake.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// Default bound of one tool call.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(300);

/// The bounds of a hub, from `ITERION_MCP_STARTUP_TIMEOUT` and
/// `ITERION_MCP_CALL_TIMEOUT` (Go durations); an unreadable value keeps
/// the default.
#[derive(Debug, Clone, Copy)]
pub struct McpSettings {
    /// Start plus handshake plus tool listing.
    pub startup_timeout: Duration,
    /// One `tools/call`.
    pub call_timeout: Duration,
}

impl McpSettings {
    /// From the host environment.
    pub fn from_env(env: &EnvSnapshot) -> Self {
        let read = |k: &str, d: Duration| {
            env.get(k)
                .and_then(iterion_core::duration::parse_go_duration)
                .filter(|d| !d.is_zero())
                .unwrap_or(d)
        };
        Self {
            startup_timeout: read("ITERION_MCP_STARTUP_TIMEOUT", DEFAULT_STARTUP_TIMEOUT),
            call_timeout: read("ITERION_MCP_CALL_TIMEOUT", DEFAULT_CALL_TIMEOUT),
        }
    }
}

/// One connected server.
struct Connection {
    peer: Peer<RoleClient>,
    tools: Vec<Tool>,
    service: Mutex<Option<RunningService<RoleClient, ()>>>,
    child: Mutex<Option<(tokio::process::Child, u32)>>,
}

type Slot = Arc<OnceCell<Result<Arc<Connection>, StartFailure>>>;
/// A server process whose handshake is under way.
type Parked = Arc<Mutex<Option<(tokio::process::Child, u32)>>>;

/// A failed start, kept so every node of the run gets the same answer.
#[derive(Debug, Clone)]
enum StartFailure {
    Spawn { command: String, reason: String },
    Timeout { seconds: u64 },
    Failed { reason: String },
}

impl StartFailure {
    fn error(&self, server: &str) -> AgentError {
        let server = server.to_owned();
        match self.clone() {
            Self::Spawn { command, reason } => AgentError::McpSpawnFailed {
                server,
                command,
                reason,
            },
            Self::Timeout { seconds } => AgentError::McpStartupTimeout { server, seconds },
            Self::Failed { reason } => AgentError::McpServerFailed { server, reason },
        }
    }
}

/// The MCP servers of one run.
pub struct McpHub {
    run: RunId,
    env: EnvSnapshot,
    settings: McpSettings,
    ledger: Option<Arc<dyn ProcessLedger>>,
    /// The run log servers' stderr goes to (the latest node's handle).
    log: std::sync::Mutex<Arc<dyn RunLog>>,
    slots: std::sync::Mutex<HashMap<String, Slot>>,
    /// Processes started whose connection is not up yet.
    parked: std::sync::Mutex<HashMap<String, Parked>>,
}

impl std::fmt::Debug for McpHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpHub")
            .field("run", &self.run)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl McpHub {
    /// The hub of `run`: nothing starts before [`Self::ensure`].
    pub fn new(
        run: RunId,
        env: EnvSnapshot,
        ledger: Option<Arc<dyn ProcessLedger>>,
        log: Arc<dyn RunLog>,
    ) -> Self {
        let settings = McpSettings::from_env(&env);
        Self {
            run,
            env,
            settings,
            ledger,
            log: std::sync::Mutex::new(log),
            slots: std::sync::Mutex::new(HashMap::new()),
            parked: std::sync::Mutex::new(HashMap::new()),
        }
    }

    /// Send later servers' stderr to `log` (a node's run-log handle; the
    /// hub may be made at boot, before any node).
    pub fn attach_log(&self, log: Arc<dyn RunLog>) {
        if let Ok(mut l) = self.log.lock() {
            *l = log;
        }
    }

    fn park(&self, name: &str, child: Parked) {
        if let Ok(mut p) = self.parked.lock() {
            p.insert(name.to_owned(), child);
        }
    }

    fn unpark(&self, name: &str) {
        if let Ok(mut p) = self.parked.lock() {
            p.remove(name);
        }
    }

    fn slot(&self, name: &str) -> Slot {
        let mut slots = self
            .slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        slots.entry(name.to_owned()).or_default().clone()
    }

    /// Start (once per run) and list the tools of each of `servers`; the
    /// first failure refuses the node, naming its server.
    pub async fn ensure(&self, servers: &[McpServerSpec]) -> Result<(), AgentError> {
        for spec in servers {
            self.connection(spec).await?;
        }
        Ok(())
    }

    async fn connection(&self, spec: &McpServerSpec) -> Result<Arc<Connection>, AgentError> {
        let slot = self.slot(&spec.name);
        let got = slot
            .get_or_init(|| async {
                let bound = self.settings.startup_timeout;
                match tokio::time::timeout(bound, self.start(spec)).await {
                    Ok(r) => r,
                    Err(_) => Err(StartFailure::Timeout {
                        seconds: bound.as_secs().max(1),
                    }),
                }
            })
            .await;
        match got {
            Ok(c) => Ok(c.clone()),
            Err(f) => {
                // A start abandoned on its bound may have left a process.
                self.stop_slot(&spec.name).await;
                Err(f.error(&spec.name))
            }
        }
    }

    async fn start(&self, spec: &McpServerSpec) -> Result<Arc<Connection>, StartFailure> {
        let failed = |what: &str, e: &dyn std::fmt::Display| StartFailure::Failed {
            reason: format!("{what}: {e}"),
        };
        match &spec.transport {
            McpTransport::Stdio { command, args, env } => {
                let log = self
                    .log
                    .lock()
                    .map(|l| l.clone())
                    .map_err(|_| StartFailure::Failed {
                        reason: "run log handle poisoned".to_owned(),
                    })?;
                let p = process::spawn(&process::Launch {
                    run: &self.run,
                    server: &spec.name,
                    command,
                    args,
                    env,
                    host_env: &self.env,
                    ledger: self.ledger.as_ref(),
                    log: &log,
                })
                .map_err(|e| match e {
                    AgentError::McpSpawnFailed {
                        command, reason, ..
                    } => StartFailure::Spawn { command, reason },
                    other => StartFailure::Failed {
                        reason: other.to_string(),
                    },
                })?;
                let process::ServerProcess {
                    child,
                    pid,
                    stdin,
                    stdout,
                } = p;
                // Parked first: a handshake that fails or times out still
                // leaves a process teardown stops.
                let conn_child = Arc::new(Mutex::new(Some((child, pid))));
                self.park(&spec.name, conn_child.clone());
                let service = ().serve((stdout, stdin)).await.map_err(|e| {
                    failed(
                        "the initialize handshake failed (its stderr is in the run log)",
                        &e,
                    )
                })?;
                let tools = service
                    .peer()
                    .list_all_tools()
                    .await
                    .map_err(|e| failed("tools/list failed", &e))?;
                let child = conn_child.lock().await.take();
                self.unpark(&spec.name);
                Ok(Arc::new(Connection {
                    peer: service.peer().clone(),
                    tools,
                    service: Mutex::new(Some(service)),
                    child: Mutex::new(child),
                }))
            }
            McpTransport::Http { url, headers, auth } => {
                let url = self.env.expand(url).value;
                let mut custom = std::collections::HashMap::new();
                for (k, v) in headers {
                    let name = http::HeaderName::from_bytes(k.as_bytes())
                        .map_err(|e| failed(&format!("header {k:?}"), &e))?;
                    let value = http::HeaderValue::from_str(&self.env.expand(v).value)
                        // Never the value: it is usually a credential.
                        .map_err(|_| StartFailure::Failed {
                            reason: format!("header {k:?} has a value no HTTP header may carry"),
                        })?;
                    custom.insert(name, value);
                }
                let client = HttpSettings::from_env(&self.env, ResolverMode::System)
                    .client()
                    .map_err(|e| failed("HTTP client", &e))?;
                let mut config = rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(url)
                    .custom_headers(custom);
                if let Some(auth) = auth {
                    let token = oauth::access_token(&spec.name, auth, &self.env, &client)
                        .await
                        .map_err(|reason| StartFailure::Failed { reason })?;
                    config = config.auth_header(token);
                }
                let transport =
                    rmcp::transport::StreamableHttpClientTransport::with_client(client, config);
                let service = ()
                    .serve(transport)
                    .await
                    .map_err(|e| failed("the initialize handshake failed", &e))?;
                let tools = service
                    .peer()
                    .list_all_tools()
                    .await
                    .map_err(|e| failed("tools/list failed", &e))?;
                Ok(Arc::new(Connection {
                    peer: service.peer().clone(),
                    tools,
                    service: Mutex::new(Some(service)),
                    child: Mutex::new(None),
                }))
            }
        }
    }

    /// The tools of a started server, as the registry's launcher specs.
    pub fn specs(&self, server: &str) -> Vec<ToolSpec> {
        let Some(conn) = self.started(server) else {
            return Vec::new();
        };
        conn.tools
            .iter()
            .map(|t| ToolSpec {
                name: format!("mcp.{server}.{}", t.name),
                description: t.description.as_deref().unwrap_or_default().to_owned(),
                input_schema: Value::Object((*t.input_schema).clone()),
            })
            .collect()
    }

    /// The raw tools of a started server (what the listener re-serves).
    pub(crate) fn tools(&self, server: &str) -> Vec<Tool> {
        self.started(server)
            .map(|c| c.tools.clone())
            .unwrap_or_default()
    }

    fn started(&self, server: &str) -> Option<Arc<Connection>> {
        let slot = self
            .slots
            .lock()
            .ok()
            .and_then(|s| s.get(server).cloned())?;
        slot.get().and_then(|r| r.as_ref().ok()).cloned()
    }

    /// Call `tool` of `server` with `input`: the text the model gets, or
    /// the error it gets.
    pub async fn call(&self, server: &str, tool: &str, input: &Value) -> Result<String, String> {
        let result = self.call_raw(server, tool, input).await?;
        let text = content_text(&result);
        if result.is_error.unwrap_or(false) {
            Err(text)
        } else {
            Ok(text)
        }
    }

    /// The server's own answer (content, structured content, error flag):
    /// what the run's listener hands on to a CLI as is.
    pub(crate) async fn call_raw(
        &self,
        server: &str,
        tool: &str,
        input: &Value,
    ) -> Result<rmcp::model::CallToolResult, String> {
        let conn = self
            .started(server)
            .ok_or_else(|| format!("MCP server {server} is not running in this run"))?;
        let args = match input {
            Value::Object(m) => m.clone(),
            Value::Null => serde_json::Map::new(),
            _ => {
                return Err(format!(
                    "the input of mcp.{server}.{tool} must be an object"
                ));
            }
        };
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(args);
        let bound = self.settings.call_timeout;
        match tokio::time::timeout(bound, conn.peer.call_tool(params)).await {
            Err(_) => Err(format!(
                "MCP server {server} did not answer {tool} within {} s",
                bound.as_secs()
            )),
            Ok(Err(e)) => Err(format!(
                "MCP server {server} failed during {tool}: {e} (its stderr is in the run log)"
            )),
            Ok(Ok(r)) => Ok(r),
        }
    }

    /// Stop every server of the run.
    pub async fn shutdown(&self) {
        let names: Vec<String> = self
            .slots
            .lock()
            .map(|s| s.keys().cloned().collect())
            .unwrap_or_default();
        for name in names {
            self.stop_slot(&name).await;
        }
    }

    async fn stop_slot(&self, name: &str) {
        if let Some(conn) = self.started(name) {
            if let Some(service) = conn.service.lock().await.take() {
                // Closing the transport ends a well-behaved server first.
                let _ = tokio::time::timeout(Duration::from_secs(3), service.cancel()).await;
            }
            if let Some((mut child, pid)) = conn.child.lock().await.take() {
                process::stop(&mut child, pid).await;
            }
        }
        let parked = self.parked.lock().ok().and_then(|mut p| p.remove(name));
        if let Some(parked) = parked
            && let Some((mut child, pid)) = parked.lock().await.take()
        {
            process::stop(&mut child, pid).await;
        }
        if let Some(ledger) = &self.ledger {
            ledger.forget(&self.run, name);
        }
    }
}

/// The text of a tool result: its text blocks joined; other blocks named;
/// a structured result as JSON when no text came.
fn content_text(result: &rmcp::model::CallToolResult) -> String {
    let mut parts: Vec<String> = Vec::new();
    for block in &result.content {
        match serde_json::to_value(block) {
            Ok(v) if v["type"] == "text" => {
                parts.push(v["text"].as_str().unwrap_or_default().to_owned());
            }
            Ok(v) => parts.push(format!(
                "[{} content]",
                v["type"].as_str().unwrap_or("unknown")
            )),
            Err(_) => parts.push("[unreadable content]".to_owned()),
        }
    }
    if parts.is_empty()
        && let Some(s) = &result.structured_content
    {
        return s.to_string();
    }
    parts.join("\n")
}

/// The launcher-side tools of one node: its MCP servers' tools and the
/// privacy tools, served on the host ([`crate::LauncherTools`]).
/// A run log that drops its lines (a hub made before any node runs gets
/// the first node's log).
pub struct NoLog;

impl RunLog for NoLog {
    fn line(&self, _stream: &str, _text: String) {}
}

pub(crate) struct NodeLauncher<'a> {
    pub hub: Option<Arc<McpHub>>,
    pub privacy: Option<(&'a crate::tools::privacy::PrivacyTools, RunId)>,
    /// Who answers `ask_user` (an interactive node only).
    pub ask: Option<Arc<dyn iterion_core::agent::AskHuman>>,
    /// The board and the node's `board.*` capabilities.
    pub board: Option<(Arc<crate::tools::board::BoardStore>, Vec<String>)>,
    pub specs: Vec<ToolSpec>,
}

#[async_trait::async_trait]
impl crate::LauncherTools for NodeLauncher<'_> {
    fn specs(&self) -> Vec<ToolSpec> {
        self.specs.clone()
    }

    async fn call(&self, name: &str, input: &Value) -> Result<String, String> {
        match crate::tools::classify(name) {
            Some(crate::tools::ToolClass::Mcp { server, tool })
                if server == crate::tools::board::SERVER =>
            {
                match &self.board {
                    Some((store, caps)) => {
                        let (store, caps, input) = (store.clone(), caps.clone(), input.clone());
                        tokio::task::spawn_blocking(move || store.call(&caps, &tool, &input))
                            .await
                            .unwrap_or_else(|e| Err(format!("board call: {e}")))
                    }
                    None => Err(format!(
                        "{name}: the node is granted no board capability"
                    )),
                }
            }
            Some(crate::tools::ToolClass::Mcp { server, tool }) => match &self.hub {
                Some(hub) => hub.call(&server, &tool, input).await,
                None => Err(format!("no MCP server serves {name}")),
            },
            Some(crate::tools::ToolClass::Privacy) => match &self.privacy {
                Some((p, run)) => p.call(run, name, input).await,
                None => Err(format!(
                    "{name}: no run store is wired for the privacy vault"
                )),
            },
            Some(crate::tools::ToolClass::AskUser) => match &self.ask {
                Some(ask) => engine_tools::answer(ask.as_ref(), input).await,
                None => Err(
                    "ask_user: this node is not interactive (set `interaction: human` on it or its workflow)"
                        .to_owned(),
                ),
            },
            _ => Err(format!("{name} is not served on the host")),
        }
    }
}

/// The servers a node's `tools:` names (`mcp.<server>.<tool>`, the
/// `mcp.<server>.*` wildcard), each required to be one of the node's
/// servers (`mcp: servers:`).
pub(crate) fn referenced_servers<'s>(
    tools: &[String],
    active: &'s [McpServerSpec],
) -> Result<Vec<&'s McpServerSpec>, AgentError> {
    let mut out: Vec<&McpServerSpec> = Vec::new();
    for name in tools {
        let Some(crate::tools::ToolClass::Mcp { server, .. }) = crate::tools::classify(name) else {
            continue;
        };
        if server == crate::tools::board::SERVER {
            // The engine's board, not a declared server.
            continue;
        }
        let spec = active
            .iter()
            .find(|s| s.name == server)
            .ok_or_else(|| AgentError::ToolRefused {
                tool: name.clone(),
                reason: format!(
                    "MCP server {server} is not one of the node's servers (declare it with mcp_server and list it under mcp: servers:)"
                ),
            })?;
        if !out.iter().any(|s| s.name == spec.name) {
            out.push(spec);
        }
    }
    Ok(out)
}

/// `tools:` with each `mcp.<server>.*` replaced by that server's tools.
pub(crate) fn expand_wildcards(tools: &[String], hub: &McpHub) -> Vec<String> {
    let mut out = Vec::with_capacity(tools.len());
    for name in tools {
        match crate::tools::classify(name) {
            Some(crate::tools::ToolClass::Mcp { server, tool }) if tool == "*" => {
                out.extend(hub.specs(&server).into_iter().map(|s| s.name));
            }
            _ => out.push(name.clone()),
        }
    }
    out
}
