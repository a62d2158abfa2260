//! The git family (`git_diff`, `git_status`) and `patch`: git run with no
//! pager, prompt or colour and its output bounded; a unified diff split
//! per file and applied inside the area.

use std::path::PathBuf;

use serde_json::Value;

use super::context::{ToolContext, opt_str, resolve, str_arg};
use super::process::run_bounded;

/// Bytes of `git` output kept (a diff is worth more than a shell's noise;
/// the loop's result cap still applies after).
pub const GIT_OUTPUT_CAP: usize = 200_000;

async fn git(args: Vec<String>, ctx: &ToolContext, tool: &str) -> Result<String, String> {
    let mut cmd = tokio::process::Command::new("git");
    // No pager, no prompt, no colours: the output is for a model.
    cmd.args(["--no-pager", "-c", "color.ui=never"])
        .args(&args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_PAGER", "cat");
    let (code, out) = run_bounded(cmd, ctx, tool, GIT_OUTPUT_CAP).await?;
    match code {
        Some(0) => Ok(out),
        Some(c) => Err(format!("{out}\n{tool}: git exited with code {c}")),
        None => Err(format!("{out}\n{tool}: git killed by a signal")),
    }
}

pub(super) async fn git_diff(input: &Value, ctx: &ToolContext) -> Result<String, String> {
    let mut args = vec!["diff".to_owned()];
    if input.get("staged").and_then(Value::as_bool) == Some(true) {
        args.push("--cached".to_owned());
    }
    if let Some(base) = opt_str(input, "base") {
        // A revision, never an option smuggled into git's argv.
        if base.starts_with('-') {
            return Err(format!("git_diff: base {base:?} is not a revision"));
        }
        args.push(base.to_owned());
    }
    args.push("--".to_owned());
    if let Some(paths) = input.get("paths").and_then(Value::as_array) {
        for p in paths {
            let p = p
                .as_str()
                .ok_or("git_diff: 'paths' must be a list of strings")?;
            // Confined like every file tool (a no-op inside the container).
            resolve(ctx, "git_diff", p)?;
            args.push(p.to_owned());
        }
    }
    git(args, ctx, "git_diff").await
}

pub(super) async fn git_status(ctx: &ToolContext) -> Result<String, String> {
    git(
        vec!["status".into(), "--short".into(), "--branch".into()],
        ctx,
        "git_status",
    )
    .await
}

// ---- patch --------------------------------------------------------------

/// One file's part of a unified diff.
struct FilePatch<'a> {
    old: Option<String>,
    new: Option<String>,
    text: &'a str,
}

/// Split a multi-file unified diff at its `--- ` headers (a `diff --git`
/// or `Index:` preamble is dropped); `a/`/`b/` prefixes are stripped and
/// `/dev/null` is an absent side.
fn split_patch(text: &str) -> Result<Vec<FilePatch<'_>>, String> {
    let mut starts = Vec::new();
    let mut offset = 0;
    let mut lines = text.split_inclusive('\n').peekable();
    while let Some(line) = lines.next() {
        if line.starts_with("--- ") && lines.peek().is_some_and(|n| n.starts_with("+++ ")) {
            starts.push(offset);
        }
        offset += line.len();
    }
    if starts.is_empty() {
        return Err("patch: no `--- `/`+++ ` file header found; send a unified diff".to_owned());
    }
    let side = |header: &str, prefix: &str| -> Option<String> {
        let name = header.strip_prefix(prefix)?.trim_end_matches(['\n', '\r']);
        // `diff -u` appends a tab and a timestamp.
        let name = name.split('\t').next().unwrap_or(name).trim();
        if name == "/dev/null" {
            return None;
        }
        Some(
            name.strip_prefix("a/")
                .or_else(|| name.strip_prefix("b/"))
                .unwrap_or(name)
                .to_owned(),
        )
    };
    let mut out = Vec::new();
    for (i, &start) in starts.iter().enumerate() {
        let end = starts.get(i + 1).copied().unwrap_or(text.len());
        let chunk = &text[start..end];
        // Drop a following file's preamble (`diff --git …`, `index …`).
        let body_end = chunk
            .match_indices("\ndiff --git ")
            .map(|(i, _)| i + 1)
            .next()
            .unwrap_or(chunk.len());
        let chunk = &chunk[..body_end];
        let mut hl = chunk.lines();
        let old = hl.next().and_then(|l| side(l, "--- "));
        let new = hl.next().and_then(|l| side(l, "+++ "));
        if old.is_none() && new.is_none() {
            return Err("patch: a file header names /dev/null on both sides".to_owned());
        }
        out.push(FilePatch {
            old,
            new,
            text: chunk,
        });
    }
    Ok(out)
}

pub(super) fn patch(input: &Value, ctx: &ToolContext) -> Result<String, String> {
    let text = str_arg(input, "patch", "patch")?;
    let files = split_patch(text)?;
    // Every hunk is checked before anything is written: all or nothing.
    let mut writes: Vec<(PathBuf, Option<String>, String)> = Vec::new();
    for f in &files {
        let target = f.new.as_deref().or(f.old.as_deref()).unwrap_or_default();
        let parsed = diffy::Patch::from_str(f.text)
            .map_err(|e| format!("patch: {target}: cannot parse the diff: {e}"))?;
        let base = match &f.old {
            None => String::new(),
            Some(old) => {
                let path = resolve(ctx, "patch", old)?;
                std::fs::read_to_string(&path).map_err(|e| format!("patch: {old}: {e}"))?
            }
        };
        let result = diffy::apply(&base, &parsed)
            .map_err(|e| format!("patch: {target}: the diff does not apply: {e}"))?;
        match &f.new {
            Some(new) => writes.push((resolve(ctx, "patch", new)?, Some(result), new.clone())),
            None => writes.push((resolve(ctx, "patch", target)?, None, target.to_owned())),
        }
    }
    let mut done = Vec::new();
    for (path, content, shown) in writes {
        match content {
            Some(c) => {
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent)
                        .map_err(|e| format!("patch: {shown}: create directories: {e}"))?;
                }
                std::fs::write(&path, c).map_err(|e| format!("patch: {shown}: {e}"))?;
                done.push(format!("patched {shown}"));
            }
            None => {
                std::fs::remove_file(&path).map_err(|e| format!("patch: {shown}: {e}"))?;
                done.push(format!("deleted {shown}"));
            }
        }
    }
    Ok(done.join("\n"))
}

// ---- web_fetch ----------------------------------------------------------
