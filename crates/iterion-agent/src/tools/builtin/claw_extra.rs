//! The claw tools beyond the seven file/shell/HTTP ones whose behaviour is
//! self-contained (upstream `pkg/backend/tool/claw_builtins.go`
//! `RegisterClawSimple`/`RegisterClawTodo`/`RegisterClawConfig`, semantics
//! of its vendored claw-code-go `internal/tools/{sleep,structured_output,
//! send_message,config_tool,todo_write,notebook_edit}.go`): `sleep`,
//! `structured_output`, `send_user_message`, `config`, `todo_write`,
//! `notebook_edit`. Each does what its description says, here; none is a
//! stand-in.

use std::time::Duration;

use serde_json::{Map, Value, json};

use super::context::{ToolContext, int_arg, opt_str, resolve, str_arg};

/// Longest `sleep` (claw's bound: five minutes).
pub const SLEEP_MAX_MS: i64 = 300_000;

/// Where `todo_write` keeps the list, relative to the workdir (claw's path).
pub const TODOS_PATH: &str = ".claude/todos.json";

pub(super) async fn sleep(input: &Value, ctx: &ToolContext) -> Result<String, String> {
    let ms = match input.get("duration_ms") {
        None => return Err("sleep: 'duration_ms' is required".to_owned()),
        Some(_) => int_arg(input, "duration_ms")
            .filter(|ms| *ms >= 0)
            .ok_or("sleep: 'duration_ms' must be a non-negative integer")?,
    };
    if ms > SLEEP_MAX_MS {
        return Err(format!(
            "sleep: duration_ms {ms} exceeds maximum of {SLEEP_MAX_MS} ms"
        ));
    }
    let wait = Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    tokio::select! {
        () = tokio::time::sleep(wait) => {}
        () = ctx.cancel.cancelled() => return Err("sleep: cancelled".to_owned()),
    }
    Ok(pretty(
        &json!({"duration_ms": ms, "message": format!("Slept for {ms} ms")}),
    ))
}

pub(super) fn structured_output(input: &Value, _ctx: &ToolContext) -> Result<String, String> {
    match input.as_object() {
        Some(m) if !m.is_empty() => Ok(pretty(&json!({
            "data": "Structured output provided successfully",
            "structured_output": input,
        }))),
        _ => Err("structured_output: payload must not be empty".to_owned()),
    }
}

pub(super) fn send_user_message(input: &Value, ctx: &ToolContext) -> Result<String, String> {
    let message = input
        .get("message")
        .and_then(Value::as_str)
        .filter(|m| !m.trim().is_empty())
        .ok_or("send_user_message: 'message' is required and must not be empty")?;
    let mut attachments = Vec::new();
    for raw in input
        .get("attachments")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        let path = resolve(ctx, "send_user_message", raw)?;
        let meta = std::fs::metadata(&path)
            .map_err(|e| format!("send_user_message: attachment {raw:?}: {e}"))?;
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
            .unwrap_or_default();
        attachments.push(json!({
            "path": raw,
            "size": meta.len(),
            "isImage": matches!(ext.as_str(), "png" | "jpg" | "jpeg" | "gif" | "webp" | "bmp" | "svg"),
        }));
    }
    let sent_at = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    // The message reaches the operator through the run's tool events
    // (`tool_called` carries the input); the result says when.
    Ok(pretty(&json!({
        "message": message,
        "sentAt": sent_at,
        "attachments": attachments,
    })))
}

pub(super) fn config(input: &Value, _ctx: &ToolContext) -> Result<String, String> {
    let key = str_arg(input, "config", "key")?;
    // Upstream registers the tool over an empty map in a run (its
    // `ClawDefaults.Config` is never set by the run view): every key is
    // answered, and none is found.
    Ok(pretty(&json!({"key": key, "found": false, "value": null})))
}

pub(super) fn todo_write(input: &Value, ctx: &ToolContext) -> Result<String, String> {
    let action = str_arg(input, "todo_write", "action")?;
    let path = resolve(ctx, "todo_write", TODOS_PATH)?;
    match action {
        "read" => match std::fs::read(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok("[]".to_owned()),
            Err(e) => Err(format!("todo_write: read: {e}")),
            Ok(bytes) => {
                let todos: Vec<Value> = serde_json::from_slice(&bytes)
                    .map_err(|e| format!("todo_write: parse todos: {e}"))?;
                Ok(pretty(&Value::Array(todos)))
            }
        },
        "write" => {
            let todos = input
                .get("todos")
                .and_then(Value::as_array)
                .ok_or("todo_write: 'todos' array is required for action=write")?;
            for (i, t) in todos.iter().enumerate() {
                let field = |k: &str| t.get(k).and_then(Value::as_str).unwrap_or_default();
                let id = field("id");
                if id.is_empty() {
                    return Err(format!("todo_write: item {i} missing id"));
                }
                if field("content").is_empty() {
                    return Err(format!("todo_write: item {i} ({id}) missing content"));
                }
                if !matches!(field("status"), "pending" | "in_progress" | "done") {
                    return Err(format!(
                        "todo_write: item {i} ({id}) invalid status {:?}",
                        field("status")
                    ));
                }
                if !matches!(field("priority"), "high" | "medium" | "low") {
                    return Err(format!(
                        "todo_write: item {i} ({id}) invalid priority {:?}",
                        field("priority")
                    ));
                }
            }
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| format!("todo_write: create dir: {e}"))?;
            }
            std::fs::write(&path, pretty(&Value::Array(todos.clone())))
                .map_err(|e| format!("todo_write: write file: {e}"))?;
            Ok(format!(
                "Wrote {} todo item(s) to {TODOS_PATH}",
                todos.len()
            ))
        }
        other => Err(format!(
            "todo_write: unknown action {other:?} (use read or write)"
        )),
    }
}

pub(super) fn notebook_edit(input: &Value, ctx: &ToolContext) -> Result<String, String> {
    let raw = str_arg(input, "notebook_edit", "notebook_path")?;
    let path = resolve(ctx, "notebook_edit", raw)?;
    let text =
        std::fs::read(&path).map_err(|e| format!("notebook_edit: cannot read {raw}: {e}"))?;
    let mut notebook: Map<String, Value> = serde_json::from_slice(&text)
        .map_err(|e| format!("notebook_edit: invalid notebook JSON: {e}"))?;
    let mut cells = match notebook.remove("cells") {
        Some(Value::Array(c)) => c,
        Some(_) => return Err("notebook_edit: cannot parse cells: not an array".to_owned()),
        None => return Err("notebook_edit: notebook has no 'cells' field".to_owned()),
    };
    let mode = opt_str(input, "edit_mode")
        .unwrap_or("replace")
        .to_ascii_lowercase();
    let cell_type = opt_str(input, "cell_type")
        .unwrap_or("code")
        .to_ascii_lowercase();
    let source = opt_str(input, "new_source").unwrap_or_default();
    let cell_id = opt_str(input, "cell_id").unwrap_or_default();
    let target = (!cell_id.is_empty())
        .then(|| {
            cell_id
                .parse::<usize>()
                .ok()
                .filter(|i| *i < cells.len())
                .or_else(|| {
                    cells.iter().position(|c| {
                        c.get("id").and_then(Value::as_str) == Some(cell_id)
                            || c.pointer("/metadata/id").and_then(Value::as_str) == Some(cell_id)
                    })
                })
        })
        .flatten();
    let result_id = match mode.as_str() {
        "replace" => {
            let i = target.ok_or_else(|| format!("notebook_edit: cell not found: {cell_id}"))?;
            if source.is_empty() {
                return Err("notebook_edit: 'new_source' is required for replace mode".to_owned());
            }
            let cell = cells[i]
                .as_object_mut()
                .ok_or("notebook_edit: cannot parse target cell")?;
            cell.insert("source".into(), split_source(source));
            cell.insert("cell_type".into(), Value::String(cell_type.clone()));
            if cell_type == "code" {
                cell.entry("outputs").or_insert_with(|| json!([]));
                cell.entry("execution_count").or_insert(Value::Null);
            } else {
                cell.remove("outputs");
                cell.remove("execution_count");
            }
            cell_id.to_owned()
        }
        "insert" => {
            if source.is_empty() {
                return Err("notebook_edit: 'new_source' is required for insert mode".to_owned());
            }
            let mut cell =
                json!({"cell_type": cell_type, "source": split_source(source), "metadata": {}});
            if cell_type == "code" {
                cell["outputs"] = json!([]);
                cell["execution_count"] = Value::Null;
            }
            let at = target.map_or(cells.len(), |i| i + 1);
            cells.insert(at, cell);
            format!("new_cell_{at}")
        }
        "delete" => {
            let i = target
                .ok_or_else(|| format!("notebook_edit: cell not found for delete: {cell_id}"))?;
            cells.remove(i);
            cell_id.to_owned()
        }
        other => {
            return Err(format!(
                "notebook_edit: unsupported edit_mode {other:?} (supported: replace, insert, delete)"
            ));
        }
    };
    let language = notebook
        .get("metadata")
        .and_then(|m| m.pointer("/kernelspec/language"))
        .and_then(Value::as_str)
        .filter(|l| !l.is_empty())
        .unwrap_or("python")
        .to_owned();
    notebook.insert("cells".into(), Value::Array(cells));
    let body = serde_json::to_string_pretty(&Value::Object(notebook))
        .map_err(|e| format!("notebook_edit: failed to serialize notebook: {e}"))?;
    std::fs::write(&path, body)
        .map_err(|e| format!("notebook_edit: failed to write {raw}: {e}"))?;
    let mut out = json!({
        "cell_id": result_id,
        "cell_type": cell_type,
        "edit_mode": mode,
        "language": language,
    });
    if !source.is_empty() {
        out["new_source"] = Value::String(source.to_owned());
    }
    Ok(pretty(&out))
}

/// A notebook cell's source as Jupyter stores it: lines, each but the
/// last keeping its newline.
fn split_source(s: &str) -> Value {
    let parts: Vec<&str> = s.split('\n').collect();
    let last = parts.len() - 1;
    Value::Array(
        parts
            .iter()
            .enumerate()
            .map(|(i, l)| {
                Value::String(if i < last {
                    format!("{l}\n")
                } else {
                    (*l).to_owned()
                })
            })
            .collect(),
    )
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}
