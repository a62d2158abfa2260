//! The neutral conversation model every provider speaks: who talks
//! ([`Role`]), what a message holds ([`Message`], [`Block`]), one model
//! call ([`ChatRequest`], with native [`StructuredOutput`]) and its answer
//! ([`ChatResponse`], [`StopReason`], [`Usage`]), and why a provider's body
//! did not decode into one ([`Decoded`]). What the client in
//! `provider/mod.rs` sends and returns and each wire format
//! (`anthropic`, `openai`) encodes and decodes; owns no HTTP and no wire
//! format.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::tools::ToolSpec;

/// Who speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The user (prompts, tool results).
    User,
    /// The model.
    Assistant,
}

/// One content block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// The model calls a tool.
    ToolUse {
        /// Call id (echoed by the result).
        id: String,
        /// Tool name.
        name: String,
        /// Input object.
        input: Value,
    },
    /// A tool's answer.
    ToolResult {
        /// The call it answers.
        tool_use_id: String,
        /// Output (or error text).
        content: String,
        /// Whether the call failed.
        is_error: bool,
    },
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Speaker.
    pub role: Role,
    /// Blocks.
    pub content: Vec<Block>,
}

impl Message {
    /// A user message with one text block.
    pub fn user_text(text: impl Into<String>) -> Self {
        Self {
            role: Role::User,
            content: vec![Block::Text { text: text.into() }],
        }
    }

    /// The concatenated text blocks.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for b in &self.content {
            if let Block::Text { text } = b {
                out.push_str(text);
            }
        }
        out
    }

    /// The tool calls, in order.
    pub fn tool_uses(&self) -> Vec<(&str, &str, &Value)> {
        self.content
            .iter()
            .filter_map(|b| match b {
                Block::ToolUse { id, name, input } => Some((id.as_str(), name.as_str(), input)),
                _ => None,
            })
            .collect()
    }
}

/// Native structured output (no tools offered): Anthropic gets a forced
/// tool whose input schema is the output schema; OpenAI a `json_schema`
/// response format.
#[derive(Debug, Clone, PartialEq)]
pub struct StructuredOutput {
    /// The name of the forced tool / response format.
    pub name: String,
    /// The JSON Schema.
    pub schema: Value,
}

/// The name of the synthetic structured-output tool (upstream's).
pub const STRUCTURED_OUTPUT_TOOL: &str = "structured_output";

/// One model call.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    /// Model id (no provider prefix).
    pub model: String,
    /// System prompt.
    pub system: Option<String>,
    /// Conversation.
    pub messages: Vec<Message>,
    /// Tools offered.
    pub tools: Vec<ToolSpec>,
    /// Output bound.
    pub max_tokens: u32,
    /// Whether `max_tokens` was set by the node (OpenAI: omitted otherwise).
    pub max_tokens_explicit: bool,
    /// Native structured output.
    pub structured: Option<StructuredOutput>,
    /// Stream the answer (server-sent events).
    pub stream: bool,
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The answer is complete.
    EndTurn,
    /// The model wants tool results.
    ToolUse,
    /// The output bound cut it.
    MaxTokens,
    /// Anything else, as the provider said it.
    Other(String),
}

impl StopReason {
    /// Event spelling.
    pub fn as_str(&self) -> &str {
        match self {
            Self::EndTurn => "end_turn",
            Self::ToolUse => "tool_use",
            Self::MaxTokens => "max_tokens",
            Self::Other(s) => s,
        }
    }
}

/// Token usage of one call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// Cost the provider reported (OpenRouter, LiteLLM), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

/// One model answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatResponse {
    /// The assistant message.
    pub message: Message,
    /// Why it stopped.
    pub stop: StopReason,
    /// Usage.
    pub usage: Usage,
}

/// Why a body did not become a response.
#[derive(Debug)]
pub(crate) enum Decoded {
    /// The provider reported an error inside a 200 (a stream `error` event).
    Status(u16, String),
    /// The body is not the wire format.
    Garbage(String),
}

impl From<String> for Decoded {
    fn from(s: String) -> Self {
        Self::Garbage(s)
    }
}

impl From<&str> for Decoded {
    fn from(s: &str) -> Self {
        Self::Garbage(s.to_owned())
    }
}

impl std::fmt::Display for Decoded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Status(s, m) => write!(f, "{s}: {m}"),
            Self::Garbage(d) => f.write_str(d),
        }
    }
}
