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
pub(crate) mod bedrock;
mod chat;
pub(crate) mod openai;
pub(crate) mod sse;

use std::collections::BTreeMap;

use serde_json::Value;

use crate::credentials::Redactor;
use crate::error::{AgentError, bounded};
use crate::model::{ModelSpec, Provider};

pub(crate) use chat::Decoded;
pub use chat::{
    Block, ChatRequest, ChatResponse, Message, Role, STRUCTURED_OUTPUT_TOOL, StopReason,
    StructuredOutput, Usage,
};

/// How a request authenticates. `Debug` never prints the secret.
#[derive(Clone)]
enum Auth {
    /// `x-api-key` (Anthropic).
    ApiKey(String),
    /// `Authorization: Bearer`.
    Bearer(String),
    /// AWS SigV4 (Bedrock).
    SigV4(bedrock::AwsKeys),
    /// A keyless gateway.
    None,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::ApiKey(_) => "ApiKey(***)",
            Self::Bearer(_) => "Bearer(***)",
            Self::SigV4(_) => "SigV4(***)",
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
        let region = bedrock::region(vars);
        let base_url = match (spec.provider, &region) {
            (Provider::Bedrock, Some(r)) => bedrock::endpoint(vars, r),
            (Provider::Bedrock, None) => {
                return Err(AgentError::MissingCredential {
                    provider: "bedrock".to_owned(),
                    variables: vec!["AWS_REGION".to_owned(), "AWS_DEFAULT_REGION".to_owned()],
                });
            }
            _ => var(spec.provider.base_url_var())
                .unwrap_or_else(|| spec.provider.default_base_url().to_owned())
                .trim_end_matches('/')
                .to_owned(),
        };
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
            // A Bedrock API key wins over SigV4, as in the AWS SDK.
            Provider::Bedrock => match (
                var("AWS_BEARER_TOKEN_BEDROCK"),
                var("AWS_ACCESS_KEY_ID"),
                var("AWS_SECRET_ACCESS_KEY"),
            ) {
                (Some(t), _, _) => Auth::Bearer(t),
                (None, Some(access_key_id), Some(secret_access_key)) => {
                    Auth::SigV4(bedrock::AwsKeys {
                        access_key_id,
                        secret_access_key,
                        session_token: var("AWS_SESSION_TOKEN"),
                        region: region.unwrap_or_default(),
                    })
                }
                _ => {
                    return Err(AgentError::MissingCredential {
                        provider: "bedrock".to_owned(),
                        variables: vec![
                            "AWS_ACCESS_KEY_ID".to_owned(),
                            "AWS_SECRET_ACCESS_KEY".to_owned(),
                            "AWS_PROFILE".to_owned(),
                            "AWS_BEARER_TOKEN_BEDROCK".to_owned(),
                        ],
                    });
                }
            },
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
        // Bedrock's stream is AWS's binary event stream: read whole.
        let stream = req.stream && self.provider != Provider::Bedrock;
        let (url, body) = match self.provider {
            Provider::Anthropic => (
                format!("{}/v1/messages", self.base_url),
                anthropic::request_body(req),
            ),
            Provider::OpenAi => (
                format!("{}/chat/completions", self.base_url),
                openai::request_body(req),
            ),
            Provider::Bedrock => (
                bedrock::invoke_url(&self.base_url, &req.model),
                bedrock::body(anthropic::request_body(req)),
            ),
        };
        let body = body.to_string();
        let mut builder = self
            .http
            .post(&url)
            .header(reqwest::header::CONTENT_TYPE, "application/json");
        builder = match &self.auth {
            Auth::ApiKey(k) => builder.header("x-api-key", k),
            Auth::Bearer(t) => builder.bearer_auth(t),
            Auth::SigV4(keys) => {
                let signed = bedrock::sign(
                    keys,
                    &url,
                    &[("content-type", "application/json")],
                    body.as_bytes(),
                    std::time::SystemTime::now(),
                )?;
                signed.into_iter().fold(builder, |b, (k, v)| b.header(k, v))
            }
            Auth::None => builder,
        };
        let builder = builder.body(body);
        let mut builder = builder;
        if self.provider == Provider::Anthropic {
            builder = builder.header("anthropic-version", anthropic::API_VERSION);
        }
        if stream {
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
        let decoded = if stream {
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
                Provider::Anthropic | Provider::Bedrock => anthropic::parse_response(&v),
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

enum StreamState {
    Anthropic(anthropic::StreamAccumulator),
    OpenAi(openai::StreamAccumulator),
}

impl StreamState {
    fn new(provider: Provider) -> Self {
        match provider {
            Provider::Anthropic | Provider::Bedrock => {
                Self::Anthropic(anthropic::StreamAccumulator::default())
            }
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
