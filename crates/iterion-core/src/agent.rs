//! The agent seam: how the engine hands an agent, judge or `mode: llm`
//! router node to whatever runs agents, and what it gets back.
//!
//! The engine renders the node's prompts, derives its output schema and
//! resolves its input; an [`AgentRunner`] (the `iterion-agent` crate: claw
//! loop, `claude_code` adapter, in-box runner) resolves the backend, runs
//! the conversation — its shell tools exec'd into the run's sandbox
//! through [`SandboxRun`] — and answers with a structured output, its token
//! usage, and the events it streamed on the way ([`AgentEvents`], persisted
//! by the engine as run events, upstream's names). It does not choose the next
//! node (the engine routes on the output) nor decide where the run's
//! sandbox is (the booter did).
//!
//! Cancellation drops the future: an implementation releases what it holds
//! in `Drop` (host processes killed on drop; an exec in the sandbox dies
//! with the container at teardown at the latest).

use std::collections::BTreeMap;
use std::fmt;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// Built-in agent tools that never write to the workspace: upstream's
/// `readOnlyTools` plus claw's `glob` and `grep`. The one list both the
/// engine (which branches may run in parallel) and the agent crate's
/// registry (`Builtin::read_only`) read.
pub const READ_ONLY_TOOLS: &[&str] = &[
    "git_diff",
    "git_status",
    "read_file",
    "list_files",
    "search_codebase",
    "tree",
    "glob",
    "grep",
];
use serde_json::{Map, Value};

use crate::driver::{DriverError, SandboxRun};
use crate::event::EventDraft;
use crate::id::{NodeId, RunId};

/// How the launcher reaches an MCP server (an `mcp_server` block).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "transport", rename_all = "snake_case")]
pub enum McpTransport {
    /// A process the launcher starts, speaking JSON-RPC on its stdio.
    Stdio {
        /// Program (`${VAR}` references already expanded from the host).
        command: String,
        /// Arguments.
        #[serde(default)]
        args: Vec<String>,
        /// Extra environment of the process.
        #[serde(default)]
        env: BTreeMap<String, String>,
    },
    /// A streamable-HTTP endpoint (`http`; upstream serves `sse` with the
    /// same client).
    Http {
        /// Endpoint URL.
        url: String,
        /// Extra request headers (secret: never logged or recorded).
        #[serde(default)]
        headers: BTreeMap<String, String>,
        /// `auth:` (OAuth2), when declared.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        auth: Option<McpOAuth>,
    },
}

/// An http server's `auth: type: oauth2` block (upstream's fields).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpOAuth {
    /// The authorization endpoint (the browser step).
    pub auth_url: String,
    /// The token endpoint (refresh).
    pub token_url: String,
    /// The revocation endpoint, when declared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoke_url: Option<String>,
    /// The client id.
    pub client_id: String,
    /// Scopes requested.
    #[serde(default)]
    pub scopes: Vec<String>,
}

/// One declared MCP server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpServerSpec {
    /// Its name (a DSL identifier: the `<server>` of `mcp.<server>.<tool>`).
    pub name: String,
    /// How it is reached.
    #[serde(flatten)]
    pub transport: McpTransport,
}

/// What kind of node asks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum AgentRole {
    /// An `agent` node.
    Agent,
    /// A `judge` node: its structured verdict routes its edges.
    Judge,
    /// A `mode: llm` router choosing among `candidates` (its edges'
    /// targets, in source order); `multi` lets it choose several, which
    /// then run as parallel branches. Its output schema (set by the
    /// engine) is `{selected_route, reasoning}` or
    /// `{selected_routes, reasoning}`.
    Router {
        /// Whether several routes may be chosen.
        multi: bool,
        /// The routes to choose from.
        candidates: Vec<String>,
    },
}

/// `session:` of a node (upstream `SessionMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionMode {
    /// A new conversation (the default).
    #[default]
    Fresh,
    /// Continue the session named by the input's `_session_id`.
    Inherit,
    /// Like `inherit`, but fresh when no session id arrived.
    InheritIfAvailable,
    /// Branch off the session named by `_session_id`.
    Fork,
    /// Fresh, seeing only published artifacts.
    ArtifactsOnly,
}

impl SessionMode {
    /// The DSL word, `None` when unknown.
    pub fn parse(word: &str) -> Option<Self> {
        Some(match word {
            "fresh" => Self::Fresh,
            "inherit" => Self::Inherit,
            "inherit_if_available" => Self::InheritIfAvailable,
            "fork" => Self::Fork,
            "artifacts_only" => Self::ArtifactsOnly,
            _ => return None,
        })
    }
}

/// One agent call: everything the node declares, resolved and rendered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentRequest {
    /// The run.
    pub run_id: RunId,
    /// The node.
    pub node: NodeId,
    /// Agent, judge or llm router.
    pub role: AgentRole,
    /// The rendered system prompt (`system:`), when declared.
    pub system_prompt: Option<String>,
    /// The rendered user prompt (`user:`); without one, the node's input
    /// as JSON (upstream), or empty when it has none.
    pub user_prompt: String,
    /// `model:` as written (`${VAR:-default}` not expanded: the runner's
    /// backend resolution owns that).
    pub model: Option<String>,
    /// `backend:` as written.
    pub backend: Option<String>,
    /// The workflow's `default_backend:` as written.
    pub default_backend: Option<String>,
    /// `provider:` as written.
    pub provider: Option<String>,
    /// `tools:` (capability names, MCP globs as written).
    pub tools: Vec<String>,
    /// The effective `tool_policy:` patterns: the node's when written, else
    /// the workflow's; `None` when neither is (open).
    pub tool_policy: Option<Vec<String>>,
    /// The output schema as JSON Schema (object, every field required, no
    /// other property), derived from the node's `output:` schema.
    pub output_schema: Option<Value>,
    /// `session:`.
    pub session: SessionMode,
    /// The session to continue (`_session_id` of the input), for
    /// `inherit`, `inherit_if_available` and `fork`.
    pub session_id: Option<String>,
    /// `tool_max_steps:`.
    pub tool_max_steps: Option<u32>,
    /// `max_tokens:`.
    pub max_tokens: Option<u32>,
    /// `reasoning_effort:`.
    pub reasoning_effort: Option<String>,
    /// The node's input (its incoming edge's `with`).
    pub input: Map<String, Value>,
    /// Every property of the node as written (for what this struct does
    /// not name yet: `interaction`, `mcp`, `compaction`, `permission`…).
    pub properties: BTreeMap<String, Value>,
    /// The MCP servers the node may use (its `mcp:` block over the
    /// workflow's, resolved by the compiler), in order.
    #[serde(default)]
    pub mcp_servers: Vec<McpServerSpec>,
}

/// Token usage and cost of one agent call, as far as the provider says.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct AgentUsage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// Cost in USD, when known.
    pub cost_usd: Option<f64>,
}

/// What an agent call produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentOutcome {
    /// The structured output (an object matching the output schema).
    pub output: Map<String, Value>,
    /// Usage.
    pub usage: AgentUsage,
    /// The backend that actually ran (after resolution).
    pub backend: String,
    /// The session to hand on (`_session_id` of the output), when any.
    pub session_id: Option<String>,
}

/// Why an agent call failed.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// No backend could run the node (unknown backend or provider,
    /// missing credentials, CLI missing from the image…): refused before
    /// anything was asked of a model.
    #[error("backend {backend}: {reason}")]
    Backend {
        /// The backend (as resolved, or as written).
        backend: String,
        /// Why, naming what is missing (never a secret's value).
        reason: String,
    },
    /// The provider failed (after the runner's retries).
    #[error("provider {provider}: {message}")]
    Provider {
        /// The provider.
        provider: String,
        /// What it said (redacted).
        message: String,
        /// HTTP status, when there was one.
        status: Option<u16>,
    },
    /// The answer does not match the output schema (after the repair turn).
    #[error("output does not match the schema: {message}")]
    Output {
        /// Which field, how.
        message: String,
    },
    /// The conversation went past `tool_max_steps` or the node's budget.
    #[error("{what} exceeded ({limit})")]
    LimitExceeded {
        /// `tool_max_steps`, `max_tokens`…
        what: String,
        /// The limit.
        limit: u64,
    },
    /// The sandbox failed under the agent's execs.
    #[error("sandbox: {source}")]
    Sandbox {
        /// Cause.
        #[source]
        source: DriverError,
    },
}

impl AgentError {
    /// Stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Backend { .. } => "AGENT_BACKEND",
            Self::Provider { .. } => "AGENT_PROVIDER",
            Self::Output { .. } => "AGENT_OUTPUT",
            Self::LimitExceeded { .. } => "AGENT_LIMIT_EXCEEDED",
            Self::Sandbox { source } => source.code(),
        }
    }
}

/// Where an agent's events go: the engine tags each with the node and its
/// branch, masks the run's secret values in it, and persists them in
/// order. Events carry upstream's names (`llm_request`,
/// `llm_step_finished`, `llm_retry`, `tool_started`, `tool_called`,
/// `tool_error`, `delegate_started`/`_finished`/`_error`, …); a typed
/// [`EventKind`](crate::EventKind) converts with `.into()`.
pub trait AgentEvents: Send + Sync {
    /// Record one event.
    fn emit(&self, event: EventDraft);
}

/// The run's log, owned: what a runner starts for the run and keeps past
/// one node (an MCP server's stderr) writes here. Lines are masked for the
/// run's secrets by the engine.
pub trait RunLog: Send + Sync {
    /// Append one line on `stream` (`stderr`, `system`).
    fn line(&self, stream: &str, text: String);
}

/// Where a runner records the host processes it starts for a run (MCP
/// servers), so a reaper can end them when the run is provably over even
/// after a SIGKILL of iterion: the engine's side knows the per-run host
/// directories, their owner markers and the reaper's one predicate.
pub trait ProcessLedger: Send + Sync {
    /// The environment entry (`NAME`, `VALUE`) every process started for
    /// `run` must carry: it marks the process (and what it spawns) as the
    /// run's when the reaper looks.
    fn marker(&self, run: &RunId) -> (String, String);
    /// Record process `pid` (leader of its own process group) of `run`
    /// under `label`. An error refuses to start the process.
    fn record(&self, run: &RunId, label: &str, pid: u32) -> std::io::Result<()>;
    /// The process of `label` was stopped.
    fn forget(&self, run: &RunId, label: &str);
}

/// One agent or judge node as the per-run listeners' intents see it
/// (seed step 18: decided before the sandbox starts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerNode {
    /// `backend:` as written.
    pub backend: Option<String>,
    /// The node's MCP servers.
    pub mcp_servers: Vec<McpServerSpec>,
    /// Whether it may ask the human (`ask_user`): the ask-user listener.
    pub interactive: bool,
    /// The `board.*` capabilities it is granted: the board listener.
    pub board: Vec<String>,
}

/// The `board.*` capabilities a node's `capabilities:` grants (`board`
/// alone grants them all): the one reading both the engine's listener
/// intents and the agent runner use.
pub fn board_capabilities(properties: &BTreeMap<String, serde_json::Value>) -> Vec<String> {
    properties
        .get("capabilities")
        .and_then(serde_json::Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(serde_json::Value::as_str)
                .filter(|c| *c == "board" || c.starts_with("board."))
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// The board directory a process uses when `ITERION_STORE_DIR` is unset
/// and the directory iterion runs in is `cwd`, before issue 31 item 2:
/// inside the workspace, where a sandbox writes. Only ever read to import
/// it once ([`board_root`] is where the board lives now).
pub const LEGACY_BOARD_DIR: &str = ".iterion/dispatcher";

/// Where a process's board lives (issue 31 item 2): never, by default,
/// in the workspace a sandbox writes. `store_dir` (`ITERION_STORE_DIR`,
/// upstream's name) when set — the operator's choice, shared by every
/// process that names it; a relative one is under `cwd`. Otherwise
/// `<state home>/iterion/boards/<key>`: the state home is `state_home`
/// (`XDG_STATE_HOME`) or `<home>/.local/state`, and the key names the
/// directory iterion runs in — its last component and 16 hex digits of
/// its path's SHA-256 — so two projects never share a board unless
/// configured to. `None`: no absolute state home or home to put it in.
/// The one home of this decision: the agent's board opens it, the
/// sandbox decision masks it from binds that would expose it.
pub fn board_root(
    store_dir: Option<&str>,
    state_home: Option<&str>,
    home: Option<&str>,
    cwd: &std::path::Path,
) -> Option<std::path::PathBuf> {
    use sha2::{Digest as _, Sha256};
    if let Some(dir) = store_dir.filter(|d| !d.is_empty()) {
        return Some(cwd.join(dir));
    }
    fn absolute(v: Option<&str>) -> Option<&str> {
        v.filter(|v| v.starts_with('/'))
    }
    let state = match (absolute(state_home), absolute(home)) {
        (Some(s), _) => std::path::PathBuf::from(s),
        (None, Some(h)) => std::path::Path::new(h).join(".local").join("state"),
        (None, None) => return None,
    };
    let name: String = cwd
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '.' | '_' | '-' => c,
            _ => '_',
        })
        .take(40)
        .collect();
    let name = name.trim_start_matches('.');
    let digest = Sha256::digest(cwd.as_os_str().as_encoded_bytes());
    let key = format!(
        "{}-{}",
        if name.is_empty() { "root" } else { name },
        &hex::encode(digest)[..16]
    );
    Some(state.join("iterion").join("boards").join(key))
}

/// What a run's listeners serve.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListenerNeeds {
    /// The workflow's `default_backend:` as written.
    pub default_backend: Option<String>,
    /// Every agent and judge node.
    pub nodes: Vec<ListenerNode>,
}

impl ListenerNeeds {
    /// Whether any node could need a listener (the runner decides which
    /// backends do).
    pub fn any(&self) -> bool {
        self.nodes
            .iter()
            .any(|n| !n.mcp_servers.is_empty() || n.interactive || !n.board.is_empty())
    }
}

/// The run's listeners, alive until dropped (teardown): dropping the
/// handle runs the stop each listener registered.
pub struct GatewayHandle {
    /// The TCP ports they listen on (the firewall admits these).
    pub ports: Vec<u16>,
    stops: Vec<Box<dyn FnOnce() + Send + Sync>>,
}

impl GatewayHandle {
    /// Listeners on `ports`, each stopped by one of `stops` when the
    /// handle is dropped.
    pub fn new(ports: Vec<u16>, stops: Vec<Box<dyn FnOnce() + Send + Sync>>) -> Self {
        Self { ports, stops }
    }
}

impl Drop for GatewayHandle {
    fn drop(&mut self) {
        for stop in self.stops.drain(..) {
            stop();
        }
    }
}

impl fmt::Debug for GatewayHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GatewayHandle")
            .field("ports", &self.ports)
            .finish_non_exhaustive()
    }
}

/// A provider credential the agent backends would hand to a sandboxed
/// agent, and the one host it is for (issue 17 item 5): the host of the
/// provider's base URL, only when that URL is HTTPS. The booter mints a
/// placeholder for it when the run's proxy can put the value back on
/// that host; the agent then holds the placeholder, never the value.
#[derive(Clone, PartialEq, Eq)]
pub struct ProviderSecret {
    /// The variable the agent reads (`ANTHROPIC_API_KEY`, …).
    pub variable: String,
    /// The provider's host (a name or an IP literal, no port).
    pub host: String,
    /// The provider's port (its base URL's, 443 when it names none): the
    /// key is bound to host AND port (issue 31 item 4).
    pub port: u16,
    value: String,
}

impl ProviderSecret {
    /// `variable` holding `value`, for `host`.
    pub fn new(
        variable: impl Into<String>,
        host: impl Into<String>,
        value: impl Into<String>,
    ) -> Self {
        Self {
            variable: variable.into(),
            host: host.into(),
            port: 443,
            value: value.into(),
        }
    }

    /// The same credential for `port` of its host.
    pub fn on_port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// The value (for the proxy's binding and the redactor only).
    pub fn value(&self) -> &str {
        &self.value
    }
}

impl fmt::Debug for ProviderSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the value.
        f.debug_struct("ProviderSecret")
            .field("variable", &self.variable)
            .field("host", &self.host)
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

/// Which provider credentials a run's agents would carry into a sandbox
/// ([`ProviderSecret`]): the agent crate's one reading of them, asked by
/// the booter before the proxy starts.
pub trait ProviderSecrets: Send + Sync {
    /// The credentials that can be bound to their provider's host.
    fn bindable(&self) -> Vec<ProviderSecret>;
}

/// The per-run host listeners a sandbox reaches through the host-gateway
/// alias (seed step 18): started by the booter before the sandbox (the
/// alias and the firewall need their ports), bound on the address the
/// driver gives the run's gateway, behind tokens the runner mints.
#[async_trait]
pub trait GatewayListeners: Send + Sync {
    /// Start what `run` needs of them, bound on `address` (`freebind`:
    /// the address may appear only when the sandbox starts); `None` when
    /// it needs none.
    async fn start(
        &self,
        run: &RunId,
        needs: &ListenerNeeds,
        address: std::net::IpAddr,
        freebind: bool,
    ) -> Result<Option<GatewayHandle>, String>;
}

/// Where and how the call runs.
pub struct AgentContext<'a> {
    /// The run's sandbox (or the host passthrough on an unsandboxed run):
    /// every shell tool of the agent is exec'd here.
    pub sandbox: &'a dyn SandboxRun,
    /// Whether a real container is the boundary (`IS_SANDBOX=1` and the
    /// in-box runner only then).
    pub sandboxed: bool,
    /// The env every exec of this node carries: its identity, the
    /// workspace, the run's `as: env` secrets and its own egress proxy
    /// credential. Secret: never argv, logs or events.
    pub exec_env: BTreeMap<String, String>,
    /// Provider credential variable → the run's placeholder for it
    /// (issue 17 item 5): in a sandbox the agent carries these instead of
    /// the values, and the run's proxy swaps them back on the provider's
    /// host. Empty when the run binds none.
    pub provider_placeholders: BTreeMap<String, String>,
    /// The event sink.
    pub events: &'a dyn AgentEvents,
    /// The run's log (owned: outlives the node).
    pub run_log: std::sync::Arc<dyn RunLog>,
    /// Who answers the node's `ask_user` calls: set only on an
    /// interactive node (the engine decides which are).
    pub ask: Option<std::sync::Arc<dyn AskHuman>>,
}

/// What an agent's `ask_user` call gets back from the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AskReply {
    /// The human's answer (a terminal, or `iterion resume --answer`).
    Answer(String),
    /// Nobody can answer now: the run pauses for a human, this node
    /// stops and runs again on resume (its question is recorded). The
    /// engine's asker never returns it — it stops the node instead, so
    /// the model sees no answer and makes no further call.
    Paused,
    /// The question cannot be asked here (why: a branch cannot pause).
    Refused(String),
}

/// Answers one node's `ask_user` calls (the engine's side of the seam).
#[async_trait]
pub trait AskHuman: Send + Sync {
    /// Ask `question`.
    async fn ask(&self, question: &str) -> AskReply;
}

impl fmt::Debug for AgentContext<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentContext")
            .field("container", &self.sandbox.container())
            .field("sandboxed", &self.sandboxed)
            .field("exec_env", &self.exec_env.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// A tool node whose `command:` is the bare name of a built-in tool
/// (upstream: a command without template reference or shell syntax is
/// resolved in the tool registry): the built-in runs with the node's
/// input instead of a shell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BuiltinCall {
    /// The run.
    pub run_id: RunId,
    /// The tool node.
    pub node: NodeId,
    /// The built-in's name, as written.
    pub tool: String,
    /// The node's input (its incoming edge's `with`).
    pub input: Map<String, Value>,
    /// The workflow's effective `tool_policy:` for the node; `None` open.
    pub tool_policy: Option<Vec<String>>,
}

/// Runs agent, judge and llm-router nodes, and the built-in tools tool
/// nodes name.
#[async_trait]
pub trait AgentRunner: Send + Sync {
    /// Run one node's agent call.
    async fn run(
        &self,
        request: AgentRequest,
        cx: AgentContext<'_>,
    ) -> Result<AgentOutcome, AgentError>;

    /// Whether a tool node's `command:` (trimmed) names a built-in this
    /// runner executes. The default knows none: the command is a shell's.
    fn is_builtin_tool(&self, command: &str) -> bool {
        let _ = command;
        false
    }

    /// Run the built-in of a tool node; its output object (a JSON answer
    /// as is, any other text as `{"result": text}`). A failure of the
    /// tool is an error: the node fails.
    async fn call_builtin(
        &self,
        call: BuiltinCall,
        cx: AgentContext<'_>,
    ) -> Result<Map<String, Value>, AgentError> {
        let _ = cx;
        Err(AgentError::Backend {
            backend: "builtin".to_owned(),
            reason: format!("no built-in tool {} in this engine", call.tool),
        })
    }

    /// How a built-in's output appears in events (`node_finished`): as is
    /// by default; a tool whose output holds clear values it exists to
    /// keep out of the record (`privacy_unfilter`) shows a marker there.
    fn builtin_output_for_event(&self, tool: &str, output: Value) -> Value {
        let _ = tool;
        output
    }

    /// The run ended (whatever its status): release what was kept for it
    /// (MCP server processes, caches). Called once, before teardown.
    async fn run_finished(&self, run: &RunId) {
        let _ = run;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_words() {
        assert_eq!(SessionMode::parse("inherit"), Some(SessionMode::Inherit));
        assert_eq!(SessionMode::parse("fresh"), Some(SessionMode::Fresh));
        assert_eq!(SessionMode::parse("Inherit"), None);
    }

    #[test]
    fn the_board_lives_outside_the_workspace_one_per_project_unless_configured() {
        use std::path::{Path, PathBuf};
        let a = Path::new("/work/proj-a");
        let b = Path::new("/other/proj-a");
        let root = |store, state, home, cwd| board_root(store, state, home, cwd);
        let ra = root(None, None, Some("/home/op"), a).expect("a");
        let rb = root(None, None, Some("/home/op"), b).expect("b");
        assert!(
            ra.to_string_lossy()
                .starts_with("/home/op/.local/state/iterion/boards/proj-a-"),
            "{ra:?}"
        );
        assert_ne!(ra, rb, "same name, another project: another board");
        assert_eq!(ra, root(None, None, Some("/home/op"), a).expect("again"));
        assert!(!ra.starts_with(a), "never inside the workspace");
        assert_eq!(
            root(None, Some("/state"), Some("/home/op"), a)
                .expect("xdg")
                .parent(),
            Some(Path::new("/state/iterion/boards"))
        );
        // A relative XDG_STATE_HOME is ignored, as the spec says.
        assert!(
            root(None, Some("rel"), Some("/home/op"), a)
                .expect("home")
                .starts_with("/home/op/.local/state")
        );
        assert_eq!(root(None, None, None, a), None);
        assert_eq!(root(None, Some("rel"), Some("rel"), a), None);
        // Configured: exactly there, shared by whoever names it.
        assert_eq!(
            root(Some("/srv/board"), None, None, a),
            Some(PathBuf::from("/srv/board"))
        );
        assert_eq!(root(Some("b"), None, None, a), Some(a.join("b")));
        assert_eq!(
            root(Some(""), None, Some("/h"), a),
            root(None, None, Some("/h"), a)
        );
        // Odd names are spelled safely; the root directory still gets one.
        let odd = root(None, None, Some("/h"), Path::new("/x/a b:c")).expect("odd");
        assert!(
            odd.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("a_b_c-")),
            "{odd:?}"
        );
        let slash = root(None, None, Some("/h"), Path::new("/")).expect("root");
        assert!(
            slash
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("root-")),
            "{slash:?}"
        );
    }
}
