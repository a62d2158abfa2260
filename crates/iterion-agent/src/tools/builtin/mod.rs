//! The built-in tools, executed in the process that runs the claw loop:
//! the in-box runner inside the container, or the host process on an
//! unsandboxed run. Two families share one namespace: claw-code-go's seven
//! (`bash`, `read_file`, `write_file`, `file_edit`, `glob`, `grep`,
//! `web_fetch`, with upstream's input schemas and semantics) and the names
//! upstream's workflow templates write (`list_files`, `tree`,
//! `search_codebase`, `git_diff`, `git_status`, `patch`, `run_command`;
//! upstream names them in `readOnlyTools` and its act tests but ships no
//! schema, so theirs are this project's). [`Builtin::read_only`] is
//! upstream's `readOnlyTools` set (plus `glob` and `grep`, which write
//! nothing either).
//!
//! A tool failure is data for the model (`Err(text)` becomes an
//! `is_error` tool result it can react to), never an error of the loop.
//! On the host the file tools are confined to the workspace
//! ([`ToolArea::Confined`]): a path that resolves outside it (through
//! `..` or a symlink) is refused. Inside the container the container is
//! the boundary. `bash` children never inherit the provider credentials
//! the runner holds (`scrub_env`).

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::spec::ToolSpec;

mod claw_extra;
mod context;
mod git;
mod process;

use self::context::{TRUNCATED_MARK, blocking, int_arg, opt_str, resolve, str_arg};
use self::git::{git_diff, git_status, patch};
use self::process::{bash, run_command};

pub use self::claw_extra::{SLEEP_MAX_MS, TODOS_PATH};
pub use self::context::{ToolArea, ToolContext};
pub use self::git::GIT_OUTPUT_CAP;
pub use self::process::{BASH_OUTPUT_CAP, DEFAULT_BASH_TIMEOUT};

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
    /// List a directory's entries.
    ListFiles,
    /// An indented directory tree.
    Tree,
    /// Search file contents by regex (the templates' name for `grep`).
    SearchCodebase,
    /// `git diff` of the workspace.
    GitDiff,
    /// `git status` of the workspace.
    GitStatus,
    /// Apply a unified diff.
    Patch,
    /// Run a shell command; the exit code is data, not an error.
    RunCommand,
    /// Wait a bounded time (claw's `sleep`).
    Sleep,
    /// Echo a structured payload back (claw's `structured_output`).
    StructuredOutput,
    /// A message for the operator, carried by the tool events (claw's
    /// `send_user_message`).
    SendUserMessage,
    /// Read a configuration key (claw's `config`; a run exposes none).
    Config,
    /// Read or replace the task list in `.claude/todos.json`.
    TodoWrite,
    /// Replace, insert or delete a Jupyter notebook cell.
    NotebookEdit,
}

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
        Self::ListFiles,
        Self::Tree,
        Self::SearchCodebase,
        Self::GitDiff,
        Self::GitStatus,
        Self::Patch,
        Self::RunCommand,
        Self::Sleep,
        Self::StructuredOutput,
        Self::SendUserMessage,
        Self::Config,
        Self::TodoWrite,
        Self::NotebookEdit,
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
            Self::ListFiles => "list_files",
            Self::Tree => "tree",
            Self::SearchCodebase => "search_codebase",
            Self::GitDiff => "git_diff",
            Self::GitStatus => "git_status",
            Self::Patch => "patch",
            Self::RunCommand => "run_command",
            Self::Sleep => "sleep",
            Self::StructuredOutput => "structured_output",
            Self::SendUserMessage => "send_user_message",
            Self::Config => "config",
            Self::TodoWrite => "todo_write",
            Self::NotebookEdit => "notebook_edit",
        }
    }

    /// Whether the tool never modifies the workspace (upstream
    /// `readOnlyTools`): a node offered only such tools may run in a
    /// parallel branch.
    pub fn read_only(self) -> bool {
        iterion_core::agent::READ_ONLY_TOOLS.contains(&self.name())
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
            Self::ListFiles => (
                "List the entries of a directory, one per line, directories with a trailing '/'.",
                json!({"type": "object", "properties": {
                    "path": {"type": "string", "description": "Directory to list (default: the workspace)"},
                    "recursive": {"type": "boolean", "description": "List every file below the directory instead of its direct entries"}}}),
            ),
            Self::Tree => (
                "Show a directory tree (directories first, .git skipped).",
                json!({"type": "object", "properties": {
                    "path": {"type": "string", "description": "Root of the tree (default: the workspace)"},
                    "depth": {"type": "integer", "description": "Levels shown (default 3, at most 10)"}}}),
            ),
            Self::SearchCodebase => (
                "Search the codebase for a regex. Returns matching lines as file:line:content.",
                json!({"type": "object", "properties": {
                    "query": {"type": "string", "description": "Regular expression to search for"},
                    "path": {"type": "string", "description": "Directory or file to search in (default: the workspace)"},
                    "glob": {"type": "string", "description": "File name filter (e.g. '*.go')"}},
                    "required": ["query"]}),
            ),
            Self::GitDiff => (
                "Show the git diff of the workspace: unstaged changes, staged ones, or against a revision.",
                json!({"type": "object", "properties": {
                    "staged": {"type": "boolean", "description": "Diff the index against HEAD instead of the working tree against the index"},
                    "base": {"type": "string", "description": "Revision to diff the working tree against (e.g. 'main', 'HEAD~1')"},
                    "paths": {"type": "array", "items": {"type": "string"}, "description": "Limit the diff to these paths"}}}),
            ),
            Self::GitStatus => (
                "Show the git status of the workspace (short format, with the branch).",
                json!({"type": "object", "properties": {}}),
            ),
            Self::Patch => (
                "Apply a unified diff (one or more files, as `git diff` or `diff -u` print it). Every hunk must apply or nothing is written.",
                json!({"type": "object", "properties": {
                    "patch": {"type": "string", "description": "The unified diff"}},
                    "required": ["patch"]}),
            ),
            Self::RunCommand => (
                "Run a shell command and return a JSON object with its exit_code and combined output; a non-zero exit is reported, not an error.",
                json!({"type": "object", "properties": {
                    "command": {"type": "string", "description": "The shell command to run"}},
                    "required": ["command"]}),
            ),
            Self::Sleep => (
                "Pause execution for a specified duration in milliseconds. Maximum 300000ms (5 minutes).",
                json!({"type": "object", "properties": {
                    "duration_ms": {"type": "integer", "description": "Duration to sleep in milliseconds (0 to 300000)."}},
                    "required": ["duration_ms"]}),
            ),
            Self::StructuredOutput => (
                "Return structured data as the final output. Pass your structured object under the \"payload\" key (e.g. {\"payload\": {\"key\": \"value\"}}); the input is echoed back as-is.",
                json!({"type": "object", "properties": {
                    "payload": {"type": "object", "description": "The structured output object to echo back. Any keys you include will be returned to the caller verbatim."}},
                    "required": ["payload"]}),
            ),
            Self::SendUserMessage => (
                "Send a message to the user with optional attachments.",
                json!({"type": "object", "properties": {
                    "message": {"type": "string", "description": "The message text to send."},
                    "status": {"type": "string", "description": "Message status: normal or proactive."},
                    "attachments": {"type": "array", "items": {"type": "string"}, "description": "File paths to attach to the message."}},
                    "required": ["message", "status"]}),
            ),
            Self::Config => (
                "Read configuration values. Returns the value for the specified key.",
                json!({"type": "object", "properties": {
                    "key": {"type": "string", "description": "The configuration key to read."}},
                    "required": ["key"]}),
            ),
            Self::TodoWrite => (
                "Read or write the task list stored in .claude/todos.json. Use action=read to retrieve todos, action=write to replace the list.",
                json!({"type": "object", "properties": {
                    "action": {"type": "string", "description": "\"read\" to retrieve the current todo list, \"write\" to replace it"},
                    "todos": {"type": "array", "description": "Array of todo items (required for action=write).",
                        "items": {"type": "object", "properties": {
                            "id": {"type": "string", "description": "Stable identifier for the todo item."},
                            "content": {"type": "string", "description": "Human-readable task description."},
                            "status": {"type": "string", "enum": ["pending", "in_progress", "done"], "description": "Current state of the item."},
                            "priority": {"type": "string", "enum": ["high", "medium", "low"], "description": "Priority tier."}},
                            "required": ["content", "status"]}}},
                    "required": ["action"]}),
            ),
            Self::NotebookEdit => (
                "Edit Jupyter notebook cells. Supports replace, insert, and delete operations on .ipynb files.",
                json!({"type": "object", "properties": {
                    "notebook_path": {"type": "string", "description": "Path to the .ipynb file."},
                    "cell_id": {"type": "string", "description": "Target cell ID or index (0-based)."},
                    "new_source": {"type": "string", "description": "New cell source content."},
                    "cell_type": {"type": "string", "description": "Cell type: code or markdown."},
                    "edit_mode": {"type": "string", "description": "Operation: replace, insert, or delete."}},
                    "required": ["notebook_path"]}),
            ),
        };
        ToolSpec {
            name: self.name().to_owned(),
            description: description.to_owned(),
            input_schema: schema,
        }
    }
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
        Builtin::ListFiles => blocking(ctx, input, list_files).await,
        Builtin::Tree => blocking(ctx, input, tree).await,
        Builtin::SearchCodebase => blocking(ctx, input, search_codebase).await,
        Builtin::GitDiff => git_diff(input, ctx).await,
        Builtin::GitStatus => git_status(ctx).await,
        Builtin::Patch => blocking(ctx, input, patch).await,
        Builtin::RunCommand => run_command(input, ctx).await,
        Builtin::Sleep => claw_extra::sleep(input, ctx).await,
        Builtin::StructuredOutput => claw_extra::structured_output(input, ctx),
        Builtin::SendUserMessage => blocking(ctx, input, claw_extra::send_user_message).await,
        Builtin::Config => claw_extra::config(input, ctx),
        Builtin::TodoWrite => blocking(ctx, input, claw_extra::todo_write).await,
        Builtin::NotebookEdit => blocking(ctx, input, claw_extra::notebook_edit).await,
    }
}

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
    search(ctx, "grep", pattern, raw, opt_str(input, "glob"))
}

fn search_codebase(input: &Value, ctx: &ToolContext) -> Result<String, String> {
    let pattern = str_arg(input, "search_codebase", "query")?;
    let raw = opt_str(input, "path").unwrap_or(".");
    search(ctx, "search_codebase", pattern, raw, opt_str(input, "glob"))
}

/// Lines matching `pattern` under `raw` (a file or a directory), as
/// `path:line:content`.
fn search(
    ctx: &ToolContext,
    tool: &str,
    pattern: &str,
    raw: &str,
    glob: Option<&str>,
) -> Result<String, String> {
    let re = regex::Regex::new(pattern).map_err(|e| format!("{tool}: invalid regex: {e}"))?;
    let root = resolve(ctx, tool, raw)?;
    let filter = match glob {
        Some(g) => Some(
            globset::Glob::new(g)
                .map_err(|e| format!("{tool}: invalid glob {g:?}: {e}"))?
                .compile_matcher(),
        ),
        None => None,
    };
    let mut out = Vec::new();
    // Sorted: the same tree gives the same answer (and the same cut).
    let walker = walkdir::WalkDir::new(&root)
        .follow_links(false)
        .sort_by_file_name()
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

// ---- listings -----------------------------------------------------------

/// Entries `list_files` and `tree` print at most.
pub const LIST_MAX_ENTRIES: usize = 1000;
/// `tree` depth when the call names none, and the most it may ask.
const TREE_DEFAULT_DEPTH: usize = 3;
const TREE_MAX_DEPTH: usize = 10;

fn list_files(input: &Value, ctx: &ToolContext) -> Result<String, String> {
    let raw = opt_str(input, "path").unwrap_or(".");
    let root = resolve(ctx, "list_files", raw)?;
    let recursive = input
        .get("recursive")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if !root.is_dir() {
        return Err(format!("list_files: {raw} is not a directory"));
    }
    let mut walker = walkdir::WalkDir::new(&root)
        .follow_links(false)
        .min_depth(1);
    if !recursive {
        walker = walker.max_depth(1);
    }
    let mut out = Vec::new();
    let mut truncated = false;
    for entry in walker
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| e.file_name() != ".git")
        .filter_map(Result::ok)
    {
        let is_dir = entry.file_type().is_dir();
        if recursive && is_dir {
            continue;
        }
        let Ok(rel) = entry.path().strip_prefix(&root) else {
            continue;
        };
        if out.len() == LIST_MAX_ENTRIES {
            truncated = true;
            break;
        }
        let slash = if is_dir { "/" } else { "" };
        out.push(format!("{}{slash}", rel.display()));
    }
    let mut text = out.join("\n");
    if truncated {
        text.push_str(TRUNCATED_MARK);
    }
    Ok(text)
}

fn tree(input: &Value, ctx: &ToolContext) -> Result<String, String> {
    let raw = opt_str(input, "path").unwrap_or(".");
    let root = resolve(ctx, "tree", raw)?;
    let depth = int_arg(input, "depth")
        .and_then(|d| usize::try_from(d).ok())
        .filter(|d| *d > 0)
        .unwrap_or(TREE_DEFAULT_DEPTH)
        .min(TREE_MAX_DEPTH);
    if !root.is_dir() {
        return Err(format!("tree: {raw} is not a directory"));
    }
    let mut out = vec![format!("{raw}/")];
    let walker = walkdir::WalkDir::new(&root)
        .follow_links(false)
        .min_depth(1)
        .max_depth(depth)
        // Directories first, then by name, at every level.
        .sort_by(|a, b| {
            (!a.file_type().is_dir(), a.file_name()).cmp(&(!b.file_type().is_dir(), b.file_name()))
        });
    for entry in walker
        .into_iter()
        .filter_entry(|e| e.file_name() != ".git")
        .filter_map(Result::ok)
    {
        if out.len() > LIST_MAX_ENTRIES {
            out.push(TRUNCATED_MARK.trim_start().to_owned());
            break;
        }
        let slash = if entry.file_type().is_dir() { "/" } else { "" };
        out.push(format!(
            "{}{}{slash}",
            "  ".repeat(entry.depth()),
            entry.file_name().to_string_lossy()
        ));
    }
    Ok(out.join("\n"))
}

// ---- git ----------------------------------------------------------------

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
    use std::path::PathBuf;

    use tokio_util::sync::CancellationToken;

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

    /// claw's simple tools (upstream vendored claw-code-go
    /// `internal/tools/{sleep,structured_output,send_message,config_tool,
    /// todo_write,notebook_edit}.go`), run for real on a workspace.
    #[tokio::test]
    async fn claw_simple_tools_do_what_they_say() {
        let (_d, root) = tmp();
        let c = ctx(&root, ToolArea::Confined(root.clone()));
        let run = |b: Builtin, input: Value| {
            let c = c.clone();
            async move { execute(b, &input, &c).await }
        };
        // sleep: waits, bounded, cancellable.
        let t = std::time::Instant::now();
        let out = run(Builtin::Sleep, json!({"duration_ms": 50}))
            .await
            .expect("sleep");
        assert!(t.elapsed() >= Duration::from_millis(50));
        assert!(out.contains("Slept for 50 ms"), "{out}");
        assert!(
            run(Builtin::Sleep, json!({"duration_ms": 300_001}))
                .await
                .is_err()
        );
        assert!(run(Builtin::Sleep, json!({})).await.is_err());
        let cancelled = ctx(&root, ToolArea::Confined(root.clone()));
        cancelled.cancel.cancel();
        let t = std::time::Instant::now();
        assert!(
            execute(Builtin::Sleep, &json!({"duration_ms": 10_000}), &cancelled)
                .await
                .is_err()
        );
        assert!(t.elapsed() < Duration::from_secs(5));
        // structured_output: echoes its payload.
        let out = run(Builtin::StructuredOutput, json!({"payload": {"k": 1}}))
            .await
            .expect("so");
        let v: Value = serde_json::from_str(&out).expect("json");
        assert_eq!(v["structured_output"]["payload"]["k"], 1);
        assert!(run(Builtin::StructuredOutput, json!({})).await.is_err());
        // send_user_message: the message and its attachments, confined.
        std::fs::write(root.join("shot.png"), b"png").expect("write");
        let out = run(
            Builtin::SendUserMessage,
            json!({"message": "hi", "status": "normal", "attachments": ["shot.png"]}),
        )
        .await
        .expect("msg");
        let v: Value = serde_json::from_str(&out).expect("json");
        assert_eq!(v["message"], "hi");
        assert_eq!(v["attachments"][0]["size"], 3);
        assert_eq!(v["attachments"][0]["isImage"], true);
        assert!(
            run(
                Builtin::SendUserMessage,
                json!({"message": "x", "attachments": ["../../etc/passwd"]})
            )
            .await
            .is_err()
        );
        assert!(
            run(Builtin::SendUserMessage, json!({"message": " "}))
                .await
                .is_err()
        );
        // config: a run exposes no configuration.
        let out = run(Builtin::Config, json!({"key": "model"}))
            .await
            .expect("config");
        assert_eq!(
            serde_json::from_str::<Value>(&out).expect("json")["found"],
            false
        );
        // todo_write: round trip through .claude/todos.json.
        assert_eq!(
            run(Builtin::TodoWrite, json!({"action": "read"}))
                .await
                .expect("empty"),
            "[]"
        );
        let todos = json!([{"id": "1", "content": "c", "status": "pending", "priority": "high"}]);
        run(
            Builtin::TodoWrite,
            json!({"action": "write", "todos": todos}),
        )
        .await
        .expect("write");
        let back: Value = serde_json::from_str(
            &run(Builtin::TodoWrite, json!({"action": "read"}))
                .await
                .expect("read"),
        )
        .expect("json");
        assert_eq!(back, todos);
        assert!(root.join(TODOS_PATH).is_file());
        let bad = json!({"action": "write", "todos": [{"id": "1", "content": "c", "status": "later", "priority": "high"}]});
        assert!(
            run(Builtin::TodoWrite, bad)
                .await
                .expect_err("status")
                .contains("invalid status")
        );
        // notebook_edit: replace, insert, delete on a real .ipynb.
        let nb = json!({"cells": [{"cell_type": "code", "id": "a", "source": ["x = 1"], "metadata": {}, "outputs": [], "execution_count": null}], "metadata": {"kernelspec": {"language": "python"}}, "nbformat": 4});
        std::fs::write(root.join("n.ipynb"), nb.to_string()).expect("nb");
        run(
            Builtin::NotebookEdit,
            json!({"notebook_path": "n.ipynb", "cell_id": "a", "new_source": "x = 2\ny = 3"}),
        )
        .await
        .expect("replace");
        run(Builtin::NotebookEdit, json!({"notebook_path": "n.ipynb", "cell_id": "0", "edit_mode": "insert", "cell_type": "markdown", "new_source": "# t"})).await.expect("insert");
        let v: Value = serde_json::from_slice(&std::fs::read(root.join("n.ipynb")).expect("read"))
            .expect("json");
        assert_eq!(v["cells"][0]["source"], json!(["x = 2\n", "y = 3"]));
        assert_eq!(v["cells"][1]["cell_type"], "markdown");
        assert_eq!(v["nbformat"], 4);
        run(
            Builtin::NotebookEdit,
            json!({"notebook_path": "n.ipynb", "cell_id": "a", "edit_mode": "delete"}),
        )
        .await
        .expect("delete");
        let v: Value = serde_json::from_slice(&std::fs::read(root.join("n.ipynb")).expect("read"))
            .expect("json");
        assert_eq!(v["cells"].as_array().map(Vec::len), Some(1));
        assert!(
            run(
                Builtin::NotebookEdit,
                json!({"notebook_path": "n.ipynb", "cell_id": "zz", "new_source": "q"})
            )
            .await
            .is_err()
        );
        let out = run(
            Builtin::NotebookEdit,
            json!({"notebook_path": "../../n.ipynb", "edit_mode": "insert", "new_source": "q"}),
        )
        .await;
        assert!(out.expect_err("confined").contains("outside the workspace"));
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

    #[tokio::test]
    async fn listings_and_search_codebase() {
        let (_d, root) = tmp();
        let c = ctx(&root, ToolArea::Confined(root.clone()));
        std::fs::create_dir_all(root.join("src/deep/er")).expect("dirs");
        std::fs::create_dir_all(root.join(".git")).expect("git dir");
        std::fs::write(root.join(".git/HEAD"), "ref").expect("w");
        std::fs::write(root.join("src/main.rs"), "fn main() {}\n// TODO: x\n").expect("w");
        std::fs::write(root.join("src/deep/er/x.txt"), "TODO later").expect("w");
        std::fs::write(root.join("README"), "hi").expect("w");
        let l = execute(Builtin::ListFiles, &json!({}), &c)
            .await
            .expect("ls");
        assert_eq!(l, "README\nsrc/");
        let l = execute(
            Builtin::ListFiles,
            &json!({"path": "src", "recursive": true}),
            &c,
        )
        .await
        .expect("ls -R");
        assert_eq!(l, "deep/er/x.txt\nmain.rs");
        let t = execute(Builtin::Tree, &json!({"depth": 2}), &c)
            .await
            .expect("tree");
        assert_eq!(t, "./\n  src/\n    deep/\n    main.rs\n  README");
        let hits = execute(Builtin::SearchCodebase, &json!({"query": "TODO"}), &c)
            .await
            .expect("search");
        assert_eq!(
            hits,
            "./src/deep/er/x.txt:1:TODO later\n./src/main.rs:2:// TODO: x"
        );
        let e = execute(Builtin::ListFiles, &json!({"path": ".."}), &c)
            .await
            .expect_err("outside");
        assert!(e.contains("outside the workspace"), "{e}");
        let e = execute(Builtin::SearchCodebase, &json!({}), &c)
            .await
            .expect_err("query");
        assert!(e.contains("'query' is required"), "{e}");
    }

    #[tokio::test]
    async fn patch_applies_all_or_nothing() {
        let (_d, root) = tmp();
        let c = ctx(&root, ToolArea::Confined(root.clone()));
        std::fs::write(root.join("a.txt"), "one\ntwo\nthree\n").expect("w");
        std::fs::write(root.join("gone.txt"), "bye\n").expect("w");
        let diff = "diff --git a/a.txt b/a.txt\nindex 1..2 100644\n--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+2\n three\n\
diff --git a/new/b.txt b/new/b.txt\nnew file mode 100644\n--- /dev/null\n+++ b/new/b.txt\n@@ -0,0 +1 @@\n+fresh\n\
--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n";
        let out = execute(Builtin::Patch, &json!({"patch": diff}), &c)
            .await
            .expect("apply");
        assert_eq!(out, "patched a.txt\npatched new/b.txt\ndeleted gone.txt");
        assert_eq!(
            std::fs::read_to_string(root.join("a.txt")).expect("r"),
            "one\n2\nthree\n"
        );
        assert_eq!(
            std::fs::read_to_string(root.join("new/b.txt")).expect("r"),
            "fresh\n"
        );
        assert!(!root.join("gone.txt").exists());
        // The second file's hunk does not apply: the first is not written.
        let bad = "--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n one\n-2\n+two\n three\n\
--- a/new/b.txt\n+++ b/new/b.txt\n@@ -1 +1 @@\n-not there\n+x\n";
        let e = execute(Builtin::Patch, &json!({"patch": bad}), &c)
            .await
            .expect_err("conflict");
        assert!(
            e.contains("new/b.txt") && e.contains("does not apply"),
            "{e}"
        );
        assert_eq!(
            std::fs::read_to_string(root.join("a.txt")).expect("r"),
            "one\n2\nthree\n"
        );
        let e = execute(Builtin::Patch, &json!({"patch": "just text"}), &c)
            .await
            .expect_err("not a diff");
        assert!(e.contains("unified diff"), "{e}");
        let escape = "--- a/../x\n+++ b/../x\n@@ -0,0 +1 @@\n+x\n";
        let e = execute(Builtin::Patch, &json!({"patch": escape}), &c)
            .await
            .expect_err("outside");
        assert!(
            e.contains("outside the workspace") || e.contains("no such"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn run_command_reports_the_exit_code_as_data() {
        let (_d, root) = tmp();
        let c = ctx(&root, ToolArea::Container);
        let out = execute(
            Builtin::RunCommand,
            &json!({"command": "echo ok; exit 4"}),
            &c,
        )
        .await
        .expect("data");
        let v: Value = serde_json::from_str(&out).expect("json");
        assert_eq!(v, json!({"exit_code": 4, "output": "ok\n"}));
    }

    #[tokio::test]
    async fn git_tools_show_status_and_diff() {
        let (_d, root) = tmp();
        let c = ctx(&root, ToolArea::Confined(root.clone()));
        let e = execute(Builtin::GitStatus, &json!({}), &c)
            .await
            .expect_err("no repo");
        assert!(e.contains("git exited with code"), "{e}");
        let setup = "git init -q -b main . && git -c user.name=t -c user.email=t@t commit -q --allow-empty -m init \
            && printf 'a\\n' > f.txt && git add f.txt && git -c user.name=t -c user.email=t@t commit -q -m f \
            && printf 'b\\n' > f.txt && printf 'n\\n' > new.txt";
        execute(Builtin::Bash, &json!({"command": setup}), &c)
            .await
            .expect("repo");
        let st = execute(Builtin::GitStatus, &json!({}), &c)
            .await
            .expect("status");
        assert!(st.starts_with("## main"), "{st}");
        assert!(st.contains(" M f.txt") && st.contains("?? new.txt"), "{st}");
        let d = execute(Builtin::GitDiff, &json!({"paths": ["f.txt"]}), &c)
            .await
            .expect("diff");
        assert!(d.contains("-a\n+b"), "{d}");
        let staged = execute(Builtin::GitDiff, &json!({"staged": true}), &c)
            .await
            .expect("staged");
        assert_eq!(staged, "");
        let base = execute(Builtin::GitDiff, &json!({"base": "HEAD~1"}), &c)
            .await
            .expect("base");
        assert!(base.contains("+b"), "{base}");
        let e = execute(Builtin::GitDiff, &json!({"base": "--output=/tmp/x"}), &c)
            .await
            .expect_err("option");
        assert!(e.contains("not a revision"), "{e}");
    }

    #[test]
    fn html_is_stripped() {
        let t = strip_html("<html><script>x()</script><p>Hello   <b>world</b></p>\n\n\n\n</html>");
        assert_eq!(t, "Hello world");
    }
}
