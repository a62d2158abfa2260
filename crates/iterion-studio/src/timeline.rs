//! One timeline entry per event: a level, a group, a one-line summary per
//! event kind and the payload's fields as text, for the run page and its
//! live stream alike (the page renders the same [`Entry`] the server
//! rendered, with `textContent` only).
//!
//! Payloads are read through `iterion_core`'s one decoder
//! ([`EventRecord::payload`]): a known kind is matched as its typed
//! [`EventKind`], and a kind this build does not know (a newer writer, a
//! hand-made store) or a payload of another shape is shown generically,
//! field by field.

use iterion_core::event::Payload;
use iterion_core::store::AdmissionDecision;
use iterion_core::{EventKind, EventRecord};
use serde::Serialize;
use serde_json::Value;
use time::format_description::well_known::Rfc3339;

use crate::escape::clip;

/// How loud an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// Routine.
    Info,
    /// Something ended well.
    Ok,
    /// Worth a look (degraded, blocked, retried).
    Warn,
    /// Something failed.
    Error,
}

/// What an entry is about (the page's filter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Group {
    /// The run's lifecycle.
    Run,
    /// Sandbox decisions and lifecycle.
    Sandbox,
    /// Node execution and routing.
    Node,
    /// Agent steps and tool calls.
    Agent,
    /// Egress.
    Network,
    /// Drained files.
    Files,
    /// A kind this build does not know.
    Other,
}

/// One payload field as text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Field {
    /// Key.
    pub name: String,
    /// Value: a string as is, anything else as compact JSON; clipped.
    pub value: String,
}

/// One rendered event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Entry {
    /// The event's seq.
    pub seq: u64,
    /// When (RFC 3339, UTC).
    pub time: String,
    /// The event's type.
    pub kind: String,
    /// The node it is about.
    pub node: Option<String>,
    /// Level.
    pub level: Level,
    /// Group.
    pub group: Group,
    /// One line.
    pub summary: String,
    /// The payload, field by field.
    pub fields: Vec<Field>,
}

/// Longest value shown for one field (the API has the rest).
const FIELD_MAX: usize = 2_000;

/// The entry of one event.
pub fn entry(e: &EventRecord) -> Entry {
    let (level, group, summary) = match e.payload() {
        Payload::Known(kind) => describe(&kind),
        Payload::Unknown { .. } | Payload::Malformed { .. } => (
            Level::Info,
            Group::Other,
            format!("{} (not known to this iterion)", e.kind),
        ),
    };
    Entry {
        seq: e.seq,
        time: e
            .timestamp
            .to_offset(time::UtcOffset::UTC)
            .format(&Rfc3339)
            .unwrap_or_default(),
        kind: e.kind.clone(),
        node: e.node_id.as_ref().map(|n| n.to_string()),
        level,
        group,
        summary: clip(&summary, 400),
        fields: fields(&e.data),
    }
}

fn fields(data: &Value) -> Vec<Field> {
    match data {
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| Field {
                name: k.clone(),
                value: value_text(v),
            })
            .collect(),
        Value::Null => Vec::new(),
        other => vec![Field {
            name: "data".into(),
            value: value_text(other),
        }],
    }
}

fn value_text(v: &Value) -> String {
    let s = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    clip(&s, FIELD_MAX)
}

fn or_dash(s: &Option<String>) -> &str {
    s.as_deref().unwrap_or("-")
}

/// Level, group and summary of a known kind.
fn describe(kind: &EventKind) -> (Level, Group, String) {
    use EventKind as K;
    use Group as G;
    use Level as L;
    match kind {
        K::RunStarted {
            workflow,
            file,
            trust,
        } => (
            L::Info,
            G::Run,
            format!("run of {workflow} ({file}), {trust}"),
        ),
        K::RunAdmission {
            decision, reason, ..
        } => {
            let level = if *decision == AdmissionDecision::Denied {
                L::Error
            } else {
                L::Info
            };
            (level, G::Run, format!("admission {decision}: {reason}"))
        }
        K::RunFinished { duration_ms } => {
            (L::Ok, G::Run, format!("run finished in {duration_ms} ms"))
        }
        K::RunFailed {
            failure_code,
            status,
            error,
            ..
        } => (
            L::Error,
            G::Run,
            format!("run {status} ({failure_code}): {error}"),
        ),
        K::RunCancelled { reason } => (L::Warn, G::Run, format!("run cancelled: {reason}")),
        K::RunInterrupted { reason } => (L::Warn, G::Run, format!("run interrupted: {reason}")),
        K::RunAttachmentLost {
            name,
            required,
            reason,
        } => (
            if *required { L::Error } else { L::Warn },
            G::Run,
            format!(
                "attachment {name} lost{}: {reason}",
                if *required { " (required)" } else { "" }
            ),
        ),
        K::RunPaused { reason } => (L::Warn, G::Run, format!("run paused: {reason}")),
        K::RunResumed {
            resumed_from,
            restart_node,
            forced,
        } => (
            L::Info,
            G::Run,
            format!(
                "resumed from {resumed_from} at {}{}",
                or_dash(restart_node),
                if *forced {
                    " (forced over a changed source)"
                } else {
                    ""
                }
            ),
        ),
        K::HumanInputRequested { fields, .. } => (
            L::Warn,
            G::Node,
            format!("waiting for a human: {}", fields.join(", ")),
        ),
        K::HumanAnswersRecorded { .. } => (L::Info, G::Node, "answers recorded".into()),
        K::RunCheckpoint { .. } => (L::Info, G::Run, "progress checkpoint".into()),
        K::NodeStarted { kind } => (L::Info, G::Node, format!("{kind} node started")),
        K::NodeFinished {
            duration_ms,
            exit_code,
            ..
        } => (
            L::Ok,
            G::Node,
            match exit_code {
                Some(c) => format!("finished in {duration_ms} ms (exit {c})"),
                None => format!("finished in {duration_ms} ms"),
            },
        ),
        K::NodeFailed {
            error, exit_code, ..
        } => (
            L::Error,
            G::Node,
            match exit_code {
                Some(c) => format!("failed (exit {c}): {error}"),
                None => format!("failed: {error}"),
            },
        ),
        K::EdgeSelected {
            from,
            to,
            condition,
            ..
        } => (
            L::Info,
            G::Node,
            match condition {
                Some(c) => format!("{from} → {to} ({c})"),
                None => format!("{from} → {to}"),
            },
        ),
        K::BranchStarted {
            branch_id,
            from,
            to,
            ..
        } => (
            L::Info,
            G::Node,
            format!("branch {branch_id}: {from} → {to}"),
        ),
        K::BranchFinished {
            branch_id, outcome, ..
        } => {
            let level = if outcome == "failed" {
                L::Error
            } else {
                L::Info
            };
            (level, G::Node, format!("branch {branch_id} {outcome}"))
        }
        K::JoinReady {
            strategy,
            branches,
            failed_branches,
            ..
        } => (
            L::Info,
            G::Node,
            format!(
                "join ready ({strategy}): {branches} branch(es), {} failed",
                failed_branches.len()
            ),
        ),
        K::SandboxSkipped {
            mode,
            source,
            reason,
            refused,
            error_code,
            ..
        } => {
            if *refused == Some(true) {
                (
                    L::Error,
                    G::Sandbox,
                    format!(
                        "sandbox refused ({}): {reason}",
                        error_code.map_or("-", |c| c.as_str())
                    ),
                )
            } else {
                (
                    L::Warn,
                    G::Sandbox,
                    format!("no sandbox ({mode} from {source}): {reason}"),
                )
            }
        }
        K::SandboxDriverSelected { driver, host } => (
            L::Info,
            G::Sandbox,
            format!("{driver} driver on a {host} host"),
        ),
        K::SandboxImagePull { image, status, .. } => {
            (L::Info, G::Sandbox, format!("pulling {image}: {status}"))
        }
        K::SandboxStarted {
            image,
            mode,
            source,
            egress,
            container,
            ..
        } => (
            L::Ok,
            G::Sandbox,
            format!("{container} started from {image} ({mode} from {source}; egress {egress})"),
        ),
        K::SandboxShared { parent_run_id, .. } => (
            L::Info,
            G::Sandbox,
            format!("sharing the sandbox of {parent_run_id}"),
        ),
        K::SandboxHostStateMounted {
            enabled,
            source,
            mounts,
            ..
        } => (
            L::Info,
            G::Sandbox,
            format!(
                "host state {} ({source}), {} mount(s)",
                if *enabled { "auto" } else { "none" },
                mounts.len()
            ),
        ),
        K::SandboxHostBindsDropped {
            driver, dropped, ..
        } => (
            L::Warn,
            G::Sandbox,
            format!("{} host bind(s) dropped for {driver}", dropped.len()),
        ),
        K::SandboxEgressUnenforced { reason, .. } => (
            L::Warn,
            G::Sandbox,
            format!("egress advisory only: {reason}"),
        ),
        K::SandboxNetworkDefaulted {
            mode,
            preset,
            source,
        } => (
            L::Info,
            G::Sandbox,
            format!("network defaulted to {mode} {preset} ({source})"),
        ),
        K::SandboxBuildStarted { dockerfile, .. } => {
            (L::Info, G::Sandbox, format!("building {dockerfile}"))
        }
        K::SandboxBuildFinished {
            target,
            duration_ms,
            ..
        } => (
            L::Ok,
            G::Sandbox,
            format!("built {target} in {duration_ms} ms"),
        ),
        K::SandboxBuildFailed { error, .. } => {
            (L::Error, G::Sandbox, format!("build failed: {error}"))
        }
        K::SandboxCleanup { container, ok, .. } => (
            if *ok { L::Info } else { L::Warn },
            G::Sandbox,
            format!(
                "{container} {}",
                if *ok { "removed" } else { "not removed" }
            ),
        ),
        K::SandboxLimitReached { limit, detail, .. } => (
            L::Error,
            G::Sandbox,
            format!("{limit} limit reached: {detail}"),
        ),
        K::SandboxLimitUnenforced { limit, reason } => (
            L::Warn,
            G::Sandbox,
            format!("{limit} limit not enforced: {reason}"),
        ),
        K::SandboxEnvDenied { keys, .. } => (
            L::Warn,
            G::Sandbox,
            format!("variables refused: {}", keys.join(", ")),
        ),
        K::SandboxUidMismatchWarning {
            spec_user,
            host_uid,
        } => (
            L::Warn,
            G::Sandbox,
            format!("user {spec_user} differs from host uid {host_uid}"),
        ),
        K::NetworkBlocked {
            host,
            port,
            reason,
            rule,
            ..
        } => (
            L::Warn,
            G::Network,
            format!("blocked {host}:{port} ({reason}, rule {})", or_dash(rule)),
        ),
        K::SandboxRunfilesDrained { files, bytes, .. } => (
            L::Ok,
            G::Files,
            format!("{files} file(s), {bytes} bytes drained"),
        ),
        K::SandboxRunfilesDrainFailed {
            reason,
            declined,
            stale,
            ..
        } => (
            L::Error,
            G::Files,
            format!(
                "drain {reason}: {} declined{}",
                declined.len(),
                if *stale {
                    ", stored files may be stale"
                } else {
                    ""
                }
            ),
        ),
        K::SandboxWorkspaceExportFailed { error, .. } => (
            L::Error,
            G::Files,
            format!("workspace export failed: {error}"),
        ),
        K::LlmRequest {
            model,
            message_count,
            tool_count,
            ..
        } => (
            L::Info,
            G::Agent,
            format!("→ {model} ({message_count} messages, {tool_count} tools)"),
        ),
        K::LlmStepFinished {
            step,
            finish_reason,
            input_tokens,
            output_tokens,
            ..
        } => (
            L::Info,
            G::Agent,
            format!("← step {step}: {finish_reason} ({input_tokens} in / {output_tokens} out)"),
        ),
        K::LlmRetry { attempt, error, .. } => {
            (L::Warn, G::Agent, format!("retry {attempt}: {error}"))
        }
        K::ToolStarted {
            tool, placement, ..
        } => (L::Info, G::Agent, format!("tool {tool} ({placement})")),
        K::ToolCalled {
            tool,
            duration_ms,
            output_size,
            ..
        } => (
            L::Ok,
            G::Agent,
            format!("tool {tool}: {duration_ms} ms, {output_size} bytes"),
        ),
        K::ToolError { tool, error, .. } => (L::Error, G::Agent, format!("tool {tool}: {error}")),
        K::ToolDenied { tool, reason, .. } => {
            (L::Warn, G::Agent, format!("tool {tool} denied: {reason}"))
        }
        K::DelegateStarted { backend } => (L::Info, G::Agent, format!("agent on {backend}")),
        K::DelegateFinished {
            duration_ms,
            tokens,
            ..
        } => (
            L::Ok,
            G::Agent,
            format!("agent done in {duration_ms} ms, {tokens} tokens"),
        ),
        K::DelegateError { code, error, .. } => (
            L::Error,
            G::Agent,
            format!("agent failed ({code}): {error}"),
        ),
        K::NodeOutputSchemaMismatch {
            node,
            schema,
            errors,
            strict,
        } => (
            if *strict { L::Error } else { L::Warn },
            G::Node,
            format!(
                "{node}: output does not match schema {schema}: {}",
                errors.join("; ")
            ),
        ),
        K::BudgetWarning {
            dimension,
            used,
            limit,
        } => (
            L::Warn,
            G::Run,
            format!("budget {dimension}: {used} of {limit}"),
        ),
        K::BudgetExceeded {
            dimension,
            used,
            limit,
        } => (
            L::Error,
            G::Run,
            format!("budget {dimension} exceeded: {used} of {limit}"),
        ),
        // No summary of their own yet: their name in words. Listed, not
        // caught by a wildcard, so a new kind is a compile error here
        // until it is given its place.
        K::RunClaimed { .. }
        | K::RunReleased { .. }
        | K::SandboxAttachmentsCopied { .. }
        | K::SandboxUserRemap { .. }
        | K::SandboxDevboxProvisioned { .. }
        | K::SandboxImageEnvPlanted { .. }
        | K::SandboxWorkspaceExported { .. }
        | K::SandboxReaped { .. }
        | K::SandboxSecretEgressUnavailable { .. }
        | K::SandboxProviderKeys { .. }
        | K::SandboxClawRoutedViaRunner { .. }
        | K::WorktreeCreated { .. }
        | K::WorktreeFinalized { .. }
        | K::WorktreeBranchFailed { .. }
        | K::WorktreeKept { .. } => (L::Info, G::Sandbox, kind.name().replace('_', " ")),
    }
}

#[cfg(test)]
mod tests {
    use iterion_core::{NodeId, RunId};
    use serde_json::json;

    use super::*;

    fn event(kind: &str, data: Value) -> EventRecord {
        EventRecord {
            seq: 7,
            timestamp: time::OffsetDateTime::UNIX_EPOCH,
            kind: kind.into(),
            run_id: RunId::parse("r1").expect("id"),
            node_id: Some(NodeId::new("probe")),
            data,
        }
    }

    #[test]
    fn known_kinds_are_typed() {
        let e = entry(&event(
            "network_blocked",
            json!({"host": "evil.test", "port": 443, "reason": "blocked-by-allowlist", "rule": null, "node_id": "probe"}),
        ));
        assert_eq!(e.group, Group::Network);
        assert_eq!(e.level, Level::Warn);
        assert_eq!(
            e.summary,
            "blocked evil.test:443 (blocked-by-allowlist, rule -)"
        );
        assert_eq!(e.time, "1970-01-01T00:00:00Z");
        assert!(
            e.fields
                .iter()
                .any(|f| f.name == "port" && f.value == "443")
        );
    }

    #[test]
    fn a_branch_tag_does_not_make_a_kind_unknown() {
        let e = entry(&event(
            "node_started",
            json!({"kind": "tool", "branch_id": "b1"}),
        ));
        assert_eq!(e.group, Group::Node);
        assert_eq!(e.summary, "tool node started");
    }

    #[test]
    fn unknown_kinds_and_bad_payloads_render_generically() {
        let e = entry(&event(
            "quantum_flux",
            json!({"x": {"deep": [1, 2]}, "s": "<b>"}),
        ));
        assert_eq!(e.group, Group::Other);
        assert!(e.summary.contains("quantum_flux"));
        assert_eq!(e.fields[0].value, "<b>");
        assert_eq!(e.fields[1].value, r#"{"deep":[1,2]}"#);
        // A known name with a payload of the wrong shape is shown, not lost.
        let e = entry(&event("network_blocked", json!("nonsense")));
        assert_eq!(e.group, Group::Other);
        assert_eq!(e.fields[0].value, "nonsense");
    }

    #[test]
    fn every_known_kind_is_typed_with_its_fields() {
        for kind in iterion_core::event::samples::every_kind() {
            let draft = iterion_core::EventDraft::from(kind).in_branch(Some("b1"));
            let e = entry(&event(&draft.kind, draft.data.clone()));
            assert_ne!(e.group, Group::Other, "{}", draft.kind);
            assert!(!e.summary.is_empty(), "{}", draft.kind);
            let names: Vec<&str> = e.fields.iter().map(|f| f.name.as_str()).collect();
            assert!(names.contains(&"branch_id"), "{}: {names:?}", draft.kind);
        }
    }

    #[test]
    fn long_values_are_clipped() {
        let e = entry(&event("quantum_flux", json!({"big": "x".repeat(10_000)})));
        assert_eq!(e.fields[0].value.chars().count(), FIELD_MAX + 1);
    }
}
