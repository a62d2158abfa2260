//! `bedrock/<model-id>` (upstream claw's `providers/bedrock`): Anthropic
//! models on AWS Bedrock, `POST {endpoint}/model/{model-id}/invoke` with
//! the Anthropic Messages body (`anthropic_version: bedrock-2023-05-31`,
//! the model in the URL, not the body). Authentication is AWS SigV4
//! (service `bedrock`) signed by the official `aws-sigv4` crate on this
//! crate's own HTTP client, or a Bedrock API key
//! (`AWS_BEARER_TOKEN_BEDROCK`, preferred when set, as the AWS SDK does).
//!
//! Credentials come from the standard chain's static sources: the
//! `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` / `AWS_SESSION_TOKEN`
//! variables, else the shared credentials file's profile (`AWS_PROFILE`,
//! else `default`; `AWS_SHARED_CREDENTIALS_FILE`, else
//! `~/.aws/credentials`), read on the host; the region from `AWS_REGION`,
//! `AWS_DEFAULT_REGION`, else the profile's `region` in the config file
//! (`AWS_CONFIG_FILE`, else `~/.aws/config`). The endpoint is
//! `AWS_ENDPOINT_URL_BEDROCK_RUNTIME`, `AWS_ENDPOINT_URL`, else
//! `https://bedrock-runtime.<region>.amazonaws.com`. SSO, web identity and
//! instance metadata are not read (the AWS SDK's runtime is not linked).
//!
//! The response is read whole (`InvokeModel`): upstream streams
//! (`InvokeModelWithResponseStream`, AWS's binary event stream); the
//! answer is the same.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::SystemTime;

use serde_json::Value;

use crate::env::EnvSnapshot;
use crate::error::AgentError;

/// The body's API version (upstream claw's).
pub const BEDROCK_ANTHROPIC_VERSION: &str = "bedrock-2023-05-31";
/// The SigV4 service name of the Bedrock runtime.
pub const SIGNING_SERVICE: &str = "bedrock";

/// Static AWS credentials for SigV4. `Debug` never prints a secret.
#[derive(Clone)]
pub(crate) struct AwsKeys {
    pub(crate) access_key_id: String,
    pub(crate) secret_access_key: String,
    pub(crate) session_token: Option<String>,
    pub(crate) region: String,
}

impl std::fmt::Debug for AwsKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsKeys")
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

/// The region of the provider's variables.
pub(crate) fn region(vars: &BTreeMap<String, String>) -> Option<String> {
    ["AWS_REGION", "AWS_DEFAULT_REGION"]
        .iter()
        .find_map(|k| vars.get(*k).filter(|v| !v.is_empty()).cloned())
}

/// The endpoint of the provider's variables.
pub(crate) fn endpoint(vars: &BTreeMap<String, String>, region: &str) -> String {
    ["AWS_ENDPOINT_URL_BEDROCK_RUNTIME", "AWS_ENDPOINT_URL"]
        .iter()
        .find_map(|k| vars.get(*k).filter(|v| !v.is_empty()).cloned())
        .unwrap_or_else(|| format!("https://bedrock-runtime.{region}.amazonaws.com"))
        .trim_end_matches('/')
        .to_owned()
}

/// The invoke URL of `model` (each path segment percent-encoded as the
/// AWS SDK sends it: `:` in `anthropic.claude-…-v1:0` is `%3A`). A
/// leading `bedrock/` is stripped as upstream claw does.
pub(crate) fn invoke_url(base: &str, model: &str) -> String {
    let model = model.strip_prefix("bedrock/").unwrap_or(model);
    let mut enc = String::with_capacity(model.len());
    for b in model.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            enc.push(char::from(b));
        } else {
            enc.push_str(&format!("%{b:02X}"));
        }
    }
    format!("{base}/model/{enc}/invoke")
}

/// The Anthropic Messages body as Bedrock takes it.
pub(crate) fn body(mut anthropic: Value) -> Value {
    if let Some(o) = anthropic.as_object_mut() {
        o.remove("model");
        o.remove("stream");
        o.insert(
            "anthropic_version".to_owned(),
            Value::String(BEDROCK_ANTHROPIC_VERSION.to_owned()),
        );
    }
    anthropic
}

/// The SigV4 headers (`authorization`, `x-amz-date`, and
/// `x-amz-security-token` with a session token) for a POST of `body` to
/// `url` carrying `headers`.
pub(crate) fn sign(
    keys: &AwsKeys,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    at: SystemTime,
) -> Result<Vec<(String, String)>, AgentError> {
    use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
    use aws_sigv4::sign::v4;
    let setup = |e: &dyn std::fmt::Display| AgentError::HttpSetup {
        detail: format!("bedrock: SigV4 signing: {e}"),
    };
    let identity = aws_credential_types::Credentials::new(
        keys.access_key_id.clone(),
        keys.secret_access_key.clone(),
        keys.session_token.clone(),
        None,
        "iterion",
    )
    .into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(&keys.region)
        .name(SIGNING_SERVICE)
        .time(at)
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| setup(&e))?
        .into();
    let request = SignableRequest::new(
        "POST",
        url,
        headers.iter().copied(),
        SignableBody::Bytes(body),
    )
    .map_err(|e| setup(&e))?;
    let (instructions, _) = sign(request, &params).map_err(|e| setup(&e))?.into_parts();
    Ok(instructions
        .headers()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect())
}

/// Fill the AWS key and region variables a host profile gives when the
/// environment names none (`AWS_PROFILE`, else `default`, in the shared
/// credentials and config files). Nothing is read when the environment
/// already holds keys or a Bedrock API key.
pub(crate) fn profile_into(env: &EnvSnapshot, vars: &mut BTreeMap<String, String>) {
    let has_keys =
        vars.contains_key("AWS_ACCESS_KEY_ID") || vars.contains_key("AWS_BEARER_TOKEN_BEDROCK");
    let has_region = vars.contains_key("AWS_REGION") || vars.contains_key("AWS_DEFAULT_REGION");
    if has_keys && has_region {
        return;
    }
    let profile = env.get("AWS_PROFILE").unwrap_or("default");
    let home = env.get("HOME").map(PathBuf::from);
    let file = |var: &str, name: &str| {
        env.get(var)
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(".aws").join(name)))
    };
    if !has_keys && let Some(creds) = file("AWS_SHARED_CREDENTIALS_FILE", "credentials") {
        let section = ini_section(&creds, profile);
        if let (Some(id), Some(secret)) = (
            section.get("aws_access_key_id"),
            section.get("aws_secret_access_key"),
        ) {
            vars.insert("AWS_ACCESS_KEY_ID".to_owned(), id.clone());
            vars.insert("AWS_SECRET_ACCESS_KEY".to_owned(), secret.clone());
            if let Some(t) = section.get("aws_session_token") {
                vars.insert("AWS_SESSION_TOKEN".to_owned(), t.clone());
            }
        }
    }
    if !has_region && let Some(config) = file("AWS_CONFIG_FILE", "config") {
        // The config file names a profile `[profile NAME]`, `default` bare.
        let name = if profile == "default" {
            "default".to_owned()
        } else {
            format!("profile {profile}")
        };
        if let Some(r) = ini_section(&config, &name).get("region") {
            vars.insert("AWS_REGION".to_owned(), r.clone());
        }
    }
}

/// The `key = value` pairs of `[name]` in an INI file (empty when the
/// file or the section is missing).
fn ini_section(path: &std::path::Path, name: &str) -> BTreeMap<String, String> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return BTreeMap::new();
    };
    let mut out = BTreeMap::new();
    let mut inside = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || line.starts_with(';') || line.is_empty() {
            continue;
        }
        if let Some(h) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            inside = h.trim() == name;
            continue;
        }
        if inside && let Some((k, v)) = line.split_once('=') {
            out.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_body_and_profile() {
        assert_eq!(
            invoke_url(
                "http://127.0.0.1:9",
                "bedrock/anthropic.claude-3-5-sonnet-20240620-v1:0"
            ),
            "http://127.0.0.1:9/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/invoke"
        );
        let b = body(serde_json::json!({"model": "m", "stream": true, "max_tokens": 5}));
        assert_eq!(
            b,
            serde_json::json!({"max_tokens": 5, "anthropic_version": BEDROCK_ANTHROPIC_VERSION})
        );
        let dir = tempfile::tempdir().expect("tmp");
        let creds = dir.path().join("credentials");
        let config = dir.path().join("config");
        std::fs::write(
            &creds,
            "[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key = d\n\n[work]\naws_access_key_id = AKIDWORK\naws_secret_access_key = w\naws_session_token = tok\n",
        )
        .expect("creds");
        std::fs::write(
            &config,
            "[default]\nregion = us-east-1\n[profile work]\nregion = eu-west-3\n",
        )
        .expect("config");
        let env = EnvSnapshot::new()
            .with("AWS_PROFILE", "work")
            .with("AWS_SHARED_CREDENTIALS_FILE", creds.display().to_string())
            .with("AWS_CONFIG_FILE", config.display().to_string());
        let mut vars = BTreeMap::new();
        profile_into(&env, &mut vars);
        assert_eq!(vars["AWS_ACCESS_KEY_ID"], "AKIDWORK");
        assert_eq!(vars["AWS_SESSION_TOKEN"], "tok");
        assert_eq!(vars["AWS_REGION"], "eu-west-3");
        // Keys in the environment win; the profile is not read for them.
        let mut vars = BTreeMap::from([
            ("AWS_ACCESS_KEY_ID".to_owned(), "AKIDENV".to_owned()),
            ("AWS_REGION".to_owned(), "ap-south-1".to_owned()),
        ]);
        profile_into(&env, &mut vars);
        assert_eq!(vars["AWS_ACCESS_KEY_ID"], "AKIDENV");
        assert_eq!(vars["AWS_REGION"], "ap-south-1");
        assert_eq!(
            endpoint(&vars, "ap-south-1"),
            "https://bedrock-runtime.ap-south-1.amazonaws.com"
        );
    }
}
