//! Human rendering of a run's events: a live view on a terminal (a
//! spinner with the current step and elapsed time, a bar while an image is
//! pulled) and plain lines otherwise. Rendering reads events; it never
//! drives the run (ARCHITECTURE.md, "One run, walked"). Every line it prints
//! passes through `iterion_core::display::printable`: event data is
//! run-supplied (node ids, host names, errors) and must not drive the
//! terminal. Each line is built from the event's typed payload
//! (`EventRecord::payload`), so a field cannot be misspelt into an empty
//! string; what this build cannot type is shown as its name and data.

use std::io::{IsTerminal, Write as _};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use iterion_core::display::printable;
use iterion_core::event::Payload;
use iterion_core::{EventKind, EventRecord};
use serde::Serialize;
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
        let payload = event.payload();
        if let Some(bar) = &spinner {
            if let Some(EventKind::SandboxImagePull {
                image,
                status,
                current,
                total,
            }) = payload.known()
            {
                let msg = format!("pulling {image} {status} {}", progress(*current, *total));
                bar.set_message(printable(&msg).into_owned());
                continue;
            }
            if let Some(step) = step_of(&event, &payload) {
                bar.set_message(printable(&step).into_owned());
            }
        }
        let Some(line) = describe(&event, &payload) else {
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

fn progress(current: Option<u64>, total: Option<u64>) -> String {
    match (current, total) {
        (Some(c), Some(t)) if t > 0 => format!("{}%", c * 100 / t),
        _ => String::new(),
    }
}

/// What the spinner says the run is doing after this event, when it moves.
fn step_of(event: &EventRecord, payload: &Payload) -> Option<String> {
    Some(match payload.known()? {
        EventKind::SandboxDriverSelected { .. } => "preparing the sandbox".into(),
        EventKind::SandboxBuildStarted { .. } => "building the sandbox image".into(),
        EventKind::SandboxStarted { .. } => "sandbox up".into(),
        EventKind::NodeStarted { .. } => format!("running {}", node_of(event)),
        EventKind::NodeFinished { .. } | EventKind::NodeFailed { .. } => "routing".into(),
        EventKind::RunFinished { .. }
        | EventKind::RunFailed { .. }
        | EventKind::RunCancelled { .. } => "tearing down".into(),
        // Every other kind leaves the spinner's step as it was.
        _ => return None,
    })
}

fn node_of(event: &EventRecord) -> String {
    event
        .node_id
        .as_ref()
        .map(|n| n.to_string())
        .unwrap_or_default()
}

/// One line for an event (its envelope and its decoded payload), or
/// `None` for events only the spinner shows; control and bidi characters
/// of run-supplied text come out escaped.
pub fn describe(event: &EventRecord, payload: &Payload) -> Option<String> {
    let line = match payload {
        Payload::Known(kind) => describe_kind(event, kind)?,
        // What this build cannot type is shown whole, never as blanks.
        Payload::Unknown { kind, data } | Payload::Malformed { kind, data, .. } => {
            generic(kind, data)
        }
    };
    Some(printable(&line).into_owned())
}

/// The event's name and its data as compact JSON: the line of a kind with
/// no words of its own, and of anything this build cannot type.
fn generic(kind: &str, data: &Value) -> String {
    format!("{kind} {}", compact(data))
}

/// The line of a typed event. The match names every variant, so a new
/// event kind does not compile until it is given a line (or, explicitly,
/// the generic one).
fn describe_kind(event: &EventRecord, kind: &EventKind) -> Option<String> {
    use EventKind as K;
    let node = node_of(event);
    let branch = in_branch(event);
    Some(match kind {
        K::RunStarted { workflow, file, .. } => {
            format!("run {} of {workflow} ({file})", event.run_id)
        }
        K::RunAdmission {
            decision, reason, ..
        } => format!("admission {decision}: {reason}"),
        K::SandboxDriverSelected { driver, host } => {
            format!("sandbox: {driver} driver on a {host} host")
        }
        K::SandboxSkipped {
            refused: Some(true),
            error_code,
            reason,
            ..
        } => format!(
            "sandbox: REFUSED ({}) — {reason}",
            error_code.map_or("", |c| c.as_str())
        ),
        K::SandboxSkipped {
            mode,
            source,
            reason,
            ..
        } => format!("sandbox: skipped, running on the host ({mode} from {source}) — {reason}"),
        K::SandboxStarted {
            container,
            image,
            mode,
            source,
            egress,
            ..
        } => format!(
            "sandbox: {container} started from {image} (mode {mode}, {source}; egress {egress})"
        ),
        K::SandboxHostStateMounted {
            enabled,
            source,
            workspace_folder,
            mounts,
        } => format!(
            "sandbox: host state {} ({source}), {} mount(s), workspace at {}",
            if *enabled { "auto" } else { "none" },
            mounts.len(),
            workspace_folder.as_deref().unwrap_or("")
        ),
        K::SandboxHostBindsDropped { dropped, .. } => {
            format!("sandbox: host binds dropped: {}", json_text(dropped))
        }
        K::SandboxEgressUnenforced { reason, .. } => {
            format!("sandbox: WARNING egress is advisory only — {reason}")
        }
        K::SandboxBuildFailed { error, .. } => format!("sandbox: build failed: {error}"),
        K::NodeStarted { .. } => format!("▶ {node}{branch}"),
        K::NodeFinished {
            duration_ms,
            output,
            ..
        } => format!("✓ {node}{branch} ({duration_ms} ms) {}", compact(output)),
        K::NodeFailed {
            error, stderr_tail, ..
        } => format!("✗ {node}{branch}: {error} {}", stderr_tail.trim()),
        K::BranchStarted {
            branch_id,
            from,
            to,
            index: Some(i),
        } => format!("⇉ {from} item {i} → {to} ({branch_id})"),
        K::BranchStarted {
            branch_id,
            from,
            to,
            index: None,
        } => format!("⇉ {from} → {to} ({branch_id})"),
        K::BranchFinished {
            branch_id, outcome, ..
        } => format!("⇇ {branch_id} {outcome}"),
        K::JoinReady { strategy, .. } if node.is_empty() => {
            format!("⋈ every branch reached done ({strategy})")
        }
        K::JoinReady {
            strategy,
            branches,
            failed_branches,
            ..
        } => format!(
            "⋈ join at {node} ({strategy}, {branches} branch(es), {} failed)",
            failed_branches.len()
        ),
        // Routing and progress are the spinner's (and `iterion events`').
        K::EdgeSelected { .. } | K::RunCheckpoint { .. } | K::SandboxImagePull { .. } => {
            return None;
        }
        // An agent's steps as they happen (issue 11 item 7): one line per
        // model call, tool call and outcome, tagged with the node.
        K::DelegateStarted { backend } => format!("  {node}: agent on {backend}{branch}"),
        K::LlmRequest {
            model,
            message_count,
            tool_count,
            ..
        } => format!("  {node}: → {model} ({message_count} messages, {tool_count} tools)"),
        K::LlmStepFinished {
            step,
            input_tokens,
            output_tokens,
            finish_reason,
            tool_calls,
            ..
        } => format!(
            "  {node}: ← step {step}: {finish_reason} ({input_tokens} in / {output_tokens} out tokens{})",
            if *tool_calls > 0 {
                format!(", {tool_calls} tool call(s)")
            } else {
                String::new()
            }
        ),
        K::LlmRetry {
            attempt,
            delay_ms,
            error,
            ..
        } => format!("  {node}: retry {attempt} in {delay_ms} ms: {error}"),
        K::ToolStarted {
            tool, placement, ..
        } => format!("  {node}: ⚙ {tool} ({placement})"),
        K::ToolCalled {
            tool,
            duration_ms,
            output_size,
            ..
        } => format!("  {node}: ✓ {tool} {duration_ms} ms, {output_size} bytes"),
        K::ToolError { tool, error, .. } => format!("  {node}: ✗ {tool}: {error}"),
        K::ToolDenied { tool, reason, .. } => format!("  {node}: ⊘ {tool}: {reason}"),
        K::DelegateFinished {
            duration_ms,
            tokens,
            ..
        } => format!("  {node}: agent done in {duration_ms} ms, {tokens} tokens"),
        K::DelegateError { code, error, .. } => {
            format!("  {node}: agent failed ({code}): {error}")
        }
        // The run's own bounds (max_duration, max_iterations) name no node.
        K::BudgetExceeded {
            dimension,
            used,
            limit,
        } if node.is_empty() => format!("budget exceeded: {dimension} {used} of {limit}"),
        // A node's budget prints its numbers as the event carries them.
        K::BudgetWarning {
            dimension,
            used,
            limit,
        } => format!(
            "  {node}: budget warning {dimension}: {} of {}",
            json_text(used),
            json_text(limit)
        ),
        K::BudgetExceeded {
            dimension,
            used,
            limit,
        } => format!(
            "  {node}: budget exceeded {dimension}: {} of {}",
            json_text(used),
            json_text(limit)
        ),
        K::SandboxClawRoutedViaRunner { .. } => {
            "sandbox: claw nodes run in the box (iterion __claw-runner)".into()
        }
        K::SandboxProviderKeys {
            delivery,
            variables,
            hosts,
            reason,
        } => match reason {
            None => format!(
                "sandbox: provider keys {} as {delivery}s for {}",
                variables.join(", "),
                hosts.join(", ")
            ),
            Some(why) => format!(
                "sandbox: provider keys {} go in {delivery}: {why}",
                variables.join(", ")
            ),
        },
        K::NetworkBlocked {
            host,
            port,
            reason,
            rule,
            authority,
            ..
        } => format!(
            "egress: blocked {host}:{port}{} ({reason}, rule {}){}",
            authority
                .as_deref()
                .map(|a| format!(" (a request for {a} inside it)"))
                .unwrap_or_default(),
            rule.as_deref().unwrap_or("none"),
            if node.is_empty() {
                String::new()
            } else {
                format!(" by {node}")
            }
        ),
        K::SandboxRunfilesDrained { files, bytes, .. } => {
            format!("run files: {files} file(s), {bytes} bytes drained")
        }
        K::SandboxRunfilesDrainFailed {
            reason, declined, ..
        } => format!(
            "run files: DRAIN {reason} (declined: {})",
            json_text(declined)
        ),
        K::SandboxCleanup {
            container,
            ok: true,
            ..
        } => format!("sandbox: {container} removed"),
        // Never "removed" when it was not: the reaper collects it once the
        // run is provably over.
        K::SandboxCleanup {
            container,
            ok: false,
            ..
        } => format!(
            "sandbox: {container} NOT removed (cleanup failed; `iterion sandbox reap` collects it)"
        ),
        K::SandboxLimitReached {
            limit,
            bound,
            detail,
        } => format!(
            "sandbox: {limit} limit reached{} — {detail}",
            bound.map_or_else(String::new, |b| format!(" ({})", iterion_core::ByteSize(b)))
        ),
        K::WorktreeCreated {
            path,
            base_commit,
            branch,
            ..
        } => format!(
            "worktree: {path} (from {} at {})",
            branch.as_deref().unwrap_or("a detached HEAD"),
            short(base_commit)
        ),
        K::WorktreeFinalized {
            final_branch: Some(final_branch),
            merge_status,
            merged_into,
            reason,
            ..
        } => format!(
            "worktree: commits on {final_branch}, merge {merge_status}{}{}",
            merged_into
                .as_deref()
                .map_or_else(String::new, |t| format!(" into {t}")),
            reason
                .as_deref()
                .map_or_else(String::new, |r| format!(" ({r})"))
        ),
        K::WorktreeFinalized {
            final_branch: None,
            reason,
            ..
        } => format!("worktree: {}", reason.as_deref().unwrap_or("no branch")),
        K::WorktreeBranchFailed {
            sha, reason, error, ..
        } => format!("worktree: WARNING no branch for commit {sha} ({reason}): {error}"),
        K::WorktreeKept { path, reason } => format!("worktree kept ({reason}): {path}"),
        K::RunFinished { .. } => "run finished".into(),
        K::RunFailed {
            failure_code,
            status,
            error,
            ..
        } => format!("run {status} ({failure_code}): {error}"),
        K::RunCancelled { reason } => format!("run cancelled: {reason}"),
        K::RunAttachmentLost {
            name,
            required,
            reason,
        } => format!(
            "attachment {name} LOST{}: {reason}",
            if *required { " (required)" } else { "" }
        ),
        K::SandboxAttachmentsCopied { count, bytes, .. } => {
            format!("attachments: {count} file(s), {bytes} bytes copied into the sandbox")
        }
        // Kinds with no words of their own yet: their name and data.
        K::RunInterrupted { .. }
        | K::RunClaimed { .. }
        | K::RunReleased { .. }
        | K::HumanInputRequested { .. }
        | K::RunPaused { .. }
        | K::RunResumed { .. }
        | K::HumanAnswersRecorded { .. }
        | K::SandboxShared { .. }
        | K::SandboxUserRemap { .. }
        | K::SandboxUidMismatchWarning { .. }
        | K::SandboxDevboxProvisioned { .. }
        | K::SandboxEnvDenied { .. }
        | K::SandboxImageEnvPlanted { .. }
        | K::SandboxNetworkDefaulted { .. }
        | K::SandboxBuildStarted { .. }
        | K::SandboxBuildFinished { .. }
        | K::SandboxWorkspaceExportFailed { .. }
        | K::SandboxWorkspaceExported { .. }
        | K::SandboxReaped { .. }
        | K::SandboxSecretEgressUnavailable { .. }
        | K::SandboxLimitUnenforced { .. } => generic(&event.kind, &event.data),
    })
}

/// A commit id, abbreviated as git does.
fn short(sha: &str) -> &str {
    sha.get(..7).unwrap_or(sha)
}

/// ` [branch]` for an event inside a parallel branch.
fn in_branch(event: &EventRecord) -> String {
    event
        .branch_id()
        .map_or_else(String::new, |b| format!(" [{b}]"))
}

/// A typed part of the payload as the JSON it is stored as (a list of
/// binds, a number as the event wrote it: `8000.0`, not `8000`).
fn json_text<T: Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .map(|v| v.to_string())
        .unwrap_or_default()
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
        let line = describe(&event, &event.payload()).unwrap();
        assert!(!line.chars().any(char::is_control), "{line:?}");
        assert!(
            line.contains("a\\r\\n[   1.00s] run finished\\x1b[8m"),
            "{line}"
        );
        assert!(line.ends_with("by n\\x1b[2K"), "{line}");
    }

    fn record(kind: &str, node: Option<&str>, data: Value) -> EventRecord {
        EventRecord {
            seq: 1,
            timestamp: time::OffsetDateTime::UNIX_EPOCH,
            kind: kind.into(),
            run_id: RunId::parse("r1").unwrap(),
            node_id: node.map(NodeId::new),
            data,
        }
    }

    fn line(e: &EventRecord) -> String {
        let text = describe(e, &e.payload()).unwrap_or_else(|| "(spinner only)".into());
        format!("{:<34} {text}", e.kind)
    }

    /// The human line of every event kind, on a node, plus the cases where
    /// the line depends on the envelope (no node, inside a branch) and
    /// the two a build cannot type (an unknown name, a known name with
    /// data of another shape).
    #[test]
    fn every_kind_has_its_line() {
        let mut lines = Vec::new();
        for kind in iterion_core::event::samples::every_kind() {
            let draft = iterion_core::EventDraft::from(kind);
            lines.push(line(&record(&draft.kind, Some("build"), draft.data)));
        }
        lines.push("-- without a node --".into());
        for kind in iterion_core::event::samples::every_kind() {
            let draft = iterion_core::EventDraft::from(kind);
            if ["join_ready", "budget_exceeded", "network_blocked"].contains(&draft.kind.as_str()) {
                lines.push(line(&record(&draft.kind, None, draft.data)));
            }
        }
        lines.push("-- inside a branch --".into());
        for kind in iterion_core::event::samples::every_kind() {
            let draft = iterion_core::EventDraft::from(kind).in_branch(Some("fan#1"));
            if [
                "node_started",
                "node_finished",
                "node_failed",
                "delegate_started",
            ]
            .contains(&draft.kind.as_str())
            {
                lines.push(line(&record(&draft.kind, Some("lint"), draft.data)));
            }
        }
        lines.push("-- a cleanup that failed --".into());
        lines.push(line(&record(
            "sandbox_cleanup",
            Some("build"),
            json!({"driver": "docker", "container": "iterion-r1", "ok": false}),
        )));
        lines.push("-- not typed by this build --".into());
        lines.push(line(&record(
            "quantum_flux",
            Some("build"),
            json!({"x": {"deep": [1, 2]}, "s": "<b>"}),
        )));
        lines.push(line(&record(
            "sandbox_started",
            None,
            json!({"image": "alpine"}),
        )));
        lines.push(line(&record(
            "node_failed",
            Some("build"),
            json!("nonsense"),
        )));
        insta::assert_snapshot!(lines.join("\n"));
    }
}
