//! The crate's one error type. Every variant a user can see has a stable
//! [`AgentError::code`]; none carries a credential value (a missing key is
//! named by its variable, an unknown backend by the expression as written).
//!
//! The data-only variants serialize (tagged by their code) so a failure in
//! the in-box runner crosses the stdio channel and comes back to the host as
//! the same typed error; variants holding a live source (driver, IO) never
//! leave the host and are skipped on the wire.

use serde::{Deserialize, Serialize};

/// What went wrong running an agent node.
#[derive(Debug, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "code", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AgentError {
    /// The node (or workflow, or environment) names a backend that does not exist.
    #[error(
        "unknown agent backend {written:?} (from {source_label}); expected claw, claude_code or codex"
    )]
    UnknownBackend {
        /// The expression as written (never its expanded value: a
        /// `${SECRET}` must not reach an error message).
        written: String,
        /// Which knob said it (`node`, `workflow default_backend`, `ITERION_DEFAULT_BACKEND`).
        source_label: String,
    },
    /// A model string without a `provider/` prefix.
    #[error(
        "invalid model {model:?}: expected \"provider/model\" (e.g. anthropic/claude-sonnet-4-6)"
    )]
    InvalidModel {
        /// The model string.
        model: String,
    },
    /// `model:` expanded to nothing and nothing else named one.
    #[error(
        "node {node}: no model: `model: {written:?}` is empty once expanded, and none of {} gives one (set one of them, or write `model: \"provider/model\"`)",
        .tried.join(", ")
    )]
    ModelUnresolved {
        /// The node.
        node: String,
        /// `model:` as written (never an expanded value).
        written: String,
        /// The variables looked at, in order.
        tried: Vec<String>,
    },
    /// `model:` holds a `{{…}}` template, which is never rendered there.
    #[error(
        "node {node}: model {written:?}: `{{{{…}}}}` templates are not rendered in `model:` (as upstream); write the model, or `${{VAR}}` / `${{VAR:-default}}` to take it from the environment"
    )]
    ModelTemplate {
        /// The node.
        node: String,
        /// `model:` as written.
        written: String,
    },
    /// A provider prefix nobody knows.
    #[error("unknown model provider {provider:?} in {model:?}; known: anthropic, openai")]
    UnknownProvider {
        /// The prefix.
        provider: String,
        /// The whole model string.
        model: String,
    },
    /// A provider upstream knows but this build does not speak.
    #[error(
        "model provider {provider:?} is not supported by the claw backend of this build; use anthropic/… or openai/… (an OpenAI-compatible gateway through OPENAI_BASE_URL)"
    )]
    ProviderUnsupported {
        /// The prefix.
        provider: String,
    },
    /// The resolved backend/provider has no credential in the environment.
    #[error("no credential for {provider}: set {}", variables.join(" or "))]
    MissingCredential {
        /// Provider or backend that needs it.
        provider: String,
        /// Variables any one of which would do.
        variables: Vec<String>,
    },
    /// A Claude subscription OAuth token is not usable by claw (upstream `GuardThirdPartyOAuth`).
    #[error(
        "claw cannot use a Claude subscription OAuth token ({variable}); set ANTHROPIC_API_KEY or run the node on the claude_code backend"
    )]
    SubscriptionTokenRefused {
        /// The variable holding the token.
        variable: String,
    },
    /// A tool name the placement table does not classify (or not available here).
    #[error("tool {tool:?} is refused: {reason}")]
    ToolRefused {
        /// The tool name.
        tool: String,
        /// Why.
        reason: String,
    },
    /// A tool upstream's claw registers that this engine does not serve
    /// (its vendored claw's own orchestration, or not built yet).
    #[error("tool {tool:?} is not available in this engine: {reason}")]
    ToolUnavailable {
        /// The tool name.
        tool: String,
        /// Why, and what to use instead.
        reason: String,
    },
    /// Two tools would share a qualified or a wire name.
    #[error(
        "tool {tool:?} collides with {existing:?} (both are {wire:?} to the model); rename one"
    )]
    ToolCollision {
        /// The tool being registered (qualified name).
        tool: String,
        /// The tool already registered (qualified name).
        existing: String,
        /// The name both map to.
        wire: String,
    },
    /// An MCP server process could not be started.
    #[error("MCP server {server}: cannot start {command:?}: {reason}")]
    McpSpawnFailed {
        /// The server.
        server: String,
        /// The program, as written.
        command: String,
        /// Why.
        reason: String,
    },
    /// An MCP server did not finish its `initialize` handshake in time.
    #[error(
        "MCP server {server} did not answer initialize within {seconds} s (ITERION_MCP_STARTUP_TIMEOUT)"
    )]
    McpStartupTimeout {
        /// The server.
        server: String,
        /// The bound.
        seconds: u64,
    },
    /// An MCP server failed its handshake or its tool listing.
    #[error("MCP server {server}: {reason}")]
    McpServerFailed {
        /// The server.
        server: String,
        /// Why (its stderr tail is in the run log).
        reason: String,
    },
    /// A tool node's built-in failed (its error text names no secret).
    #[error("tool {tool} failed: {error}")]
    ToolFailed {
        /// The tool (qualified name).
        tool: String,
        /// What it said.
        error: String,
    },
    /// A tool node's built-in is refused by the workflow's `tool_policy:`.
    #[error("tool {tool} is denied by the tool policy: {reason}")]
    ToolDenied {
        /// The tool (qualified name).
        tool: String,
        /// The policy's reason.
        reason: String,
    },
    /// The node's `tool_policy:` leaves none of its tools callable.
    #[error("tool_policy {patterns:?} denies every tool of the node ({tools:?})")]
    ToolPolicyDeniesAll {
        /// The policy's patterns.
        patterns: Vec<String>,
        /// The node's tools.
        tools: Vec<String>,
    },
    /// The node's output schema is not a usable JSON Schema.
    #[error("invalid output schema: {detail}")]
    InvalidSchema {
        /// Why.
        detail: String,
    },
    /// The provider answered with a non-success status that is not retried.
    #[error("provider {provider} answered HTTP {status}: {message}")]
    ProviderStatus {
        /// Provider name.
        provider: String,
        /// HTTP status.
        status: u16,
        /// Error message from the body (bounded, redacted).
        message: String,
    },
    /// Retries of a transient failure ran out.
    #[error("provider {provider} still failing after {attempts} attempts: {last_error}")]
    RetriesExhausted {
        /// Provider name.
        provider: String,
        /// Attempts made.
        attempts: u32,
        /// Last HTTP status, if any.
        status: Option<u16>,
        /// Last error.
        last_error: String,
    },
    /// The provider could not be reached.
    #[error("provider {provider} unreachable: {message}")]
    ProviderTransport {
        /// Provider name.
        provider: String,
        /// Transport error text.
        message: String,
    },
    /// The provider's answer does not decode as its wire format.
    #[error("provider {provider} returned an undecodable answer: {detail}")]
    ProviderGarbage {
        /// Provider name.
        provider: String,
        /// What did not decode (bounded).
        detail: String,
    },
    /// The model kept calling tools past `tool_max_steps`.
    #[error(
        "agent exceeded tool_max_steps ({max}): the model still called tools on its last allowed turn"
    )]
    ToolMaxStepsExceeded {
        /// The bound.
        max: u32,
    },
    /// The output still did not match the schema after the repair turn.
    #[error("agent output does not match the output schema after one repair turn: {}", errors.join("; "))]
    SchemaMismatch {
        /// Validation errors of the last attempt (bounded).
        errors: Vec<String>,
    },
    /// A token or cost budget is spent.
    #[error("budget exceeded: {dimension} used {used} of {limit}")]
    BudgetExceeded {
        /// `tokens` or `cost_usd`.
        dimension: String,
        /// Amount used.
        used: f64,
        /// The limit.
        limit: f64,
    },
    /// The node was cancelled.
    #[error("agent cancelled")]
    Cancelled,
    /// The runner channel broke its protocol (malformed line, unexpected message).
    #[error("claw runner protocol error: {detail}")]
    RunnerProtocol {
        /// What was wrong (bounded; never the line's content beyond a prefix).
        detail: String,
    },
    /// A runner line exceeded the per-line cap.
    #[error("claw runner line of {size} bytes exceeds the {limit}-byte cap ({direction})")]
    RunnerLineTooLong {
        /// Bytes seen before giving up.
        size: usize,
        /// The cap.
        limit: usize,
        /// `host_to_runner` or `runner_to_host`.
        direction: String,
    },
    /// The runner exited without a result.
    #[error("claw runner exited with {exit_code} without a result: {stderr_tail}")]
    RunnerExited {
        /// Exit code.
        exit_code: i64,
        /// Tail of its stderr.
        stderr_tail: String,
    },
    /// No runner binary can be placed into the sandbox.
    #[error("no iterion binary to run inside the sandbox: {reason}")]
    RunnerBinaryUnavailable {
        /// What was looked for.
        reason: String,
    },
    /// The agent CLI is not in the image (or on the host).
    #[error("the {cli} CLI is not available in {location}")]
    CliMissing {
        /// `claude` or `codex`.
        cli: String,
        /// `image <ref>` or `the host PATH`.
        location: String,
    },
    /// The claude CLI ended the session with an error result.
    #[error("claude CLI failed ({subtype}): {message}")]
    ClaudeCode {
        /// Result subtype (`error_max_turns`, `error_during_execution`, …).
        subtype: String,
        /// Message (bounded, redacted).
        message: String,
    },
    /// codex cannot run here.
    #[error("codex backend refused: {reason}")]
    CodexRefused {
        /// Why (nested sandbox, or not built here).
        reason: String,
    },
    /// A driver operation failed (exec, import).
    #[error("sandbox {operation} failed: {source}")]
    #[serde(skip)]
    Sandbox {
        /// What was being done.
        operation: String,
        /// The driver error.
        #[source]
        source: iterion_core::DriverError,
    },
    /// Local IO failed.
    #[error("{operation}: {source}")]
    #[serde(skip)]
    Io {
        /// What was being done.
        operation: String,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// The HTTP client could not be built (proxy URL, TLS roots).
    #[error("http client setup failed: {detail}")]
    HttpSetup {
        /// Why.
        detail: String,
    },
}

impl AgentError {
    /// Stable code for users, scripts and the `delegate_error` event.
    pub fn code(&self) -> &'static str {
        match self {
            Self::UnknownBackend { .. } => "AGENT_UNKNOWN_BACKEND",
            Self::InvalidModel { .. } => "AGENT_INVALID_MODEL",
            Self::ModelUnresolved { .. } => "AGENT_MODEL_UNRESOLVED",
            Self::ModelTemplate { .. } => "AGENT_MODEL_TEMPLATE",
            Self::UnknownProvider { .. } => "AGENT_UNKNOWN_PROVIDER",
            Self::ProviderUnsupported { .. } => "AGENT_PROVIDER_UNSUPPORTED",
            Self::MissingCredential { .. } => "AGENT_MISSING_CREDENTIAL",
            Self::SubscriptionTokenRefused { .. } => "AGENT_SUBSCRIPTION_TOKEN_REFUSED",
            Self::ToolRefused { .. } => "AGENT_TOOL_REFUSED",
            Self::ToolUnavailable { .. } => "AGENT_TOOL_UNAVAILABLE",
            Self::ToolCollision { .. } => "AGENT_TOOL_COLLISION",
            Self::ToolFailed { .. } => "AGENT_TOOL_FAILED",
            Self::McpSpawnFailed { .. } => "AGENT_MCP_SPAWN_FAILED",
            Self::McpStartupTimeout { .. } => "AGENT_MCP_STARTUP_TIMEOUT",
            Self::McpServerFailed { .. } => "AGENT_MCP_SERVER_FAILED",
            Self::ToolDenied { .. } => "AGENT_TOOL_DENIED",
            Self::ToolPolicyDeniesAll { .. } => "AGENT_TOOL_POLICY_DENIES_ALL",
            Self::InvalidSchema { .. } => "AGENT_INVALID_SCHEMA",
            Self::ProviderStatus { .. } => "AGENT_PROVIDER_STATUS",
            Self::RetriesExhausted { .. } => "AGENT_RETRIES_EXHAUSTED",
            Self::ProviderTransport { .. } => "AGENT_PROVIDER_TRANSPORT",
            Self::ProviderGarbage { .. } => "AGENT_PROVIDER_GARBAGE",
            Self::ToolMaxStepsExceeded { .. } => "AGENT_TOOL_MAX_STEPS",
            Self::SchemaMismatch { .. } => "AGENT_SCHEMA_MISMATCH",
            Self::BudgetExceeded { .. } => "BUDGET_EXCEEDED",
            Self::Cancelled => "CANCELLED",
            Self::RunnerProtocol { .. } => "AGENT_RUNNER_PROTOCOL",
            Self::RunnerLineTooLong { .. } => "AGENT_RUNNER_LINE_TOO_LONG",
            Self::RunnerExited { .. } => "AGENT_RUNNER_EXITED",
            Self::RunnerBinaryUnavailable { .. } => "AGENT_RUNNER_BINARY_UNAVAILABLE",
            Self::CliMissing { .. } => "AGENT_CLI_MISSING",
            Self::ClaudeCode { .. } => "AGENT_CLAUDE_CODE_FAILED",
            Self::CodexRefused { .. } => "AGENT_CODEX_REFUSED",
            Self::Sandbox { .. } => "AGENT_SANDBOX_ERROR",
            Self::Io { .. } => "AGENT_IO_ERROR",
            Self::HttpSetup { .. } => "AGENT_HTTP_SETUP",
        }
    }

    /// Whether the failure is worth another attempt of the same call
    /// (transient provider trouble; never bad input).
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            Self::ProviderStatus { status, .. } => *status == 429 || *status >= 500,
            Self::ProviderTransport { .. } => true,
            _ => false,
        }
    }

    pub(crate) fn io(operation: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let operation = operation.into();
        move |source| Self::Io { operation, source }
    }
}

/// Cut `s` to at most `max` bytes on a character boundary, marking the cut.
pub(crate) fn bounded(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_ride_the_wire_and_come_back_typed() {
        let err = AgentError::ToolMaxStepsExceeded { max: 3 };
        let wire = serde_json::to_value(&err).expect("serialize");
        assert_eq!(wire["code"], "TOOL_MAX_STEPS_EXCEEDED");
        let back: AgentError = serde_json::from_value(wire).expect("deserialize");
        assert_eq!(back.code(), "AGENT_TOOL_MAX_STEPS");
        assert!(matches!(back, AgentError::ToolMaxStepsExceeded { max: 3 }));
    }

    #[test]
    fn host_only_variants_do_not_serialize() {
        let err = AgentError::Io {
            operation: "x".into(),
            source: std::io::Error::other("y"),
        };
        assert!(serde_json::to_value(&err).is_err());
    }

    #[test]
    fn bounded_cuts_on_char_boundary() {
        assert_eq!(bounded("héllo", 2), "h…");
        assert_eq!(bounded("abc", 5), "abc");
    }
}
