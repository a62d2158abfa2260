//! Provider credentials: the one function that collects them from a host
//! environment snapshot ([`ProviderCredentials::collect`]), the subset a
//! backend or provider needs ([`ProviderCredentials::for_provider`],
//! [`ProviderCredentials::for_claude_code`]), the check that refuses a
//! missing one by naming its variable, and the guard that refuses a Claude
//! subscription OAuth token to claw (upstream `GuardThirdPartyOAuth`).
//!
//! What it hands out travels on an exec's env only — never argv, never a
//! container's create-time env, never an event: the [`Redactor`] built from
//! the same set scrubs any text that leaves an agent.

use std::collections::BTreeMap;

use crate::env::EnvSnapshot;
use crate::error::AgentError;
use crate::model::Provider;

/// Upstream's `providerCredentialEnvVars`, plus the Anthropic bearer token
/// and the two base URLs an operator points at a gateway.
pub const PROVIDER_CREDENTIAL_VARS: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "AZURE_OPENAI_API_KEY",
    "AZURE_OPENAI_ENDPOINT",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "GROQ_API_KEY",
    "DEEPSEEK_API_KEY",
    "MISTRAL_API_KEY",
    "BEDROCK_REGION",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_BEARER_TOKEN_BEDROCK",
    "AWS_ENDPOINT_URL_BEDROCK_RUNTIME",
    "AWS_ENDPOINT_URL",
];

/// Credentials only the claude CLI may use (a subscription token, a
/// seeded config dir).
pub const CLAUDE_CODE_ONLY_VARS: &[&str] = &["CLAUDE_CODE_OAUTH_TOKEN", "CLAUDE_CONFIG_DIR"];

/// Variables naming an endpoint rather than holding a secret.
const NON_SECRET_VARS: &[&str] = &[
    "ANTHROPIC_BASE_URL",
    "OPENAI_BASE_URL",
    "AZURE_OPENAI_ENDPOINT",
    "BEDROCK_REGION",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ENDPOINT_URL_BEDROCK_RUNTIME",
    "AWS_ENDPOINT_URL",
    "CLAUDE_CONFIG_DIR",
];

/// Prefix of a Claude subscription (Pro/Max) OAuth access token.
const SUBSCRIPTION_TOKEN_PREFIX: &str = "sk-ant-oat";

/// The provider variables present in a host snapshot. `Debug` prints
/// names only.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ProviderCredentials {
    vars: BTreeMap<String, String>,
}

impl std::fmt::Debug for ProviderCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.vars.keys()).finish()
    }
}

impl ProviderCredentials {
    /// Collect every known provider variable from `env` (empty values are
    /// "unset"). The one place that decides which host variables may
    /// reach an agent.
    pub fn collect(env: &EnvSnapshot) -> Self {
        let mut vars: BTreeMap<String, String> = PROVIDER_CREDENTIAL_VARS
            .iter()
            .chain(CLAUDE_CODE_ONLY_VARS)
            .filter_map(|name| env.get(name).map(|v| ((*name).to_owned(), v.to_owned())))
            .collect();
        crate::provider::bedrock::profile_into(env, &mut vars);
        Self { vars }
    }

    /// A value.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }

    /// Names present.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.vars.keys().map(String::as_str)
    }

    /// The variables claw needs for `provider`, checked: a missing key is
    /// an error naming the variable; a subscription token without an API
    /// key is refused. This is the exec env of an in-box runner.
    pub fn for_provider(&self, provider: Provider) -> Result<BTreeMap<String, String>, AgentError> {
        let pick = |names: &[&str]| -> BTreeMap<String, String> {
            names
                .iter()
                .filter_map(|n| self.vars.get(*n).map(|v| ((*n).to_owned(), v.clone())))
                .collect()
        };
        match provider {
            Provider::Anthropic => {
                self.guard_subscription_token()?;
                let out = pick(&[
                    "ANTHROPIC_API_KEY",
                    "ANTHROPIC_AUTH_TOKEN",
                    "ANTHROPIC_BASE_URL",
                ]);
                if !out.contains_key("ANTHROPIC_API_KEY")
                    && !out.contains_key("ANTHROPIC_AUTH_TOKEN")
                {
                    return Err(missing(
                        "anthropic",
                        &["ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"],
                    ));
                }
                Ok(out)
            }
            Provider::Bedrock => {
                let out = pick(&[
                    "AWS_REGION",
                    "AWS_DEFAULT_REGION",
                    "AWS_ACCESS_KEY_ID",
                    "AWS_SECRET_ACCESS_KEY",
                    "AWS_SESSION_TOKEN",
                    "AWS_BEARER_TOKEN_BEDROCK",
                    "AWS_ENDPOINT_URL_BEDROCK_RUNTIME",
                    "AWS_ENDPOINT_URL",
                ]);
                let keys = out.contains_key("AWS_ACCESS_KEY_ID")
                    && out.contains_key("AWS_SECRET_ACCESS_KEY");
                if !keys && !out.contains_key("AWS_BEARER_TOKEN_BEDROCK") {
                    return Err(missing(
                        "bedrock",
                        &[
                            "AWS_ACCESS_KEY_ID",
                            "AWS_SECRET_ACCESS_KEY",
                            "AWS_PROFILE",
                            "AWS_BEARER_TOKEN_BEDROCK",
                        ],
                    ));
                }
                if !out.contains_key("AWS_REGION") && !out.contains_key("AWS_DEFAULT_REGION") {
                    return Err(missing("bedrock", &["AWS_REGION", "AWS_DEFAULT_REGION"]));
                }
                Ok(out)
            }
            Provider::OpenAi => {
                let out = pick(&["OPENAI_API_KEY", "OPENAI_BASE_URL"]);
                // A self-hosted gateway (vLLM, Ollama) behind OPENAI_BASE_URL
                // may take no key; the public API always does.
                if out.is_empty() {
                    return Err(missing("openai", &["OPENAI_API_KEY", "OPENAI_BASE_URL"]));
                }
                Ok(out)
            }
        }
    }

    /// The variables the claude CLI may use, checked against `has_login`
    /// (a host login the CLI finds by itself, e.g. `~/.claude` on an
    /// unsandboxed run).
    pub fn for_claude_code(&self, has_login: bool) -> Result<BTreeMap<String, String>, AgentError> {
        let out: BTreeMap<String, String> = [
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_AUTH_TOKEN",
            "ANTHROPIC_BASE_URL",
            "CLAUDE_CODE_OAUTH_TOKEN",
            "CLAUDE_CONFIG_DIR",
        ]
        .iter()
        .filter_map(|n| self.vars.get(*n).map(|v| ((*n).to_owned(), v.clone())))
        .collect();
        let has_secret = out.keys().any(|k| k != "ANTHROPIC_BASE_URL");
        if !has_secret && !has_login {
            return Err(missing(
                "claude_code",
                &[
                    "ANTHROPIC_API_KEY",
                    "ANTHROPIC_AUTH_TOKEN",
                    "CLAUDE_CODE_OAUTH_TOKEN",
                    "CLAUDE_CONFIG_DIR",
                ],
            ));
        }
        Ok(out)
    }

    /// Upstream `GuardThirdPartyOAuth`: the Claude subscription is scoped to
    /// the official CLI, so claw refuses to drive Anthropic with it when no
    /// API key is present.
    fn guard_subscription_token(&self) -> Result<(), AgentError> {
        let subscription = |v: &str| v.starts_with(SUBSCRIPTION_TOKEN_PREFIX);
        let refuse = |variable: &str| {
            Err(AgentError::SubscriptionTokenRefused {
                variable: variable.to_owned(),
            })
        };
        match self.get("ANTHROPIC_API_KEY") {
            Some(k) if !subscription(k) => return Ok(()),
            Some(_) => return refuse("ANTHROPIC_API_KEY"),
            None => {}
        }
        match self.get("ANTHROPIC_AUTH_TOKEN") {
            Some(t) if subscription(t) => refuse("ANTHROPIC_AUTH_TOKEN"),
            // A gateway bearer token (z.ai, LiteLLM) authenticates claw.
            Some(_) => Ok(()),
            None if self.get("CLAUDE_CODE_OAUTH_TOKEN").is_some() => {
                refuse("CLAUDE_CODE_OAUTH_TOKEN")
            }
            None => Ok(()),
        }
    }

    /// The credentials a sandboxed agent would carry that can be bound to
    /// their provider's host (issue 17 item 5): the Anthropic keys (API
    /// key, bearer token, the CLI's subscription token) to the host of
    /// `ANTHROPIC_BASE_URL` or the public API, the OpenAI key to the host
    /// of `OPENAI_BASE_URL` or the public API — only when that URL is
    /// HTTPS (a plain `http://` gateway gets the value: the proxy cannot
    /// vouch for a host it does not verify). Exactly the variables
    /// [`Self::for_provider`] and [`Self::for_claude_code`] hand out,
    /// endpoints and the config dir aside.
    pub fn bindable(&self) -> Vec<iterion_core::agent::ProviderSecret> {
        let groups: [(Provider, &[&str]); 2] = [
            (
                Provider::Anthropic,
                &[
                    "ANTHROPIC_API_KEY",
                    "ANTHROPIC_AUTH_TOKEN",
                    "CLAUDE_CODE_OAUTH_TOKEN",
                ],
            ),
            (Provider::OpenAi, &["OPENAI_API_KEY"]),
        ];
        let mut out = Vec::new();
        for (provider, variables) in groups {
            let base = self
                .get(provider.base_url_var())
                .unwrap_or(provider.default_base_url());
            let Some((host, port)) = https_host(base) else {
                continue;
            };
            for variable in variables {
                if let Some(value) = self.get(variable) {
                    out.push(
                        iterion_core::agent::ProviderSecret::new(*variable, host.clone(), value)
                            .on_port(port),
                    );
                }
            }
        }
        out
    }

    /// `vars` (from [`Self::for_provider`] or [`Self::for_claude_code`])
    /// with each value that has a placeholder replaced by it: what a
    /// sandboxed agent carries when the run binds its provider keys.
    pub fn with_placeholders(
        mut vars: BTreeMap<String, String>,
        placeholders: &BTreeMap<String, String>,
    ) -> BTreeMap<String, String> {
        for (name, value) in &mut vars {
            if let Some(p) = placeholders.get(name) {
                value.clone_from(p);
            }
        }
        vars
    }

    /// A redactor for every secret value in this set.
    pub fn redactor(&self) -> Redactor {
        Redactor::new(
            self.vars
                .iter()
                .filter(|(k, _)| !NON_SECRET_VARS.contains(&k.as_str()))
                .map(|(_, v)| v.clone()),
        )
    }
}

/// The host (IPv6 without brackets) and port (443 unless the URL names
/// another) of an `https://` URL; `None` for any other scheme or an
/// unparsable URL.
fn https_host(url: &str) -> Option<(String, u16)> {
    let parsed = reqwest::Url::parse(url.trim()).ok()?;
    if parsed.scheme() != "https" {
        return None;
    }
    let host = parsed.host_str()?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let port = parsed.port_or_known_default().unwrap_or(443);
    (!host.is_empty()).then(|| (host.to_ascii_lowercase(), port))
}

fn missing(provider: &str, variables: &[&str]) -> AgentError {
    AgentError::MissingCredential {
        provider: provider.to_owned(),
        variables: variables.iter().map(|v| (*v).to_owned()).collect(),
    }
}

/// Replaces secret values in text that leaves an agent (events, errors,
/// tool output forwarded to logs).
#[derive(Clone, Default)]
pub struct Redactor {
    secrets: Vec<String>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Redactor({} secrets)", self.secrets.len())
    }
}

/// What a redacted secret becomes.
pub const REDACTED: &str = "***";

impl Redactor {
    /// A redactor for these values. Values shorter than 6 bytes are left
    /// alone: replacing `abc` everywhere would mangle text and protect nothing.
    pub fn new(values: impl IntoIterator<Item = String>) -> Self {
        let mut secrets: Vec<String> = values.into_iter().filter(|v| v.len() >= 6).collect();
        // Longest first, so a secret containing another is replaced whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Self { secrets }
    }

    /// `text` with every secret replaced by [`REDACTED`].
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for s in &self.secrets {
            if out.contains(s.as_str()) {
                out = out.replace(s.as_str(), REDACTED);
            }
        }
        out
    }

    /// Redact every string inside a JSON value.
    pub fn redact_json(&self, value: &mut serde_json::Value) {
        match value {
            serde_json::Value::String(s) if self.secrets.iter().any(|x| s.contains(x.as_str())) => {
                *s = self.redact(s);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(|v| self.redact_json(v)),
            serde_json::Value::Object(map) => map.values_mut().for_each(|v| self.redact_json(v)),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> EnvSnapshot {
        pairs.iter().map(|(k, v)| (*k, *v)).collect()
    }

    #[test]
    fn collect_keeps_only_provider_variables() {
        let creds = ProviderCredentials::collect(&env(&[
            ("ANTHROPIC_API_KEY", "sk-ant-api-1"),
            ("HOME", "/root"),
            ("GITHUB_TOKEN", "ghp_x"),
            ("OPENAI_API_KEY", ""),
        ]));
        assert_eq!(creds.names().collect::<Vec<_>>(), vec!["ANTHROPIC_API_KEY"]);
    }

    #[test]
    fn provider_subset_is_least_privilege() {
        let creds = ProviderCredentials::collect(&env(&[
            ("ANTHROPIC_API_KEY", "sk-ant-api-1"),
            ("OPENAI_API_KEY", "sk-openai-1"),
            ("AWS_SECRET_ACCESS_KEY", "aws-secret-1"),
        ]));
        let a = creds.for_provider(Provider::Anthropic).expect("anthropic");
        assert_eq!(a.keys().collect::<Vec<_>>(), vec!["ANTHROPIC_API_KEY"]);
        let o = creds.for_provider(Provider::OpenAi).expect("openai");
        assert_eq!(o.keys().collect::<Vec<_>>(), vec!["OPENAI_API_KEY"]);
    }

    #[test]
    fn missing_key_names_the_variable_not_a_value() {
        let creds = ProviderCredentials::collect(&env(&[("OPENAI_API_KEY", "sk-openai-1")]));
        let err = creds
            .for_provider(Provider::Anthropic)
            .expect_err("missing");
        assert_eq!(err.code(), "AGENT_MISSING_CREDENTIAL");
        let msg = err.to_string();
        assert!(msg.contains("ANTHROPIC_API_KEY"), "{msg}");
        assert!(!msg.contains("sk-openai-1"));
    }

    #[test]
    fn openai_gateway_without_key_is_allowed() {
        let creds =
            ProviderCredentials::collect(&env(&[("OPENAI_BASE_URL", "http://10.0.0.2:11434/v1")]));
        assert!(creds.for_provider(Provider::OpenAi).is_ok());
    }

    #[test]
    fn subscription_token_guard_table() {
        let cases: &[(&[(&str, &str)], bool)] = &[
            (&[("ANTHROPIC_API_KEY", "sk-ant-api03-x")], true),
            (&[("ANTHROPIC_API_KEY", "sk-ant-oat01-x")], false),
            (&[("ANTHROPIC_AUTH_TOKEN", "sk-ant-oat01-x")], false),
            (&[("CLAUDE_CODE_OAUTH_TOKEN", "sk-ant-oat01-x")], false),
            (
                &[
                    ("CLAUDE_CODE_OAUTH_TOKEN", "sk-ant-oat01-x"),
                    ("ANTHROPIC_API_KEY", "sk-ant-api03-x"),
                ],
                true,
            ),
            // A gateway bearer token (z.ai, LiteLLM) is not a subscription.
            (&[("ANTHROPIC_AUTH_TOKEN", "gw-token-123")], true),
        ];
        for (vars, ok) in cases {
            let creds = ProviderCredentials::collect(&env(vars));
            let got = creds.for_provider(Provider::Anthropic);
            assert_eq!(got.is_ok(), *ok, "{vars:?}");
            if let Err(e) = got {
                assert_eq!(e.code(), "AGENT_SUBSCRIPTION_TOKEN_REFUSED");
                assert!(!e.to_string().contains("sk-ant-oat01-x"));
            }
        }
    }

    #[test]
    fn claude_code_accepts_subscription_and_config_dir() {
        let creds =
            ProviderCredentials::collect(&env(&[("CLAUDE_CODE_OAUTH_TOKEN", "sk-ant-oat01-x")]));
        assert!(creds.for_claude_code(false).is_ok());
        let none = ProviderCredentials::collect(&env(&[("ANTHROPIC_BASE_URL", "http://gw")]));
        assert!(none.for_claude_code(false).is_err());
        assert!(none.for_claude_code(true).is_ok());
    }

    #[test]
    fn bindable_keys_follow_their_provider_https_host() {
        let hosts = |pairs: &[(&str, &str)]| -> Vec<(String, String, u16)> {
            ProviderCredentials::collect(&env(pairs))
                .bindable()
                .into_iter()
                .map(|s| (s.variable.clone(), s.host.clone(), s.port))
                .collect()
        };
        let pair = |a: &str, b: &str| (a.to_owned(), b.to_owned(), 443);
        let on = |a: &str, b: &str, port: u16| (a.to_owned(), b.to_owned(), port);
        // The public APIs by default.
        assert_eq!(
            hosts(&[
                ("ANTHROPIC_API_KEY", "sk-ant-api03-x"),
                ("OPENAI_API_KEY", "sk-o"),
                ("AWS_SECRET_ACCESS_KEY", "aws"),
            ]),
            vec![
                pair("ANTHROPIC_API_KEY", "api.anthropic.com"),
                pair("OPENAI_API_KEY", "api.openai.com"),
            ]
        );
        // A gateway over HTTPS: its host (case-folded) and port; the
        // subscription token and the bearer token go with the Anthropic keys.
        assert_eq!(
            hosts(&[
                (
                    "ANTHROPIC_BASE_URL",
                    "https://GW.example.com:8443/anthropic"
                ),
                ("ANTHROPIC_AUTH_TOKEN", "gw-token-123456"),
                ("CLAUDE_CODE_OAUTH_TOKEN", "sk-ant-oat01-x"),
                ("OPENAI_BASE_URL", "https://10.0.0.7/v1"),
                ("OPENAI_API_KEY", "sk-o"),
            ]),
            vec![
                on("ANTHROPIC_AUTH_TOKEN", "gw.example.com", 8443),
                on("CLAUDE_CODE_OAUTH_TOKEN", "gw.example.com", 8443),
                pair("OPENAI_API_KEY", "10.0.0.7"),
            ]
        );
        // Plain http, or an unparsable URL: nothing bindable.
        assert!(
            hosts(&[
                ("ANTHROPIC_BASE_URL", "http://127.0.0.1:8080"),
                ("ANTHROPIC_API_KEY", "k"),
                ("OPENAI_BASE_URL", "not a url"),
                ("OPENAI_API_KEY", "k"),
            ])
            .is_empty()
        );
        let debug = format!(
            "{:?}",
            ProviderCredentials::collect(&env(&[("ANTHROPIC_API_KEY", "sk-ant-SECRET")]))
                .bindable()
        );
        assert!(!debug.contains("SECRET"), "{debug}");
    }

    #[test]
    fn placeholders_replace_only_the_values_they_name() {
        let creds = ProviderCredentials::collect(&env(&[
            ("ANTHROPIC_API_KEY", "sk-ant-api03-real"),
            ("ANTHROPIC_BASE_URL", "https://api.anthropic.com"),
        ]));
        let vars = creds.for_provider(Provider::Anthropic).expect("vars");
        let ph: BTreeMap<String, String> =
            [("ANTHROPIC_API_KEY".to_owned(), "sk-ant-api03-PH".to_owned())].into();
        let swapped = ProviderCredentials::with_placeholders(vars, &ph);
        assert_eq!(swapped["ANTHROPIC_API_KEY"], "sk-ant-api03-PH");
        assert_eq!(swapped["ANTHROPIC_BASE_URL"], "https://api.anthropic.com");
    }

    #[test]
    fn redactor_scrubs_secrets_but_not_urls() {
        let creds = ProviderCredentials::collect(&env(&[
            ("ANTHROPIC_API_KEY", "sk-ant-api-secret"),
            ("ANTHROPIC_BASE_URL", "http://provider.test:8080"),
        ]));
        let r = creds.redactor();
        assert_eq!(
            r.redact("key=sk-ant-api-secret at http://provider.test:8080"),
            "key=*** at http://provider.test:8080"
        );
        let mut v = serde_json::json!({"a": ["x sk-ant-api-secret"], "b": 1});
        r.redact_json(&mut v);
        assert_eq!(v["a"][0], "x ***");
    }
}
