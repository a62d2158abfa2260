//! OAuth2 for `http` MCP servers (an `auth: type: oauth2` block, upstream's
//! fields): the bearer a connection sends is the server's access token
//! from the token file, refreshed at the block's `token_url` when it has
//! expired (`grant_type=refresh_token`, the block's `client_id` and
//! scopes) and written back.
//!
//! The token file is upstream's `mcp_oauth.json`, one entry per server
//! name: `$ITERION_MCP_OAUTH_FILE`, else `$ITERION_HOME/mcp_oauth.json`,
//! else `~/.iterion/mcp_oauth.json`; written owner-only. Endpoints must be
//! `https://`, or `http://` on a loopback host (upstream's rule). The
//! interactive authorization-code step (a browser on `auth_url`) is not
//! run here: a server without a token on file fails to start, saying so.
//! No token value ever appears in an error, a log line or an event.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use iterion_core::agent::McpOAuth;
use serde::{Deserialize, Serialize};

use crate::env::EnvSnapshot;

/// A refresh this close to expiry happens now.
const SKEW_SECS: i64 = 30;

/// One server's tokens on file.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Stored {
    access_token: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    refresh_token: Option<String>,
    /// Unix seconds; absent means it does not expire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    expires_at: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    scope: Option<String>,
}

/// The token file of this host.
pub(crate) fn token_file(env: &EnvSnapshot) -> Option<PathBuf> {
    if let Some(f) = env.get("ITERION_MCP_OAUTH_FILE").filter(|f| !f.is_empty()) {
        return Some(PathBuf::from(f));
    }
    if let Some(h) = env.get("ITERION_HOME").filter(|h| !h.is_empty()) {
        return Some(Path::new(h).join("mcp_oauth.json"));
    }
    env.get("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| Path::new(h).join(".iterion").join("mcp_oauth.json"))
}

/// `https://`, or `http://` on a loopback host.
fn secure(url: &str) -> bool {
    if url.starts_with("https://") {
        return true;
    }
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.split(':').next().unwrap_or_default(),
    };
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(char::from(b));
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

fn load(path: &Path) -> Result<BTreeMap<String, Stored>, String> {
    match std::fs::read(path) {
        Ok(b) => serde_json::from_slice(&b).map_err(|e| {
            format!(
                "the OAuth token file {} does not parse: {e}",
                path.display()
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(e) => Err(format!("the OAuth token file {}: {e}", path.display())),
    }
}

fn save(path: &Path, all: &BTreeMap<String, Stored>) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let text = serde_json::to_vec_pretty(all).map_err(|e| e.to_string())?;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d)?;
        }
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(&text)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| format!("cannot write the OAuth token file {}: {e}", path.display()))
}

/// The access token `server` sends: the one on file, refreshed first when
/// it has expired. Errors name the server and the file, never a token.
pub(crate) async fn access_token(
    server: &str,
    auth: &McpOAuth,
    env: &EnvSnapshot,
    client: &reqwest::Client,
) -> Result<String, String> {
    for (what, url) in [
        ("auth_url", Some(&auth.auth_url)),
        ("token_url", Some(&auth.token_url)),
    ]
    .into_iter()
    .chain([("revoke_url", auth.revoke_url.as_ref())])
    {
        if let Some(u) = url
            && !secure(u)
        {
            return Err(format!(
                "oauth2 {what} {u:?} must be https:// (plain http only on a loopback host)"
            ));
        }
    }
    let path =
        token_file(env).ok_or("oauth2: no token file (set ITERION_MCP_OAUTH_FILE or HOME)")?;
    let mut all = load(&path)?;
    let Some(stored) = all.get(server).cloned() else {
        return Err(format!(
            "oauth2: no token for server {server} in {}; authorize it at {} first",
            path.display(),
            auth.auth_url
        ));
    };
    let fresh = stored.expires_at.is_none_or(|at| at - SKEW_SECS > now());
    if fresh {
        return Ok(stored.access_token);
    }
    let Some(refresh) = stored.refresh_token.as_deref() else {
        return Err(format!(
            "oauth2: the token of server {server} has expired and holds no refresh token; authorize it again at {}",
            auth.auth_url
        ));
    };
    let mut body = format!(
        "grant_type=refresh_token&refresh_token={}&client_id={}",
        encode(refresh),
        encode(&auth.client_id)
    );
    if !auth.scopes.is_empty() {
        body.push_str(&format!("&scope={}", encode(&auth.scopes.join(" "))));
    }
    let resp = client
        .post(&auth.token_url)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("accept", "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| {
            format!("oauth2: the token endpoint of server {server} is unreachable: {e}")
        })?;
    let status = resp.status();
    let bytes = resp
        .bytes()
        .await
        .map_err(|e| format!("oauth2: reading the token endpoint's answer: {e}"))?;
    if !status.is_success() {
        // The body may echo a token: only the status is reported.
        return Err(format!(
            "oauth2: the token endpoint refused to refresh server {server}'s token (HTTP {status})"
        ));
    }
    #[derive(Deserialize)]
    struct Answer {
        access_token: String,
        #[serde(default)]
        refresh_token: Option<String>,
        #[serde(default)]
        expires_in: Option<i64>,
        #[serde(default)]
        scope: Option<String>,
    }
    let answer: Answer = serde_json::from_slice(&bytes).map_err(|_| {
        format!("oauth2: the token endpoint's answer for server {server} is not a token response")
    })?;
    let renewed = Stored {
        access_token: answer.access_token.clone(),
        refresh_token: answer.refresh_token.or(stored.refresh_token),
        expires_at: answer.expires_in.map(|s| now() + s),
        scope: answer.scope.or(stored.scope),
    };
    all.insert(server.to_owned(), renewed);
    save(&path, &all)?;
    Ok(answer.access_token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_https_or_loopback_http_endpoints() {
        assert!(secure("https://auth.example.com/token"));
        assert!(secure("http://127.0.0.1:8080/token"));
        assert!(secure("http://localhost/token"));
        assert!(secure("http://[::1]:9/token"));
        assert!(!secure("http://auth.example.com/token"));
        assert!(!secure("http://127.0.0.1.evil.com/token"));
        assert!(!secure("ftp://127.0.0.1/token"));
        assert_eq!(encode("a b&c=d/é"), "a%20b%26c%3Dd%2F%C3%A9");
    }
}
