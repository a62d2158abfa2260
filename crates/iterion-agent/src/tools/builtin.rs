//! The seven built-in tools with upstream's input schemas and semantics
//! (claw-code-go's `bash`, `read_file`, `write_file`, `file_edit`, `glob`,
//! `grep`, `web_fetch`), executed in the process that runs the claw loop:
//! the in-box runner inside the container, or the host process on an
//! unsandboxed run.
//!
//! A tool failure is data for the model (`Err(text)` becomes an
//! `is_error` tool result it can react to), never an error of the loop.
//! On the host the file tools are confined to the workspace
//! ([`ToolArea::Confined`]): a path that resolves outside it (through
//! `..` or a symlink) is refused. Inside the container the container is
//! the boundary. `bash` children never inherit the provider credentials
//! the runner holds (`scrub_env`).

use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::ToolSpec;

/// A built-in tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Builtin {
    /// Run a shell command.
    Bash,
    /// Read a file.
    ReadFile,
    /// Create or overwrite a file.
    WriteFile,
    /// Replace one exact occurrence in a file.
    FileEdit,
    /// Find files by glob.
    Glob,
    /// Search file contents by regex.
    Grep,
    /// Fetch a URL as text.
    WebFetch,
}

/// Bytes of combined bash output kept (upstream `maxOutputSize`).
pub const BASH_OUTPUT_CAP: usize = 10_000;
/// Default bound of one bash call (upstream `DefaultBashTimeout`);
/// `CLAW_BASH_TIMEOUT` overrides it.
pub const DEFAULT_BASH_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest file `read_file` returns whole (upstream `maxDirectReadBytes`).
pub const READ_DIRECT_CAP: u64 = 256 * 1024;
/// Lines one bounded `read_file` returns at most.
pub const READ_MAX_LINES: usize = 2000;
/// Matches `grep` returns at most.
pub const GREP_MAX_RESULTS: usize = 1000;
/// Paths `glob` returns at most.
pub const GLOB_MAX_RESULTS: usize = 1000;
/// Default `web_fetch` byte cap.
pub const WEB_FETCH_DEFAULT_MAX: usize = 50 * 1024;
const WEB_FETCH_TIMEOUT: Duration = Duration::from_secs(15);
const TRUNCATED_MARK: &str = "\n... [output truncated]";

impl Builtin {
    /// Every built-in.
    pub const ALL: &'static [Builtin] = &[
        Self::Bash,
        Self::ReadFile,
        Self::WriteFile,
        Self::FileEdit,
        Self::Glob,
        Self::Grep,
        Self::WebFetch,
    ];

    /// Tool name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Bash => "bash",
            Self::ReadFile => "read_file",
            Self::WriteFile => "write_file",
            Self::FileEdit => "file_edit",
            Self::Glob => "glob",
            Self::Grep => "grep",
            Self::WebFetch => "web_fetch",
        }
    }

    /// Parse a tool name.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|b| b.name() == name)
    }

    /// Description and input schema, as upstream defines them.
    pub fn spec(self) -> ToolSpec {
        let (description, schema) = match self {
            Self::Bash => (
                "Execute a bash command and return its combined stdout and stderr. Use it for builds, tests, git and other programs; prefer the dedicated file tools for reading and editing files.",
                json!({"type": "object", "properties": {
                    "command": {"type": "string", "description": "The bash command to execute"}},
                    "required": ["command"]}),
            ),
            Self::ReadFile => (
                "Read a file and return its contents. Files over 256 KiB must be read with offset/limit.",
                json!({"type": "object", "properties": {
                    "path": {"type": "string", "description": "Path to the file to read"},
                    "offset": {"type": "integer", "description": "1-indexed line to start from"},
                    "limit": {"type": "integer", "description": "Maximum number of lines to read (at most 2000)"}},
                    "required": ["path"]}),
            ),
            Self::WriteFile => (
                "Create a file or overwrite it with the given content, creating parent directories.",
                json!({"type": "object", "properties": {
                    "path": {"type": "string", "description": "Path to the file to write"},
                    "content": {"type": "string", "description": "Content to write to the file"}},
                    "required": ["path", "content"]}),
            ),
            Self::FileEdit => (
                "Edit a file by replacing an exact string with new content. Fails if old_string is not found or appears more than once.",
                json!({"type": "object", "properties": {
                    "file_path": {"type": "string", "description": "Path to the file to edit"},
                    "old_string": {"type": "string", "description": "Exact string to find and replace (must appear exactly once)"},
                    "new_string": {"type": "string", "description": "Replacement string"}},
                    "required": ["file_path", "old_string", "new_string"]}),
            ),
            Self::Glob => (
                "Find files matching a glob pattern (*, **, ?, [abc]). Returns a newline-separated list of paths.",
                json!({"type": "object", "properties": {
                    "pattern": {"type": "string", "description": "Glob pattern to match files (e.g. '**/*.rs', '*.txt')"},
                    "path": {"type": "string", "description": "Base directory to search from (default: the workspace)"}},
                    "required": ["pattern"]}),
            ),
            Self::Grep => (
                "Search for a regex pattern in files. Returns matching lines as file:line:content.",
                json!({"type": "object", "properties": {
                    "pattern": {"type": "string", "description": "Regular expression pattern to search for"},
                    "path": {"type": "string", "description": "Directory or file to search in"},
                    "glob": {"type": "string", "description": "File name filter (e.g. '*.rs'), used when path is a directory"}},
                    "required": ["pattern", "path"]}),
            ),
            Self::WebFetch => (
                "Fetch a URL and return its text content; HTML tags are stripped.",
                json!({"type": "object", "properties": {
                    "url": {"type": "string", "description": "The URL to fetch"},
                    "max_bytes": {"type": "integer", "description": "Maximum bytes to read (default 51200)"}},
                    "required": ["url"]}),
            ),
        };
        ToolSpec {
            name: self.name().to_owned(),
            description: description.to_owned(),
            input_schema: schema,
        }
    }
}

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

/// Run a built-in. `Ok` is the tool result; `Err` is an error result the
/// model sees.
pub async fn execute(builtin: Builtin, input: &Value, ctx: &ToolContext) -> Result<String, String> {
    match builtin {
        Builtin::Bash => bash(input, ctx).await,
        Builtin::ReadFile => blocking(ctx, input, read_file).await,
        Builtin::WriteFile => blocking(ctx, input, write_file).await,
        Builtin::FileEdit => blocking(ctx, input, file_edit).await,
        Builtin::Glob => blocking(ctx, input, glob).await,
        Builtin::Grep => blocking(ctx, input, grep).await,
        Builtin::WebFetch => web_fetch(input, ctx).await,
    }
}

async fn blocking(
    ctx: &ToolContext,
    input: &Value,
    f: fn(&Value, &ToolContext) -> Result<String, String>,
) -> Result<String, String> {
    let (input, ctx) = (input.clone(), ctx.clone());
    tokio::task::spawn_blocking(move || f(&input, &ctx))
        .await
        .map_err(|e| format!("tool task failed: {e}"))?
}

fn str_arg<'a>(input: &'a Value, tool: &str, key: &str) -> Result<&'a str, String> {
    input
        .get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| format!("{tool}: '{key}' is required and must be a non-empty string"))
}

fn int_arg(input: &Value, key: &str) -> Option<i64> {
    let v = input.get(key)?;
    // Models send 5, 5.0 or "5"; accept the three.
    v.as_i64()
        .or_else(|| v.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
        .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
}

// ---- paths --------------------------------------------------------------

/// Lexically normalize (no filesystem access): drop `.`, fold `..`.
fn normalize(path: &Path) -> PathBuf {
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
fn resolve(ctx: &ToolContext, tool: &str, raw: &str) -> Result<PathBuf, String> {
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

// ---- bash ---------------------------------------------------------------

async fn bash(input: &Value, ctx: &ToolContext) -> Result<String, String> {
    let command = str_arg(input, "bash", "command")?;
    // bash as upstream; a bare image (busybox) has only sh.
    let shell = ["/bin/bash", "/usr/bin/bash", "/usr/local/bin/bash"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap_or("/bin/sh");
    let (reader, writer) = std::io::pipe().map_err(|e| format!("bash: pipe: {e}"))?;
    let writer2 = writer.try_clone().map_err(|e| format!("bash: pipe: {e}"))?;
    let mut cmd = tokio::process::Command::new(shell);
    cmd.arg("-c")
        .arg(command)
        .current_dir(&ctx.workdir)
        .stdin(Stdio::null())
        .stdout(Stdio::from(writer))
        .stderr(Stdio::from(writer2))
        // A fresh process group: a timeout or a cancel reaches grandchildren.
        .process_group(0)
        .kill_on_drop(true);
    for name in &ctx.scrub_env {
        cmd.env_remove(name);
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("bash: cannot start {shell}: {e}"))?;
    // The command's pipe ends now live only in the child (and its children).
    drop(cmd);
    let pgid = child.id();
    let collector = tokio::task::spawn_blocking(move || read_bounded(reader, BASH_OUTPUT_CAP));
    let bound = ctx.bash_timeout;
    let waited = tokio::select! {
        status = child.wait() => Some(status),
        () = sleep_opt(bound) => None,
        () = ctx.cancel.cancelled() => None,
    };
    let status = match waited {
        Some(s) => s.map_err(|e| format!("bash: wait: {e}"))?,
        None => {
            kill_group(pgid);
            let _ = child.wait().await;
            let out = finish_collect(collector).await;
            if ctx.cancel.is_cancelled() {
                return Err(format!("{out}\ncommand cancelled"));
            }
            let secs = bound.map_or(0, |d| d.as_secs());
            return Err(format!(
                "{out}\ncommand timed out after {secs}s (raise it with CLAW_BASH_TIMEOUT)"
            ));
        }
    };
    let out = finish_collect(collector).await;
    match status.code() {
        Some(0) => Ok(out),
        Some(code) => Err(format!("{out}\ncommand exited with code {code}")),
        None => Err(format!("{out}\ncommand killed by a signal")),
    }
}

async fn sleep_opt(bound: Option<Duration>) {
    match bound {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

#[cfg(target_os = "linux")]
fn kill_group(pid: Option<u32>) {
    let Some(pid) = pid
        .and_then(|p| i32::try_from(p).ok())
        .and_then(rustix::process::Pid::from_raw)
    else {
        return;
    };
    let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
}

#[cfg(not(target_os = "linux"))]
fn kill_group(_pid: Option<u32>) {}

/// Keep the first `cap` bytes, drain the rest as it arrives (the bound
/// holds while the command runs), mark a cut.
fn read_bounded(mut reader: std::io::PipeReader, cap: usize) -> String {
    let mut kept = Vec::with_capacity(4096);
    let mut buf = [0u8; 16 * 1024];
    let mut truncated = false;
    loop {
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let room = cap.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
                truncated |= n > room;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let mut out = String::from_utf8_lossy(&kept).into_owned();
    if truncated {
        out.push_str(TRUNCATED_MARK);
    }
    out
}

/// A background job that keeps the pipe open must not wedge the call
/// (upstream `WaitDelay`): after the shell exits, wait 2 s at most.
async fn finish_collect(collector: tokio::task::JoinHandle<String>) -> String {
    match tokio::time::timeout(Duration::from_secs(2), collector).await {
        Ok(Ok(out)) => out,
        Ok(Err(_)) => String::new(),
        Err(_) => "[output unavailable: a background process kept the output open]".to_owned(),
    }
}

// ---- files --------------------------------------------------------------

fn read_file(input: &Value, ctx: &ToolContext) -> Result<String, String> {
    let raw = str_arg(input, "read_file", "path")?;
    let path = resolve(ctx, "read_file", raw)?;
    let meta = std::fs::metadata(&path).map_err(|e| format!("read_file: {raw}: {e}"))?;
    let offset = int_arg(input, "offset");
    let limit = int_arg(input, "limit");
    let bounded = offset.is_some() || limit.is_some();
    if !bounded && meta.len() > READ_DIRECT_CAP {
        return Err(format!(
            "read_file: {raw} is {} bytes, over the {READ_DIRECT_CAP}-byte direct-read limit; use grep, or read_file with offset and limit (e.g. offset=1, limit={READ_MAX_LINES})",
            meta.len()
        ));
    }
    let bytes = std::fs::read(&path).map_err(|e| format!("read_file: {raw}: {e}"))?;
    let text = String::from_utf8_lossy(&bytes);
    if !bounded {
        return Ok(text.into_owned());
    }
    let lines: Vec<&str> = text.split('\n').collect();
    let start = usize::try_from(offset.unwrap_or(1).max(1) - 1).unwrap_or(0);
    if start > lines.len() {
        return Err(format!(
            "read_file: offset {} is past the end of the file ({} lines)",
            start + 1,
            lines.len()
        ));
    }
    let count = limit
        .and_then(|l| usize::try_from(l).ok())
        .unwrap_or(READ_MAX_LINES)
        .min(READ_MAX_LINES);
    let end = (start + count).min(lines.len());
    Ok(lines[start..end].join("\n"))
}

fn write_file(input: &Value, ctx: &ToolContext) -> Result<String, String> {
    let raw = str_arg(input, "write_file", "path")?;
    let content = input
        .get("content")
        .and_then(Value::as_str)
        .ok_or("write_file: 'content' is required and must be a string")?;
    let path = resolve(ctx, "write_file", raw)?;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("write_file: create directories: {e}"))?;
    }
    std::fs::write(&path, content).map_err(|e| format!("write_file: {raw}: {e}"))?;
    Ok(format!(
        "Successfully wrote {} bytes to {raw}",
        content.len()
    ))
}

fn file_edit(input: &Value, ctx: &ToolContext) -> Result<String, String> {
    let raw = str_arg(input, "file_edit", "file_path")?;
    let old = str_arg(input, "file_edit", "old_string")?;
    let new = input
        .get("new_string")
        .and_then(Value::as_str)
        .ok_or("file_edit: 'new_string' is required and must be a string")?;
    let path = resolve(ctx, "file_edit", raw)?;
    let text = std::fs::read_to_string(&path).map_err(|e| format!("file_edit: {raw}: {e}"))?;
    match text.matches(old).count() {
        0 => Err(format!("file_edit: old_string not found in {raw}")),
        1 => {
            std::fs::write(&path, text.replacen(old, new, 1))
                .map_err(|e| format!("file_edit: {raw}: {e}"))?;
            Ok(format!("Successfully edited {raw}"))
        }
        n => Err(format!(
            "file_edit: old_string appears {n} times in {raw}; it must appear exactly once"
        )),
    }
}

fn glob(input: &Value, ctx: &ToolContext) -> Result<String, String> {
    let pattern = str_arg(input, "glob", "pattern")?;
    let base_raw = input
        .get("path")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or(".");
    let base = resolve(ctx, "glob", base_raw)?;
    let matcher = globset::GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map_err(|e| format!("glob: invalid pattern {pattern:?}: {e}"))?
        .compile_matcher();
    let mut hits = Vec::new();
    let mut truncated = false;
    for entry in walkdir::WalkDir::new(&base)
        .follow_links(false)
        .into_iter()
        .filter_map(Result::ok)
    {
        if entry.depth() == 0 || !entry.file_type().is_file() {
            continue;
        }
        let Ok(rel) = entry.path().strip_prefix(&base) else {
            continue;
        };
        if matcher.is_match(rel) {
            if hits.len() == GLOB_MAX_RESULTS {
                truncated = true;
                break;
            }
            hits.push(Path::new(base_raw).join(rel).display().to_string());
        }
    }
    hits.sort();
    let mut out = hits.join("\n");
    if truncated {
        out.push_str(TRUNCATED_MARK);
    }
    Ok(out)
}

fn grep(input: &Value, ctx: &ToolContext) -> Result<String, String> {
    let pattern = str_arg(input, "grep", "pattern")?;
    let raw = str_arg(input, "grep", "path")?;
    let re = regex::Regex::new(pattern).map_err(|e| format!("grep: invalid regex: {e}"))?;
    let root = resolve(ctx, "grep", raw)?;
    let filter = match input
        .get("glob")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        Some(g) => Some(
            globset::Glob::new(g)
                .map_err(|e| format!("grep: invalid glob {g:?}: {e}"))?
                .compile_matcher(),
        ),
        None => None,
    };
    let mut out = Vec::new();
    let walker = walkdir::WalkDir::new(&root)
        .follow_links(false)
        .into_iter()
        .filter_entry(|e| e.depth() == 0 || e.file_name() != ".git");
    'files: for entry in walker.filter_map(Result::ok) {
        if !entry.file_type().is_file() {
            continue;
        }
        if entry.depth() > 0
            && let Some(f) = &filter
            && !f.is_match(entry.file_name())
        {
            continue;
        }
        let Ok(bytes) = std::fs::read(entry.path()) else {
            continue;
        };
        // Binary files are skipped, as grep -I does.
        if bytes[..bytes.len().min(8192)].contains(&0) {
            continue;
        }
        let text = String::from_utf8_lossy(&bytes);
        let shown = entry
            .path()
            .strip_prefix(&root)
            .ok()
            .filter(|r| !r.as_os_str().is_empty())
            .map_or_else(
                || raw.to_owned(),
                |r| Path::new(raw).join(r).display().to_string(),
            );
        for (n, line) in text.lines().enumerate() {
            if re.is_match(line) {
                if out.len() == GREP_MAX_RESULTS {
                    out.push(format!("... [stopped at {GREP_MAX_RESULTS} matches]"));
                    break 'files;
                }
                out.push(format!(
                    "{shown}:{}:{}",
                    n + 1,
                    crate::error::bounded(line, 500)
                ));
            }
        }
    }
    Ok(out.join("\n"))
}

// ---- web_fetch ----------------------------------------------------------

async fn web_fetch(input: &Value, ctx: &ToolContext) -> Result<String, String> {
    let url = str_arg(input, "web_fetch", "url")?;
    let max = int_arg(input, "max_bytes")
        .and_then(|n| usize::try_from(n).ok())
        .filter(|n| *n > 0)
        .unwrap_or(WEB_FETCH_DEFAULT_MAX);
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("web_fetch: invalid url: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!(
            "web_fetch: only http and https URLs are fetched, not {}",
            parsed.scheme()
        ));
    }
    let fetch = async {
        let mut resp = ctx
            .http
            .get(parsed)
            .timeout(WEB_FETCH_TIMEOUT)
            .send()
            .await
            .map_err(|e| format!("web_fetch: {e}"))?;
        let status = resp.status();
        let html = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("html"));
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| format!("web_fetch: {e}"))? {
            let room = max.saturating_sub(body.len());
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if body.len() >= max {
                break;
            }
        }
        let text = String::from_utf8_lossy(&body).into_owned();
        let text = if html { strip_html(&text) } else { text };
        if status.is_success() {
            Ok(text)
        } else {
            Err(format!("web_fetch: HTTP {}\n{text}", status.as_u16()))
        }
    };
    tokio::select! {
        r = fetch => r,
        () = ctx.cancel.cancelled() => Err("web_fetch: cancelled".to_owned()),
    }
}

fn strip_html(html: &str) -> String {
    static PATTERNS: std::sync::OnceLock<Option<[regex::Regex; 4]>> = std::sync::OnceLock::new();
    let Some([scripts, tags, spaces, blanks]) = PATTERNS.get_or_init(|| {
        Some([
            regex::Regex::new(r"(?is)<(script|style)[^>]*>.*?</(script|style)>").ok()?,
            regex::Regex::new(r"<[^>]+>").ok()?,
            regex::Regex::new(r"[ \t]+").ok()?,
            regex::Regex::new(r"\n{3,}").ok()?,
        ])
    }) else {
        return html.to_owned();
    };
    let s = scripts.replace_all(html, "");
    let s = tags.replace_all(&s, "");
    let s = spaces.replace_all(&s, " ");
    blanks.replace_all(&s, "\n\n").trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(dir: &Path, area: ToolArea) -> ToolContext {
        ToolContext {
            workdir: dir.to_path_buf(),
            area,
            http: crate::http::HttpSettings::from_env(
                &crate::env::EnvSnapshot::new(),
                crate::http::ResolverMode::System,
            )
            .client()
            .expect("client"),
            bash_timeout: Some(Duration::from_secs(5)),
            scrub_env: vec!["ITERION_TEST_SECRET_VAR".into()],
            cancel: CancellationToken::new(),
        }
    }

    fn tmp() -> (tempfile::TempDir, PathBuf) {
        let d = tempfile::tempdir().expect("tmp");
        let root = d.path().canonicalize().expect("canon");
        (d, root)
    }

    #[tokio::test]
    async fn bash_output_exit_and_truncation() {
        let (_d, root) = tmp();
        let c = ctx(&root, ToolArea::Container);
        let ok = execute(
            Builtin::Bash,
            &json!({"command": "echo hi; echo err >&2"}),
            &c,
        )
        .await
        .expect("ok");
        assert_eq!(ok, "hi\nerr\n");
        let err = execute(Builtin::Bash, &json!({"command": "echo x; exit 3"}), &c)
            .await
            .expect_err("exit");
        assert!(err.ends_with("command exited with code 3"), "{err}");
        let big = execute(
            Builtin::Bash,
            &json!({"command": "head -c 50000 /dev/zero | tr '\\0' a"}),
            &c,
        )
        .await
        .expect("big");
        assert_eq!(big.len(), BASH_OUTPUT_CAP + TRUNCATED_MARK.len());
        assert!(big.ends_with("[output truncated]"));
        let missing = execute(Builtin::Bash, &json!({}), &c)
            .await
            .expect_err("arg");
        assert!(missing.contains("'command' is required"));
    }

    #[tokio::test]
    async fn bash_timeout_kills_the_group() {
        let (_d, root) = tmp();
        let mut c = ctx(&root, ToolArea::Container);
        c.bash_timeout = Some(Duration::from_millis(300));
        let err = execute(
            Builtin::Bash,
            &json!({"command": "sleep 30 & echo started; sleep 30"}),
            &c,
        )
        .await
        .expect_err("timeout");
        assert!(err.contains("timed out"), "{err}");
        assert!(err.contains("started"), "{err}");
    }

    #[tokio::test]
    async fn file_tools_round_trip() {
        let (_d, root) = tmp();
        let c = ctx(&root, ToolArea::Confined(root.clone()));
        let w = execute(
            Builtin::WriteFile,
            &json!({"path": "a/b.txt", "content": "one\ntwo\nthree"}),
            &c,
        )
        .await
        .expect("write");
        assert!(w.contains("13 bytes"));
        let r = execute(
            Builtin::ReadFile,
            &json!({"path": "a/b.txt", "offset": 2, "limit": 1}),
            &c,
        )
        .await
        .expect("read");
        assert_eq!(r, "two");
        execute(
            Builtin::FileEdit,
            &json!({"file_path": "a/b.txt", "old_string": "two", "new_string": "2"}),
            &c,
        )
        .await
        .expect("edit");
        let all = execute(Builtin::ReadFile, &json!({"path": "a/b.txt"}), &c)
            .await
            .expect("read");
        assert_eq!(all, "one\n2\nthree");
        let twice = execute(
            Builtin::WriteFile,
            &json!({"path": "d.txt", "content": "x x"}),
            &c,
        )
        .await;
        assert!(twice.is_ok());
        let err = execute(
            Builtin::FileEdit,
            &json!({"file_path": "d.txt", "old_string": "x", "new_string": "y"}),
            &c,
        )
        .await
        .expect_err("ambiguous");
        assert!(err.contains("appears 2 times"));
        let g = execute(Builtin::Glob, &json!({"pattern": "**/*.txt"}), &c)
            .await
            .expect("glob");
        assert_eq!(g, "./a/b.txt\n./d.txt");
        let hits = execute(
            Builtin::Grep,
            &json!({"pattern": "^th", "path": ".", "glob": "*.txt"}),
            &c,
        )
        .await
        .expect("grep");
        assert_eq!(hits, "./a/b.txt:3:three");
    }

    #[tokio::test]
    async fn confined_area_refuses_escapes() {
        let (_d, root) = tmp();
        let (_o, outside) = tmp();
        std::fs::write(outside.join("secret"), "s").expect("write");
        std::os::unix::fs::symlink(&outside, root.join("link")).expect("symlink");
        let c = ctx(&root, ToolArea::Confined(root.clone()));
        for (tool, input) in [
            (Builtin::ReadFile, json!({"path": "../x"})),
            (
                Builtin::ReadFile,
                json!({"path": outside.join("secret").to_str().expect("utf8")}),
            ),
            (Builtin::ReadFile, json!({"path": "link/secret"})),
            (
                Builtin::WriteFile,
                json!({"path": "link/new", "content": "x"}),
            ),
            (Builtin::Grep, json!({"pattern": "s", "path": "link"})),
        ] {
            let err = execute(tool, &input, &c).await.expect_err("refused");
            assert!(
                err.contains("outside the workspace") || err.contains("no such path"),
                "{err}"
            );
        }
        assert!(!outside.join("new").exists());
    }

    #[test]
    fn html_is_stripped() {
        let t = strip_html("<html><script>x()</script><p>Hello   <b>world</b></p>\n\n\n\n</html>");
        assert_eq!(t, "Hello world");
    }
}
