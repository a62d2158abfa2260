//! Provider clients: one neutral conversation model ([`Message`],
//! [`Block`]) spoken to the Anthropic Messages API ([`anthropic`]) and to
//! OpenAI chat completions ([`openai`], what vLLM, Ollama, LiteLLM and
//! OpenRouter serve), streaming (server-sent events) or not.
//!
//! A client makes exactly one HTTP call per [`ProviderClient::chat`];
//! retrying is the loop's decision ([`crate::claw`]), classified by
//! [`AgentError::is_transient`]. Every text taken from a provider's error
//! body passes through the [`Redactor`] before it becomes an error.

pub(crate) mod anthropic;
pub(crate) mod openai;
pub(crate) mod sse;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::credentials::Redactor;
use crate::error::{AgentError, bounded};
use crate::model::{ModelSpec, Provider};
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

/// How a request authenticates. `Debug` never prints the secret.
#[derive(Clone)]
enum Auth {
    /// `x-api-key` (Anthropic).
    ApiKey(String),
    /// `Authorization: Bearer`.
    Bearer(String),
    /// A keyless gateway.
    None,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::ApiKey(_) => "ApiKey(***)",
            Self::Bearer(_) => "Bearer(***)",
            Self::None => "None",
        })
    }
}

/// A client for one provider.
#[derive(Debug, Clone)]
pub struct ProviderClient {
    provider: Provider,
    base_url: String,
    auth: Auth,
    http: reqwest::Client,
    redactor: Redactor,
}

impl ProviderClient {
    /// A client for `spec` from the provider's variables (as returned by
    /// [`crate::credentials::ProviderCredentials::for_provider`]).
    pub fn new(
        spec: &ModelSpec,
        vars: &BTreeMap<String, String>,
        http: reqwest::Client,
        redactor: Redactor,
    ) -> Result<Self, AgentError> {
        let var = |n: &str| vars.get(n).filter(|v| !v.is_empty()).cloned();
        let base_url = var(spec.provider.base_url_var())
            .unwrap_or_else(|| spec.provider.default_base_url().to_owned())
            .trim_end_matches('/')
            .to_owned();
        reqwest::Url::parse(&base_url).map_err(|e| AgentError::HttpSetup {
            detail: format!("{} is not a URL: {e}", spec.provider.base_url_var()),
        })?;
        let auth = match spec.provider {
            Provider::Anthropic => match (var("ANTHROPIC_API_KEY"), var("ANTHROPIC_AUTH_TOKEN")) {
                (Some(k), _) => Auth::ApiKey(k),
                (None, Some(t)) => Auth::Bearer(t),
                (None, None) => Auth::None,
            },
            Provider::OpenAi => var("OPENAI_API_KEY").map_or(Auth::None, Auth::Bearer),
        };
        Ok(Self {
            provider: spec.provider,
            base_url,
            auth,
            http,
            redactor,
        })
    }

    /// The provider.
    pub fn provider(&self) -> Provider {
        self.provider
    }

    /// One model call.
    pub async fn chat(&self, req: &ChatRequest) -> Result<ChatResponse, AgentError> {
        let (url, body) = match self.provider {
            Provider::Anthropic => (
                format!("{}/v1/messages", self.base_url),
                anthropic::request_body(req),
            ),
            Provider::OpenAi => (
                format!("{}/chat/completions", self.base_url),
                openai::request_body(req),
            ),
        };
        let mut builder = self
            .http
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string());
        builder = match (&self.auth, self.provider) {
            (Auth::ApiKey(k), _) => builder.header("x-api-key", k),
            (Auth::Bearer(t), _) => builder.bearer_auth(t),
            (Auth::None, _) => builder,
        };
        if self.provider == Provider::Anthropic {
            builder = builder.header("anthropic-version", anthropic::API_VERSION);
        }
        if req.stream {
            builder = builder.header(reqwest::header::ACCEPT, "text/event-stream");
        }
        let resp = builder.send().await.map_err(|e| self.transport(&e))?;
        let status = resp.status();
        if !status.is_success() {
            let text = read_bounded(resp, 8 * 1024).await;
            return Err(AgentError::ProviderStatus {
                provider: self.provider.as_str().to_owned(),
                status: status.as_u16(),
                message: self.redactor.redact(&error_message(&text)),
            });
        }
        let decoded = if req.stream {
            self.read_stream(resp).await?
        } else {
            let bytes = resp.bytes().await.map_err(|e| self.transport(&e))?;
            let value: Result<Value, Decoded> = serde_json::from_slice(&bytes).map_err(|e| {
                Decoded::Garbage(format!(
                    "not JSON ({e}): {}",
                    bounded(&String::from_utf8_lossy(&bytes), 200)
                ))
            });
            value.and_then(|v| match self.provider {
                Provider::Anthropic => anthropic::parse_response(&v),
                Provider::OpenAi => openai::parse_response(&v),
            })
        };
        decoded.map_err(|d| match d {
            Decoded::Status(status, message) => AgentError::ProviderStatus {
                provider: self.provider.as_str().to_owned(),
                status,
                message: self.redactor.redact(&message),
            },
            Decoded::Garbage(detail) => self.garbage(&detail),
        })
    }

    async fn read_stream(
        &self,
        mut resp: reqwest::Response,
    ) -> Result<Result<ChatResponse, Decoded>, AgentError> {
        let mut decoder = sse::Decoder::default();
        let mut state = StreamState::new(self.provider);
        while let Some(chunk) = resp.chunk().await.map_err(|e| self.transport(&e))? {
            for event in decoder.feed(&chunk) {
                if let Err(d) = state.apply(&event) {
                    return Ok(Err(d));
                }
            }
        }
        for event in decoder.finish() {
            if let Err(d) = state.apply(&event) {
                return Ok(Err(d));
            }
        }
        Ok(state.finish())
    }

    fn transport(&self, e: &reqwest::Error) -> AgentError {
        // reqwest's Display names the URL; with the proxy token kept out of
        // URLs (see `http`), only the redactor's secrets could appear.
        let mut msg = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            msg.push_str(": ");
            msg.push_str(&s.to_string());
            source = s.source();
        }
        AgentError::ProviderTransport {
            provider: self.provider.as_str().to_owned(),
            message: self.redactor.redact(&bounded(&msg, 500)),
        }
    }

    fn garbage(&self, detail: &impl std::fmt::Display) -> AgentError {
        AgentError::ProviderGarbage {
            provider: self.provider.as_str().to_owned(),
            detail: self.redactor.redact(&bounded(&detail.to_string(), 300)),
        }
    }
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

enum StreamState {
    Anthropic(anthropic::StreamAccumulator),
    OpenAi(openai::StreamAccumulator),
}

impl StreamState {
    fn new(provider: Provider) -> Self {
        match provider {
            Provider::Anthropic => Self::Anthropic(anthropic::StreamAccumulator::default()),
            Provider::OpenAi => Self::OpenAi(openai::StreamAccumulator::default()),
        }
    }

    fn apply(&mut self, event: &sse::Event) -> Result<(), Decoded> {
        match self {
            Self::Anthropic(a) => a.apply(event),
            Self::OpenAi(o) => o.apply(event),
        }
    }

    fn finish(self) -> Result<ChatResponse, Decoded> {
        match self {
            Self::Anthropic(a) => a.finish(),
            Self::OpenAi(o) => o.finish(),
        }
    }
}

async fn read_bounded(mut resp: reqwest::Response, max: usize) -> String {
    let mut body = Vec::new();
    while let Ok(Some(chunk)) = resp.chunk().await {
        body.extend_from_slice(&chunk[..chunk.len().min(max.saturating_sub(body.len()))]);
        if body.len() >= max {
            break;
        }
    }
    String::from_utf8_lossy(&body).into_owned()
}

/// The `error.message` of a JSON error body, or the body itself (bounded).
fn error_message(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| {
            v.pointer("/error/message")
                .or_else(|| v.get("message"))
                .or_else(|| v.get("error"))
                .and_then(Value::as_str)
                .map(ToOwned::to_owned)
        })
        .unwrap_or_else(|| bounded(body.trim(), 300))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// A prompt, one tool call and its result: the fixture both wire
    /// formats' request tests encode.
    pub(crate) fn sample_conversation(result_is_error: bool) -> Vec<Message> {
        vec![
            Message::user_text("hi"),
            Message {
                role: Role::Assistant,
                content: vec![Block::ToolUse {
                    id: "t1".into(),
                    name: "bash".into(),
                    input: json!({"command": "true"}),
                }],
            },
            Message {
                role: Role::User,
                content: vec![Block::ToolResult {
                    tool_use_id: "t1".into(),
                    content: "ok".into(),
                    is_error: result_is_error,
                }],
            },
        ]
    }

    #[test]
    fn error_message_prefers_json_message() {
        assert_eq!(
            error_message(
                r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#
            ),
            "slow down"
        );
        assert_eq!(error_message(r#"{"error":"bad"}"#), "bad");
        assert_eq!(error_message("<html>oops</html>"), "<html>oops</html>");
    }

    #[test]
    fn auth_debug_hides_secret() {
        let a = Auth::ApiKey("sk-ant-secret".into());
        assert_eq!(format!("{a:?}"), "ApiKey(***)");
    }
}
