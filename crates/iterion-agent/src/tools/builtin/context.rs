//! What every built-in shares: the [`ToolContext`] it runs in, the
//! [`ToolArea`] that confines its paths on the host, argument readers
//! that accept what models send, and path resolution (lexical, then by
//! real path against the area).

use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// Marks output cut at its cap.
pub(super) const TRUNCATED_MARK: &str = "\n... [output truncated]";

/// Which paths the file tools may touch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolArea {
    /// Inside a container: the container is the boundary.
    Container,
    /// On the host: only under this root (canonical), symlinks resolved.
    Confined(PathBuf),
}

/// What a built-in needs from its surroundings.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// Working directory (relative paths, bash cwd).
    pub workdir: PathBuf,
    /// Path confinement.
    pub area: ToolArea,
    /// Client for `web_fetch` (proxy settings, no credentials).
    pub http: reqwest::Client,
    /// Bound of one bash call (`None`: the caller's cancellation only).
    pub bash_timeout: Option<Duration>,
    /// Variables removed from bash's environment (provider credentials).
    pub scrub_env: Vec<String>,
    /// Cancels a running call.
    pub cancel: CancellationToken,
}

pub(super) async fn blocking(
    ctx: &ToolContext,
    input: &Value,
    f: fn(&Value, &ToolContext) -> Result<String, String>,
) -> Result<String, String> {
    let (input, ctx) = (input.clone(), ctx.clone());
    tokio::task::spawn_blocking(move || f(&input, &ctx))
        .await
        .map_err(|e| format!("tool task failed: {e}"))?
}

pub(super) fn str_arg<'a>(input: &'a Value, tool: &str, key: &str) -> Result<&'a str, String> {
    input
        .get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| format!("{tool}: '{key}' is required and must be a non-empty string"))
}

pub(super) fn int_arg(input: &Value, key: &str) -> Option<i64> {
    let v = input.get(key)?;
    // Models send 5, 5.0 or "5"; accept the three.
    v.as_i64()
        .or_else(|| v.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
        .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
}

// ---- paths --------------------------------------------------------------

/// Lexically normalize (no filesystem access): drop `.`, fold `..`.
pub(super) fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// Resolve a tool path against the workdir and the area. For a path that
/// does not exist yet (write), the nearest existing ancestor is checked.
pub(super) fn resolve(ctx: &ToolContext, tool: &str, raw: &str) -> Result<PathBuf, String> {
    let joined = normalize(&ctx.workdir.join(raw));
    let ToolArea::Confined(root) = &ctx.area else {
        return Ok(joined);
    };
    let mut probe = joined.clone();
    let mut tail = Vec::new();
    let real = loop {
        match probe.canonicalize() {
            Ok(p) => break p,
            Err(_) => {
                let Some(name) = probe.file_name().map(ToOwned::to_owned) else {
                    return Err(format!("{tool}: {raw}: no such path"));
                };
                tail.push(name);
                if !probe.pop() {
                    return Err(format!("{tool}: {raw}: no such path"));
                }
            }
        }
    };
    let full = tail.iter().rev().fold(real, |p, n| p.join(n));
    if full.starts_with(root) {
        Ok(full)
    } else {
        Err(format!(
            "{tool}: {raw} is outside the workspace ({}); refused",
            root.display()
        ))
    }
}

pub(super) fn opt_str<'a>(input: &'a Value, key: &str) -> Option<&'a str> {
    input
        .get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}
