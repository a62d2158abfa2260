//! What the engine hands an agent backend ([`AgentTask`]: prompts already
//! rendered, the node's tools, schema, budget and session) and what it gets
//! back ([`AgentOutcome`]). Both serialize: the task is the `task` message
//! of the runner protocol, the outcome its `result`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::backend::BackendName;
use crate::provider::{Message, Usage};

/// Upstream's `tool_max_steps` default.
pub const DEFAULT_TOOL_MAX_STEPS: u32 = 5;
/// Output bound of a model call when the node sets none.
pub const DEFAULT_MAX_TOKENS: u32 = 8192;

/// One agent, judge or LLM-router node, ready to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentTask {
    /// The node.
    pub node_id: String,
    /// `provider/model` (required by claw; optional for claude_code).
    #[serde(default)]
    pub model: Option<String>,
    /// Rendered system prompt.
    #[serde(default)]
    pub system_prompt: Option<String>,
    /// Rendered user prompt.
    pub user_prompt: String,
    /// The node's `tools:` (names, checked against the placement table).
    #[serde(default)]
    pub tools: Vec<String>,
    /// The effective `tool_policy:` patterns (the node's, else the
    /// workflow's); `None` is open.
    #[serde(default)]
    pub tool_policy: Option<Vec<String>>,
    /// Model turns allowed (default [`DEFAULT_TOOL_MAX_STEPS`]).
    #[serde(default)]
    pub tool_max_steps: Option<u32>,
    /// Output tokens per call.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// JSON Schema the output must match.
    #[serde(default)]
    pub output_schema: Option<Value>,
    /// Fresh conversation, or continue a previous one.
    #[serde(default)]
    pub session: SessionSpec,
    /// Token/cost limits of the run and what is already spent.
    #[serde(default)]
    pub budget: Option<BudgetSpec>,
    /// `reasoning_effort` (claude_code: `CLAUDE_CODE_EFFORT_LEVEL`).
    #[serde(default)]
    pub reasoning_effort: Option<String>,
    /// Stream model answers (server-sent events); default on.
    #[serde(default = "yes")]
    pub stream: bool,
    /// Retries of transient provider failures.
    #[serde(default)]
    pub retry: RetrySettings,
}

fn yes() -> bool {
    true
}

impl AgentTask {
    /// A task with defaults for everything but the node and the prompt.
    pub fn new(node_id: impl Into<String>, user_prompt: impl Into<String>) -> Self {
        Self {
            node_id: node_id.into(),
            model: None,
            system_prompt: None,
            user_prompt: user_prompt.into(),
            tools: Vec::new(),
            tool_policy: None,
            tool_max_steps: None,
            max_tokens: None,
            output_schema: None,
            session: SessionSpec::Fresh,
            budget: None,
            reasoning_effort: None,
            stream: true,
            retry: RetrySettings::default(),
        }
    }

    /// The node's tool policy.
    pub fn policy(&self) -> crate::tools::ToolPolicy {
        self.tool_policy.clone().map_or_else(
            crate::tools::ToolPolicy::open,
            crate::tools::ToolPolicy::new,
        )
    }

    /// The effective step bound.
    pub fn max_steps(&self) -> u32 {
        self.tool_max_steps
            .filter(|n| *n > 0)
            .unwrap_or(DEFAULT_TOOL_MAX_STEPS)
    }
}

/// Session handling (upstream `session: fresh | inherit`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum SessionSpec {
    /// A new conversation.
    #[default]
    Fresh,
    /// Continue the previous node's conversation.
    Inherit {
        /// claude_code: the CLI session to `--resume`.
        #[serde(default)]
        session_id: Option<String>,
        /// claw: the prior messages, prepended to this turn.
        #[serde(default)]
        messages: Vec<Message>,
    },
}

/// Run-level token and cost limits, and the usage already recorded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct BudgetSpec {
    /// Token limit of the run.
    #[serde(default)]
    pub max_tokens: Option<u64>,
    /// Cost limit of the run (USD).
    #[serde(default)]
    pub max_cost_usd: Option<f64>,
    /// Tokens spent before this node.
    #[serde(default)]
    pub used_tokens: u64,
    /// Cost spent before this node.
    #[serde(default)]
    pub used_cost_usd: f64,
}

/// Retry policy of transient provider failures (upstream: 3 attempts,
/// 1 s base, exponential with 0.5–1.5× jitter, 60 s ceiling).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetrySettings {
    /// Attempts including the first.
    pub max_attempts: u32,
    /// Base delay.
    pub backoff_base_ms: u64,
}

impl Default for RetrySettings {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            backoff_base_ms: 1000,
        }
    }
}

impl RetrySettings {
    /// Delay before retry `n` (0-based).
    pub fn delay(&self, n: u32) -> std::time::Duration {
        let base = self
            .backoff_base_ms
            .saturating_mul(1u64 << n.min(20))
            .min(60_000);
        let jitter: f64 = rand::random_range(0.5..1.5);
        // base ≤ 60 000: the float round trip is exact enough for a delay.
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let ms = (base as f64 * jitter) as u64;
        std::time::Duration::from_millis(ms)
    }
}

/// What an agent node produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentOutcome {
    /// The backend that ran it.
    pub backend: BackendName,
    /// The output object: schema-shaped, or `{"text": …}` without a schema.
    pub output: Value,
    /// The final assistant text.
    pub text: String,
    /// Tokens (and cost, when known) of every call.
    pub usage: Usage,
    /// Model calls made (claude_code: turns).
    pub steps: u32,
    /// Whether a repair/formatting turn produced the output.
    pub formatting_pass_used: bool,
    /// claude_code: the CLI session id (for `session: inherit`).
    #[serde(default)]
    pub session_id: Option<String>,
    /// claw: the conversation (for `session: inherit`).
    #[serde(default)]
    pub messages: Vec<Message>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_wire_round_trip() {
        let t: AgentTask =
            serde_json::from_value(serde_json::json!({"node_id": "n", "user_prompt": "p"}))
                .expect("decode");
        assert!(t.stream);
        assert_eq!(t.max_steps(), DEFAULT_TOOL_MAX_STEPS);
        assert_eq!(t.session, SessionSpec::Fresh);
        let back: AgentTask =
            serde_json::from_value(serde_json::to_value(&t).expect("encode")).expect("decode");
        assert_eq!(back, t);
    }

    #[test]
    fn retry_delay_is_bounded() {
        let r = RetrySettings {
            max_attempts: 3,
            backoff_base_ms: 1000,
        };
        for n in 0..30 {
            let d = r.delay(n);
            assert!(d <= std::time::Duration::from_secs(90), "{n}: {d:?}");
        }
        assert!(r.delay(0) >= std::time::Duration::from_millis(500));
    }
}
