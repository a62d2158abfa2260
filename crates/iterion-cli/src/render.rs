//! Human rendering of a run's events: a live view on a terminal (a
//! spinner with the current step and elapsed time, a bar while an image is
//! pulled) and plain lines otherwise. Rendering reads events; it never
//! drives the run (ARCHITECTURE.md, "One run, walked"). Every line it prints
//! passes through `iterion_core::display::printable`: event data is
//! run-supplied (node ids, host names, errors) and must not drive the
//! terminal.

use std::io::{IsTerminal, Write as _};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use iterion_core::EventRecord;
use iterion_core::display::printable;
use serde_json::Value;
use tokio::sync::mpsc::UnboundedReceiver;

/// Render events until the sender side closes.
pub async fn render_events(mut rx: UnboundedReceiver<EventRecord>) {
    let started = Instant::now();
    let live = std::io::stderr().is_terminal();
    let spinner = live.then(|| {
        let bar = ProgressBar::new_spinner();
        bar.set_style(
            ProgressStyle::with_template("{spinner} [{elapsed}] {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.enable_steady_tick(Duration::from_millis(120));
        bar.set_message("starting");
        bar
    });
    while let Some(event) = rx.recv().await {
        let elapsed = started.elapsed().as_secs_f64();
        if let Some(bar) = &spinner {
            if event.kind == "sandbox_image_pull" {
                let d = &event.data;
                let msg = format!(
                    "pulling {} {} {}",
                    s(d, "image"),
                    s(d, "status"),
                    progress(d)
                );
                bar.set_message(printable(&msg).into_owned());
                continue;
            }
            if let Some(step) = step_of(&event) {
                bar.set_message(printable(&step).into_owned());
            }
        }
        let Some(line) = describe(&event) else {
            continue;
        };
        match &spinner {
            Some(bar) => bar.println(format!("[{elapsed:7.2}s] {line}")),
            // A failed write (a hung-up terminal after SIGHUP) never stops
            // the run or its teardown.
            None => {
                let _ = writeln!(std::io::stderr(), "[{elapsed:7.2}s] {line}");
            }
        }
    }
    if let Some(bar) = spinner {
        bar.finish_and_clear();
    }
}

fn s<'a>(data: &'a Value, key: &str) -> &'a str {
    data.get(key).and_then(Value::as_str).unwrap_or("")
}

fn progress(d: &Value) -> String {
    match (
        d.get("current").and_then(Value::as_u64),
        d.get("total").and_then(Value::as_u64),
    ) {
        (Some(c), Some(t)) if t > 0 => format!("{}%", c * 100 / t),
        _ => String::new(),
    }
}

fn step_of(event: &EventRecord) -> Option<String> {
    let node = event
        .node_id
        .as_ref()
        .map(|n| n.to_string())
        .unwrap_or_default();
    match event.kind.as_str() {
        "sandbox_driver_selected" => Some("preparing the sandbox".into()),
        "sandbox_build_started" => Some("building the sandbox image".into()),
        "sandbox_started" => Some("sandbox up".into()),
        "node_started" => Some(format!("running {node}")),
        "node_finished" | "node_failed" => Some("routing".into()),
        "run_finished" | "run_failed" | "run_cancelled" => Some("tearing down".into()),
        _ => None,
    }
}

/// One line for an event, or `None` for events only the spinner shows;
/// control and bidi characters of run-supplied text come out escaped.
pub fn describe(event: &EventRecord) -> Option<String> {
    describe_raw(event).map(|line| printable(&line).into_owned())
}

fn describe_raw(event: &EventRecord) -> Option<String> {
    let d = &event.data;
    let node = event
        .node_id
        .as_ref()
        .map(|n| n.to_string())
        .unwrap_or_default();
    Some(match event.kind.as_str() {
        "run_started" => format!(
            "run {} of {} ({})",
            event.run_id,
            s(d, "workflow"),
            s(d, "file")
        ),
        "run_admission" => format!("admission {}: {}", s(d, "decision"), s(d, "reason")),
        "sandbox_driver_selected" => {
            format!(
                "sandbox: {} driver on a {} host",
                s(d, "driver"),
                s(d, "host")
            )
        }
        "sandbox_skipped" if d.get("refused").and_then(Value::as_bool) == Some(true) => format!(
            "sandbox: REFUSED ({}) — {}",
            s(d, "error_code"),
            s(d, "reason")
        ),
        "sandbox_skipped" => format!(
            "sandbox: skipped, running on the host ({} from {}) — {}",
            s(d, "mode"),
            s(d, "source"),
            s(d, "reason")
        ),
        "sandbox_started" => format!(
            "sandbox: {} started from {} (mode {}, {}; egress {})",
            s(d, "container"),
            s(d, "image"),
            s(d, "mode"),
            s(d, "source"),
            s(d, "egress")
        ),
        "sandbox_host_state_mounted" => format!(
            "sandbox: host state {} ({}), {} mount(s), workspace at {}",
            if d.get("enabled").and_then(Value::as_bool) == Some(true) {
                "auto"
            } else {
                "none"
            },
            s(d, "source"),
            d.get("mounts")
                .and_then(Value::as_array)
                .map_or(0, Vec::len),
            s(d, "workspace_folder")
        ),
        "sandbox_host_binds_dropped" => format!("sandbox: host binds dropped: {}", d["dropped"]),
        "sandbox_egress_unenforced" => {
            format!(
                "sandbox: WARNING egress is advisory only — {}",
                s(d, "reason")
            )
        }
        "sandbox_build_failed" => format!("sandbox: build failed: {}", s(d, "error")),
        "node_started" => format!("▶ {node}{}", in_branch(d)),
        "node_finished" => format!(
            "✓ {node}{} ({} ms) {}",
            in_branch(d),
            d.get("duration_ms").and_then(Value::as_u64).unwrap_or(0),
            compact(&d["output"])
        ),
        "node_failed" => format!(
            "✗ {node}{}: {} {}",
            in_branch(d),
            s(d, "error"),
            s(d, "stderr_tail").trim()
        ),
        "branch_started" => match d.get("index").and_then(Value::as_u64) {
            Some(i) => format!(
                "⇉ {} item {i} → {} ({})",
                s(d, "from"),
                s(d, "to"),
                s(d, "branch_id")
            ),
            None => format!(
                "⇉ {} → {} ({})",
                s(d, "from"),
                s(d, "to"),
                s(d, "branch_id")
            ),
        },
        "branch_finished" => format!("⇇ {} {}", s(d, "branch_id"), s(d, "outcome")),
        "join_ready" if node.is_empty() => {
            format!("⋈ every branch reached done ({})", s(d, "strategy"))
        }
        "join_ready" => format!(
            "⋈ join at {node} ({}, {} branch(es), {} failed)",
            s(d, "strategy"),
            d.get("branches").and_then(Value::as_u64).unwrap_or(0),
            d.get("failed_branches")
                .and_then(Value::as_array)
                .map_or(0, Vec::len)
        ),
        "edge_selected" | "run_checkpoint" => return None,
        // An agent's steps as they happen (issue 11 item 7): one line per
        // model call, tool call and outcome, tagged with the node.
        "delegate_started" => format!("  {node}: agent on {}{}", s(d, "backend"), in_branch(d)),
        "llm_request" => format!(
            "  {node}: → {} ({} messages, {} tools)",
            s(d, "model"),
            num(d, "message_count"),
            num(d, "tool_count")
        ),
        "llm_step_finished" => format!(
            "  {node}: ← step {}: {} ({} in / {} out tokens{})",
            num(d, "step"),
            s(d, "finish_reason"),
            num(d, "input_tokens"),
            num(d, "output_tokens"),
            match d.get("tool_calls").and_then(Value::as_u64) {
                Some(n) if n > 0 => format!(", {n} tool call(s)"),
                _ => String::new(),
            }
        ),
        "llm_retry" => format!(
            "  {node}: retry {} in {} ms: {}",
            num(d, "attempt"),
            num(d, "delay_ms"),
            s(d, "error")
        ),
        "tool_started" => format!("  {node}: ⚙ {} ({})", s(d, "tool"), s(d, "placement")),
        "tool_called" => format!(
            "  {node}: ✓ {} {} ms, {} bytes",
            s(d, "tool"),
            num(d, "duration_ms"),
            num(d, "output_size")
        ),
        "tool_error" => format!("  {node}: ✗ {}: {}", s(d, "tool"), s(d, "error")),
        "tool_denied" => format!("  {node}: ⊘ {}: {}", s(d, "tool"), s(d, "reason")),
        "delegate_finished" => format!(
            "  {node}: agent done in {} ms, {} tokens",
            num(d, "duration_ms"),
            num(d, "tokens")
        ),
        "delegate_error" => format!(
            "  {node}: agent failed ({}): {}",
            s(d, "code"),
            s(d, "error")
        ),
        // The run's own bounds (max_duration, max_iterations) name no node.
        "budget_exceeded" if node.is_empty() => format!(
            "budget exceeded: {} {} of {}",
            s(d, "dimension"),
            d.get("used").and_then(Value::as_f64).unwrap_or(0.0),
            d.get("limit").and_then(Value::as_f64).unwrap_or(0.0)
        ),
        "budget_warning" | "budget_exceeded" => format!(
            "  {node}: {} {}: {} of {}",
            event.kind.replace('_', " "),
            s(d, "dimension"),
            d["used"],
            d["limit"]
        ),
        "sandbox_claw_routed_via_runner" => {
            "sandbox: claw nodes run in the box (iterion __claw-runner)".into()
        }
        "network_blocked" => format!(
            "egress: blocked {}:{} ({}, rule {}){}",
            s(d, "host"),
            d.get("port").and_then(Value::as_u64).unwrap_or(0),
            s(d, "reason"),
            d.get("rule").and_then(Value::as_str).unwrap_or("none"),
            if node.is_empty() {
                String::new()
            } else {
                format!(" by {node}")
            }
        ),
        "sandbox_runfiles_drained" => format!(
            "run files: {} file(s), {} bytes drained",
            d.get("files").and_then(Value::as_u64).unwrap_or(0),
            d.get("bytes").and_then(Value::as_u64).unwrap_or(0)
        ),
        "sandbox_runfiles_drain_failed" => format!(
            "run files: DRAIN {} (declined: {})",
            s(d, "reason"),
            d["declined"]
        ),
        "sandbox_cleanup" => format!("sandbox: {} removed", s(d, "container")),
        "sandbox_limit_reached" => format!(
            "sandbox: {} limit reached{} — {}",
            s(d, "limit"),
            d.get("bound")
                .and_then(Value::as_u64)
                .map_or_else(String::new, |b| format!(" ({})", iterion_core::ByteSize(b))),
            s(d, "detail")
        ),
        "worktree_created" => format!(
            "worktree: {} (from {} at {})",
            s(d, "path"),
            d.get("branch")
                .and_then(Value::as_str)
                .unwrap_or("a detached HEAD"),
            short(s(d, "base_commit"))
        ),
        "worktree_finalized" => match d.get("final_branch").and_then(Value::as_str) {
            Some(branch) => format!(
                "worktree: commits on {branch}, merge {}{}{}",
                s(d, "merge_status"),
                d.get("merged_into")
                    .and_then(Value::as_str)
                    .map_or_else(String::new, |t| format!(" into {t}")),
                d.get("reason")
                    .and_then(Value::as_str)
                    .map_or_else(String::new, |r| format!(" ({r})"))
            ),
            None => format!(
                "worktree: {}",
                d.get("reason")
                    .and_then(Value::as_str)
                    .unwrap_or("no branch")
            ),
        },
        "worktree_branch_failed" => format!(
            "worktree: WARNING no branch for commit {} ({}): {}",
            s(d, "sha"),
            s(d, "reason"),
            s(d, "error")
        ),
        "worktree_kept" => format!("worktree kept ({}): {}", s(d, "reason"), s(d, "path")),
        "run_finished" => "run finished".into(),
        "run_failed" => format!(
            "run {} ({}): {}",
            s(d, "status"),
            s(d, "failure_code"),
            s(d, "error")
        ),
        "run_cancelled" => format!("run cancelled: {}", s(d, "reason")),
        "run_attachment_lost" => format!(
            "attachment {} LOST{}: {}",
            s(d, "name"),
            if d["required"] == true {
                " (required)"
            } else {
                ""
            },
            s(d, "reason")
        ),
        "sandbox_attachments_copied" => format!(
            "attachments: {} file(s), {} bytes copied into the sandbox",
            num(d, "count"),
            num(d, "bytes")
        ),
        "sandbox_image_pull" => return None,
        other => format!("{other} {}", compact(d)),
    })
}

/// A commit id, abbreviated as git does.
fn short(sha: &str) -> &str {
    sha.get(..7).unwrap_or(sha)
}

/// A number field, 0 when absent.
fn num(d: &Value, key: &str) -> u64 {
    d.get(key).and_then(Value::as_u64).unwrap_or(0)
}

/// ` [branch]` for an event inside a parallel branch.
fn in_branch(d: &Value) -> String {
    d.get("branch_id")
        .and_then(Value::as_str)
        .map_or_else(String::new, |b| format!(" [{b}]"))
}

fn compact(v: &Value) -> String {
    let text = v.to_string();
    if text.len() > 200 {
        format!("{}…", text.chars().take(200).collect::<String>())
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use iterion_core::{NodeId, RunId};
    use serde_json::json;

    use super::*;

    #[test]
    fn the_live_view_escapes_run_supplied_text() {
        let event = EventRecord {
            seq: 3,
            timestamp: time::OffsetDateTime::UNIX_EPOCH,
            kind: "network_blocked".into(),
            run_id: RunId::parse("r1").unwrap(),
            node_id: Some(NodeId::new("n\u{1b}[2K")),
            data: json!({"host": "a\r\n[   1.00s] run finished\u{1b}[8m", "port": 443, "reason": "blocked"}),
        };
        let line = describe(&event).unwrap();
        assert!(!line.chars().any(char::is_control), "{line:?}");
        assert!(
            line.contains("a\\r\\n[   1.00s] run finished\\x1b[8m"),
            "{line}"
        );
        assert!(line.ends_with("by n\\x1b[2K"), "{line}");
    }
}
