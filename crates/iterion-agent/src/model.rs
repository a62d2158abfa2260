//! Model strings (`provider/model`) and what they imply: which wire
//! format the claw loop speaks, and a conservative price table for the
//! cost of a call when the provider does not report one.

use serde::{Deserialize, Serialize};

use crate::error::AgentError;

/// A provider the claw loop speaks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    /// The Anthropic Messages API (and Anthropic-compatible gateways).
    Anthropic,
    /// OpenAI chat completions (and vLLM, Ollama, LiteLLM, OpenRouter…).
    #[serde(rename = "openai")]
    OpenAi,
    /// Anthropic models on AWS Bedrock (`InvokeModel`, SigV4 or a Bedrock
    /// API key): `bedrock/<model-id>`.
    Bedrock,
}

impl Provider {
    /// The prefix in a model string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Anthropic => "anthropic",
            Self::OpenAi => "openai",
            Self::Bedrock => "bedrock",
        }
    }

    /// The public endpoint, when no `*_BASE_URL` overrides it.
    pub fn default_base_url(self) -> &'static str {
        match self {
            Self::Anthropic => "https://api.anthropic.com",
            Self::OpenAi => "https://api.openai.com/v1",
            // Per region: `https://bedrock-runtime.<region>.amazonaws.com`.
            Self::Bedrock => "",
        }
    }

    /// The variable that overrides the endpoint.
    pub fn base_url_var(self) -> &'static str {
        match self {
            Self::Anthropic => "ANTHROPIC_BASE_URL",
            Self::OpenAi => "OPENAI_BASE_URL",
            Self::Bedrock => "AWS_ENDPOINT_URL_BEDROCK_RUNTIME",
        }
    }
}

/// Prefixes upstream knows but this build does not speak (their clients
/// need cloud SDK signing: Google ADC, Azure AD).
const UNSUPPORTED_PROVIDERS: &[&str] = &["vertex", "foundry"];

/// A parsed `provider/model` string.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelSpec {
    /// The provider.
    pub provider: Provider,
    /// The model id sent in the request body (without the prefix: the
    /// APIs reject the prefixed form).
    pub model: String,
}

impl ModelSpec {
    /// Parse `provider/model`; the model part may itself contain `/`
    /// (OpenRouter ids such as `openai/meta-llama/llama-3`).
    pub fn parse(spec: &str) -> Result<Self, AgentError> {
        let Some((prefix, model)) = spec.split_once('/') else {
            return Err(AgentError::InvalidModel {
                model: spec.to_owned(),
            });
        };
        if prefix.is_empty() || model.is_empty() {
            return Err(AgentError::InvalidModel {
                model: spec.to_owned(),
            });
        }
        let provider = match prefix {
            "anthropic" => Provider::Anthropic,
            "openai" => Provider::OpenAi,
            "bedrock" => Provider::Bedrock,
            p if UNSUPPORTED_PROVIDERS.contains(&p) => {
                return Err(AgentError::ProviderUnsupported {
                    provider: p.to_owned(),
                });
            }
            p => {
                return Err(AgentError::UnknownProvider {
                    provider: p.to_owned(),
                    model: spec.to_owned(),
                });
            }
        };
        Ok(Self {
            provider,
            model: model.to_owned(),
        })
    }

    /// `provider/model` again.
    pub fn qualified(&self) -> String {
        format!("{}/{}", self.provider.as_str(), self.model)
    }
}

/// USD per million tokens, `(input, output)`: a small table of common
/// models (upstream `pkg/backend/cost`), used only when the provider does
/// not report a cost. An unknown model has no cost rather than a wrong one.
const PRICES: &[(&str, f64, f64)] = &[
    ("claude-opus-4-7", 15.0, 75.0),
    ("claude-opus-4-6", 15.0, 75.0),
    ("claude-opus-4-5", 15.0, 75.0),
    ("claude-opus-4", 15.0, 75.0),
    ("claude-sonnet-4-7", 3.0, 15.0),
    ("claude-sonnet-4-6", 3.0, 15.0),
    ("claude-sonnet-4-5", 3.0, 15.0),
    ("claude-sonnet-4", 3.0, 15.0),
    ("claude-haiku-4-5", 0.25, 1.25),
    ("gpt-5", 1.25, 10.0),
    ("gpt-5-mini", 0.25, 2.0),
    ("gpt-5.4", 1.5, 12.0),
    ("gpt-5.4-mini", 0.3, 2.4),
    ("gpt-5.4-nano", 0.15, 1.2),
    ("gpt-5.5", 2.0, 15.0),
    ("gpt-4o", 2.5, 10.0),
    ("gpt-4o-mini", 0.15, 0.6),
];

/// Estimated cost of a call, or `None` for a model not in the table.
pub fn estimate_cost_usd(model: &str, input_tokens: u64, output_tokens: u64) -> Option<f64> {
    let bare = model.rsplit('/').next().unwrap_or(model);
    PRICES.iter().find(|(m, _, _)| *m == bare).map(|(_, i, o)| {
        // Token counts stay far below 2^52; the conversion is exact.
        #[allow(clippy::cast_precision_loss)]
        let cost = (input_tokens as f64 * i + output_tokens as f64 * o) / 1_000_000.0;
        cost
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_table() {
        let ok = ModelSpec::parse("anthropic/claude-sonnet-4-6").expect("ok");
        assert_eq!(ok.provider, Provider::Anthropic);
        assert_eq!(ok.model, "claude-sonnet-4-6");
        let nested = ModelSpec::parse("openai/meta-llama/llama-3").expect("ok");
        assert_eq!(nested.model, "meta-llama/llama-3");
        let cases = [
            ("claude", "AGENT_INVALID_MODEL"),
            ("/x", "AGENT_INVALID_MODEL"),
            ("anthropic/", "AGENT_INVALID_MODEL"),
            ("mistral/large", "AGENT_UNKNOWN_PROVIDER"),
            ("vertex/claude", "AGENT_PROVIDER_UNSUPPORTED"),
        ];
        for (input, code) in cases {
            assert_eq!(
                ModelSpec::parse(input).expect_err(input).code(),
                code,
                "{input}"
            );
        }
    }

    #[test]
    fn cost_known_and_unknown() {
        let c =
            estimate_cost_usd("anthropic/claude-sonnet-4-6", 1_000_000, 1_000_000).expect("known");
        assert!((c - 18.0).abs() < 1e-9);
        assert!(estimate_cost_usd("openai/some-local-model", 10, 10).is_none());
    }
}
