//! Events: the audit surface of a run.
//!
//! The runtime emits typed [`EventKind`]s; stores persist the generic
//! [`EventRecord`] envelope `{seq, timestamp, type, run_id, node_id, data}`
//! of `docs/reference/SPEC.md` §3, so a store never needs to know every event.
//! Names and payload fields follow facts §8; where the sources leave a
//! payload open, `docs/reference/SPEC.md` §3 fixes it.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;

use crate::id::{NodeId, RunId};

/// One persisted event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    /// Per-run sequence number, from 1, gapless.
    pub seq: u64,
    /// When the event was appended (RFC 3339).
    #[serde(with = "time::serde::rfc3339")]
    pub timestamp: OffsetDateTime,
    /// Event name (`sandbox_started`, `network_blocked`, …).
    #[serde(rename = "type")]
    pub kind: String,
    /// The run.
    pub run_id: RunId,
    /// The node the event is about, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<NodeId>,
    /// Payload.
    pub data: Value,
}

/// An event before the store assigns its sequence number and timestamp.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventDraft {
    /// Event name.
    pub kind: String,
    /// The node the event is about.
    pub node_id: Option<NodeId>,
    /// Payload.
    pub data: Value,
}

impl EventDraft {
    /// Attach a node.
    pub fn for_node(mut self, node: NodeId) -> Self {
        self.node_id = Some(node);
        self
    }

    /// Mark the event as happening inside a parallel branch (facts §8's
    /// `branch_id`, carried in `data` so every store keeps it as is).
    pub fn in_branch(mut self, branch: Option<&str>) -> Self {
        if let (Some(branch), Value::Object(data)) = (branch, &mut self.data) {
            data.insert("branch_id".into(), Value::String(branch.to_owned()));
        }
        self
    }
}

impl From<EventKind> for EventDraft {
    fn from(kind: EventKind) -> Self {
        // Serializing a closed enum of plain data cannot fail; the fallback
        // keeps the name so nothing is silently dropped if it ever did.
        match serde_json::to_value(&kind) {
            Ok(Value::Object(mut obj)) => {
                let name = match obj.remove("type") {
                    Some(Value::String(s)) => s,
                    _ => kind.name().to_owned(),
                };
                let data = obj
                    .remove("data")
                    .unwrap_or(Value::Object(Default::default()));
                EventDraft {
                    kind: name,
                    node_id: None,
                    data,
                }
            }
            _ => EventDraft {
                kind: kind.name().to_owned(),
                node_id: None,
                data: Value::Null,
            },
        }
    }
}

/// A `{source, target}` pair of a dropped bind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DroppedBind {
    /// Host source.
    pub source: String,
    /// Container target.
    pub target: String,
}

/// A branch that failed before its join (`join_ready.failed_branches`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedBranch {
    /// The branch.
    pub branch_id: String,
    /// Why it failed.
    pub error: String,
}

/// Every event the runtime emits, with its payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "data", rename_all = "snake_case")]
#[allow(missing_docs)] // payload fields are named after facts §8
pub enum EventKind {
    // ---- run lifecycle -------------------------------------------------
    RunStarted {
        workflow: String,
        file: String,
        trust: String,
    },
    RunAdmission {
        decision: String,
        phase: String,
        code: Option<String>,
        reason: String,
    },
    RunFinished {
        duration_ms: u64,
    },
    RunFailed {
        failure_code: String,
        disposition: String,
        status: String,
        error: String,
    },
    RunCancelled {
        reason: String,
    },
    RunInterrupted {
        reason: String,
    },
    /// An attachment the run was launched with cannot be provided (its
    /// bytes gone from the store, unreadable, or changed since stored):
    /// fatal when it is declared `required: true` (ADR-143 R12).
    RunAttachmentLost {
        name: String,
        required: bool,
        reason: String,
    },
    /// Cloud mode: a runner took the run's lease for one delivery of its
    /// queue message (issue 13). `lease_revision` is the KV revision the
    /// lease was created at: revisions only grow, so the claims of one run
    /// are ordered by it.
    RunClaimed {
        runner_id: String,
        /// The JetStream stream sequence of the message.
        delivery: u64,
        /// Which delivery of that message this is (from 1).
        attempt: u64,
        lease_revision: u64,
    },
    /// Cloud mode: the runner that claimed the run let its lease go and
    /// settled the delivery (`action`: `ack`, `nak`, `term`, `dead_letter`).
    RunReleased {
        runner_id: String,
        delivery: u64,
        attempt: u64,
        action: String,
        reason: String,
    },
    /// A human node needs answers and no one can give them now: the run
    /// pauses (`paused_waiting_human`) until `iterion resume`.
    HumanInputRequested {
        interaction_id: String,
        /// What the human reads: the node's input and instructions.
        questions: Value,
        /// The answer fields expected (the node's output schema), in order.
        fields: Vec<String>,
    },
    RunPaused {
        reason: String,
    },
    /// `iterion resume` continued the run from its stored progress.
    RunResumed {
        /// The status it resumed from.
        resumed_from: String,
        /// The node it continues at (`None`: from the entry, no progress).
        restart_node: Option<String>,
        /// `--force` let a changed workflow source through.
        forced: bool,
    },
    HumanAnswersRecorded {
        interaction_id: String,
        answers: Value,
    },
    NodeStarted {
        kind: String,
    },
    NodeFinished {
        exit_code: Option<i64>,
        duration_ms: u64,
        output: Value,
    },
    NodeFailed {
        exit_code: Option<i64>,
        error: String,
        stderr_tail: String,
    },
    /// The edge a node's output (or its router) selected; upstream's name.
    EdgeSelected {
        from: String,
        to: String,
        condition: Option<String>,
        #[serde(rename = "loop")]
        loop_name: Option<String>,
        iteration: Option<u32>,
        /// Position in a `round_robin` router's cycle.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        round_robin_index: Option<u32>,
        /// `as foreach NAME(…)`: the loop name and how many items it runs.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        foreach: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        items: Option<u64>,
    },
    // ---- parallel branches (upstream `pkg/runtime/fan_out.go`) ----------
    /// A branch of a fan-out (or one item of a foreach) got its slot.
    BranchStarted {
        branch_id: String,
        /// The router (or the foreach edge's source) it forked from.
        from: String,
        /// Its first node.
        to: String,
        /// The item's index, for a foreach branch.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        index: Option<u64>,
    },
    /// A branch ended: reached its join, `done`, a failure or a cancel.
    BranchFinished {
        branch_id: String,
        /// `joined`, `done`, `failed` or `cancelled`.
        outcome: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        join_node: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// Every branch of a fan-out is accounted for; the join node runs
    /// next (node_id = the join node).
    JoinReady {
        /// `wait_all` or `best_effort`.
        strategy: String,
        branches: u64,
        failed_branches: Vec<FailedBranch>,
        /// Every branch ended at `done` (no join node): the run finishes.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        terminal_join: bool,
    },
    /// One step of the run's resumable progress (versioned; folded in
    /// order it rebuilds the engine's state, `iterion_runtime::progress`).
    RunCheckpoint {
        version: u32,
        step: Value,
    },
    // ---- sandbox (facts §8) --------------------------------------------
    SandboxSkipped {
        mode: String,
        source: String,
        reason: String,
        #[serde(default)]
        file_secrets_dropped: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        refused: Option<bool>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error_code: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        driver: Option<String>,
    },
    SandboxDriverSelected {
        driver: String,
        host: String,
    },
    SandboxImagePull {
        image: String,
        status: String,
        current: Option<u64>,
        total: Option<u64>,
    },
    SandboxStarted {
        driver: String,
        mode: String,
        source: String,
        image: String,
        has_post_create: bool,
        container: String,
        limits: Value,
        egress: String,
    },
    SandboxShared {
        parent_run_id: String,
        driver: String,
        container: String,
    },
    SandboxHostStateMounted {
        enabled: bool,
        source: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        workspace_folder: Option<String>,
        #[serde(default)]
        mounts: Vec<String>,
    },
    SandboxHostBindsDropped {
        driver: String,
        dropped: Vec<DroppedBind>,
        withdrawn_env: Vec<String>,
    },
    SandboxAttachmentsCopied {
        driver: String,
        count: u64,
        bytes: u64,
    },
    SandboxUserRemap {
        uid: u32,
        gid: u32,
        reason: String,
    },
    SandboxUidMismatchWarning {
        spec_user: String,
        host_uid: u32,
    },
    SandboxDevboxProvisioned {
        target: String,
        sources: Vec<String>,
        configs: Vec<String>,
        bin_dirs: Vec<String>,
        path: String,
        #[serde(default)]
        errors: Vec<String>,
    },
    SandboxEnvDenied {
        keys: Vec<String>,
        source: String,
        run_id: String,
    },
    SandboxImageEnvPlanted {
        keys: Vec<String>,
    },
    SandboxNetworkDefaulted {
        mode: String,
        preset: String,
        source: String,
    },
    SandboxBuildStarted {
        driver: String,
        dockerfile: String,
        context: String,
    },
    SandboxBuildFinished {
        driver: String,
        target: String,
        duration_ms: u64,
    },
    SandboxBuildFailed {
        driver: String,
        error: String,
    },
    /// The copy-based workspace could not be written back whole (issue 14
    /// item 2): non-fatal, the run keeps its own status. `reason` is a
    /// token (`container_gone`, `archive_error`, `cap_exceeded`,
    /// `host_error`, `timeout`, `workspace_gone`), `error` says why in
    /// words, `declined` names (bounded) the members not written — hostile
    /// names, links pointing out, devices — and `kept` the host files left
    /// as they were because they changed on the host during the run.
    SandboxWorkspaceExportFailed {
        driver: String,
        error: String,
        #[serde(default)]
        reason: String,
        #[serde(default)]
        declined: Vec<String>,
        #[serde(default)]
        kept: Vec<String>,
    },
    /// The copy-based workspace was written back: what the run changed,
    /// created and deleted, and (bounded) which host files were kept
    /// because they changed on the host during the run.
    SandboxWorkspaceExported {
        driver: String,
        files: u64,
        bytes: u64,
        deleted: u64,
        #[serde(default)]
        kept: Vec<String>,
    },
    SandboxRunfilesDrained {
        driver: String,
        files: u64,
        bytes: u64,
    },
    SandboxRunfilesDrainFailed {
        driver: String,
        reason: String,
        declined: Vec<String>,
        stale: bool,
    },
    SandboxCleanup {
        driver: String,
        container: String,
        ok: bool,
    },
    SandboxReaped {
        driver: String,
        resource: String,
        run_id: String,
        reason: String,
    },
    SandboxEgressUnenforced {
        driver: String,
        reason: String,
    },
    NetworkBlocked {
        host: String,
        port: u16,
        reason: String,
        rule: Option<String>,
        node_id: Option<String>,
        /// The bound secret whose placeholder a request carried to a host
        /// it is not bound to (reason `secret_exfiltration`); its name,
        /// never its value (issue 17).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        secret: Option<String>,
    },
    /// Secrets bound to egress hosts (`egress:`) that this run delivers as
    /// their plain value, since the run cannot put a placeholder back
    /// (`auto` on a driver without TLS inspection, an open network, no
    /// sandbox): names only (issue 17).
    SandboxSecretEgressUnavailable {
        secrets: Vec<String>,
        reason: String,
    },
    /// How a sandboxed run's agents carry their provider keys (issue 17
    /// item 5): `delivery` is `placeholder` (bound to `hosts`, the proxy
    /// puts the value back there only) or `plain` (with `reason`). Names
    /// and hosts only, never a value.
    SandboxProviderKeys {
        delivery: String,
        variables: Vec<String>,
        hosts: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    // ---- bounds (issue 19 #5, #6) ----------------------------------------
    /// A containment bound stopped something: `limit` is `memory` (the
    /// kernel killed a process), `run_files` or `writable_layer` (the
    /// filesystem was full at teardown); `bound` in bytes when known.
    SandboxLimitReached {
        limit: String,
        bound: Option<u64>,
        detail: String,
    },
    /// A limit the run was meant to have and does not: `limit` is
    /// `writable_layer` (the engine's storage cannot enforce a size) or
    /// `run_files` (the host could not mount a bounded filesystem).
    SandboxLimitUnenforced {
        limit: String,
        reason: String,
    },
    // ---- agents (upstream names; payloads as upstream's event hooks) ---
    /// One model call is about to be made.
    LlmRequest {
        backend: String,
        model: String,
        message_count: u32,
        tool_count: u32,
    },
    /// One model call answered.
    LlmStepFinished {
        step: u32,
        input_tokens: u64,
        output_tokens: u64,
        finish_reason: String,
        tool_calls: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
    },
    /// A transient provider failure (429, 5xx, transport) is retried.
    LlmRetry {
        attempt: u32,
        delay_ms: u64,
        error: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status_code: Option<u16>,
    },
    /// A tool call starts; `placement` is `container` or `host`.
    ToolStarted {
        tool: String,
        tool_use_id: String,
        input_size: u64,
        placement: String,
        /// The MCP server of an `mcp.<server>.<tool>` call.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        server: Option<String>,
    },
    /// A tool call returned.
    ToolCalled {
        tool: String,
        tool_use_id: String,
        input_size: u64,
        output_size: u64,
        duration_ms: u64,
        placement: String,
        /// The MCP server of an `mcp.<server>.<tool>` call.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        server: Option<String>,
    },
    /// A tool call failed (the model sees the error and may recover).
    ToolError {
        tool: String,
        tool_use_id: String,
        input_size: u64,
        duration_ms: u64,
        error: String,
        placement: String,
        /// The MCP server of an `mcp.<server>.<tool>` call.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        server: Option<String>,
    },
    /// A tool call the node's `tool_policy:` refuses, before it ran
    /// anywhere (the model gets an error result and may recover).
    ToolDenied {
        /// Qualified tool name (`read_file`, `mcp.github.create_issue`).
        tool: String,
        tool_use_id: String,
        /// The `!pattern` that denied it; absent when no allow pattern matched.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rule: Option<String>,
        reason: String,
        /// Where the call was refused: `container` (the in-box runner) or `host`.
        placement: String,
    },
    /// An agent backend took the node.
    DelegateStarted {
        backend: String,
    },
    /// The backend produced the node's output.
    DelegateFinished {
        backend: String,
        duration_ms: u64,
        tokens: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i64>,
        formatting_pass_used: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session_id: Option<String>,
    },
    /// The backend failed the node.
    DelegateError {
        backend: String,
        duration_ms: u64,
        tokens: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i64>,
        code: String,
        error: String,
    },
    /// A claw node runs through `iterion __claw-runner` inside the sandbox.
    SandboxClawRoutedViaRunner {
        reason: String,
        limitations_v1: Vec<String>,
    },
    /// A token or cost budget crossed its warning threshold (80 %).
    BudgetWarning {
        dimension: String,
        used: f64,
        limit: f64,
    },
    /// A budget ran out (upstream's `budget_exceeded`): `dimension` is
    /// `duration` (ms) or `iterations` (node executions) for the workflow's
    /// bounds, `tokens` or `cost_usd` for an agent's; the run or node stops.
    BudgetExceeded {
        dimension: String,
        used: f64,
        limit: f64,
    },
    // ---- worktree: auto (upstream pkg/runtime/worktree.go) -------------
    /// The run's fresh git worktree was created (before the run record):
    /// `branch` is the checked-out branch of the repository at start
    /// (`None`: detached HEAD, nothing to merge into by default), `dirty`
    /// says the repository had uncommitted tracked changes, which the
    /// worktree does not carry.
    WorktreeCreated {
        path: String,
        repo_root: String,
        base_commit: String,
        branch: Option<String>,
        dirty: bool,
    },
    /// A finished run's worktree was promoted: `final_commit`/`final_branch`
    /// are unset when the run made no commit; `merge_status` is `pending`
    /// (`--auto-merge=false`), `merged`, `skipped` (`--merge-into none`, no
    /// branch to merge into, no commits) or `failed` (`reason` says why; the
    /// branch is kept); `removed` says the worktree directory is gone (it
    /// is kept while it holds uncommitted work).
    WorktreeFinalized {
        final_commit: Option<String>,
        final_branch: Option<String>,
        merge_status: String,
        merged_into: Option<String>,
        merged_commit: Option<String>,
        reason: Option<String>,
        removed: bool,
    },
    /// The run's commits could not be put on a branch (upstream's
    /// `worktree_branch_failed`): `sha` is the commit to recover with `git
    /// branch <name> <sha>`, `reason` a token (`invalid_name`,
    /// `git_branch_failed`), `branch` the name tried; the worktree is kept
    /// so the commits stay reachable.
    WorktreeBranchFailed {
        sha: String,
        reason: String,
        branch: String,
        error: String,
    },
    /// The run's worktree stays for inspection or a resume (the run did
    /// not finish, or it holds uncommitted work): `reason` is the run's
    /// status or `uncommitted_changes`.
    WorktreeKept {
        path: String,
        reason: String,
    },
}

impl EventKind {
    /// The event's `type` string.
    pub fn name(&self) -> &'static str {
        match self {
            Self::RunStarted { .. } => "run_started",
            Self::RunAdmission { .. } => "run_admission",
            Self::RunFinished { .. } => "run_finished",
            Self::RunFailed { .. } => "run_failed",
            Self::RunCancelled { .. } => "run_cancelled",
            Self::RunInterrupted { .. } => "run_interrupted",
            Self::RunAttachmentLost { .. } => "run_attachment_lost",
            Self::RunClaimed { .. } => "run_claimed",
            Self::RunReleased { .. } => "run_released",
            Self::HumanInputRequested { .. } => "human_input_requested",
            Self::RunPaused { .. } => "run_paused",
            Self::RunResumed { .. } => "run_resumed",
            Self::HumanAnswersRecorded { .. } => "human_answers_recorded",
            Self::NodeStarted { .. } => "node_started",
            Self::NodeFinished { .. } => "node_finished",
            Self::NodeFailed { .. } => "node_failed",
            Self::EdgeSelected { .. } => "edge_selected",
            Self::BranchStarted { .. } => "branch_started",
            Self::BranchFinished { .. } => "branch_finished",
            Self::JoinReady { .. } => "join_ready",
            Self::RunCheckpoint { .. } => "run_checkpoint",
            Self::SandboxSkipped { .. } => "sandbox_skipped",
            Self::SandboxDriverSelected { .. } => "sandbox_driver_selected",
            Self::SandboxImagePull { .. } => "sandbox_image_pull",
            Self::SandboxStarted { .. } => "sandbox_started",
            Self::SandboxShared { .. } => "sandbox_shared",
            Self::SandboxHostStateMounted { .. } => "sandbox_host_state_mounted",
            Self::SandboxHostBindsDropped { .. } => "sandbox_host_binds_dropped",
            Self::SandboxAttachmentsCopied { .. } => "sandbox_attachments_copied",
            Self::SandboxUserRemap { .. } => "sandbox_user_remap",
            Self::SandboxUidMismatchWarning { .. } => "sandbox_uid_mismatch_warning",
            Self::SandboxDevboxProvisioned { .. } => "sandbox_devbox_provisioned",
            Self::SandboxEnvDenied { .. } => "sandbox_env_denied",
            Self::SandboxImageEnvPlanted { .. } => "sandbox_image_env_planted",
            Self::SandboxNetworkDefaulted { .. } => "sandbox_network_defaulted",
            Self::SandboxBuildStarted { .. } => "sandbox_build_started",
            Self::SandboxBuildFinished { .. } => "sandbox_build_finished",
            Self::SandboxBuildFailed { .. } => "sandbox_build_failed",
            Self::SandboxWorkspaceExportFailed { .. } => "sandbox_workspace_export_failed",
            Self::SandboxWorkspaceExported { .. } => "sandbox_workspace_exported",
            Self::SandboxRunfilesDrained { .. } => "sandbox_runfiles_drained",
            Self::SandboxRunfilesDrainFailed { .. } => "sandbox_runfiles_drain_failed",
            Self::SandboxCleanup { .. } => "sandbox_cleanup",
            Self::SandboxReaped { .. } => "sandbox_reaped",
            Self::SandboxEgressUnenforced { .. } => "sandbox_egress_unenforced",
            Self::NetworkBlocked { .. } => "network_blocked",
            Self::SandboxSecretEgressUnavailable { .. } => "sandbox_secret_egress_unavailable",
            Self::SandboxProviderKeys { .. } => "sandbox_provider_keys",
            Self::SandboxLimitReached { .. } => "sandbox_limit_reached",
            Self::SandboxLimitUnenforced { .. } => "sandbox_limit_unenforced",
            Self::LlmRequest { .. } => "llm_request",
            Self::LlmStepFinished { .. } => "llm_step_finished",
            Self::LlmRetry { .. } => "llm_retry",
            Self::ToolStarted { .. } => "tool_started",
            Self::ToolCalled { .. } => "tool_called",
            Self::ToolError { .. } => "tool_error",
            Self::ToolDenied { .. } => "tool_denied",
            Self::DelegateStarted { .. } => "delegate_started",
            Self::DelegateFinished { .. } => "delegate_finished",
            Self::DelegateError { .. } => "delegate_error",
            Self::SandboxClawRoutedViaRunner { .. } => "sandbox_claw_routed_via_runner",
            Self::BudgetWarning { .. } => "budget_warning",
            Self::BudgetExceeded { .. } => "budget_exceeded",
            Self::WorktreeCreated { .. } => "worktree_created",
            Self::WorktreeFinalized { .. } => "worktree_finalized",
            Self::WorktreeBranchFailed { .. } => "worktree_branch_failed",
            Self::WorktreeKept { .. } => "worktree_kept",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draft_carries_type_and_data() {
        let draft: EventDraft = EventKind::SandboxHostBindsDropped {
            driver: "kubernetes".into(),
            dropped: vec![DroppedBind {
                source: "/h".into(),
                target: "/c".into(),
            }],
            withdrawn_env: vec!["ITERION_ARTIFACT_FILES_DIR".into()],
        }
        .into();
        assert_eq!(draft.kind, "sandbox_host_binds_dropped");
        assert_eq!(draft.data["dropped"][0]["target"], "/c");
        assert_eq!(draft.data["withdrawn_env"][0], "ITERION_ARTIFACT_FILES_DIR");
    }

    #[test]
    fn agent_event_names_match_serde_tags() {
        let kinds = [
            EventKind::LlmRequest {
                backend: "claw".into(),
                model: "anthropic/m".into(),
                message_count: 1,
                tool_count: 0,
            },
            EventKind::LlmStepFinished {
                step: 1,
                input_tokens: 1,
                output_tokens: 2,
                finish_reason: "end_turn".into(),
                tool_calls: 0,
                cost_usd: None,
            },
            EventKind::LlmRetry {
                attempt: 1,
                delay_ms: 10,
                error: "429".into(),
                status_code: Some(429),
            },
            EventKind::SandboxClawRoutedViaRunner {
                reason: "sandbox active".into(),
                limitations_v1: vec![],
            },
            EventKind::BudgetExceeded {
                dimension: "tokens".into(),
                used: 2.0,
                limit: 1.0,
            },
            EventKind::RunClaimed {
                runner_id: "r1".into(),
                delivery: 3,
                attempt: 1,
                lease_revision: 9,
            },
            EventKind::RunReleased {
                runner_id: "r1".into(),
                delivery: 3,
                attempt: 1,
                action: "ack".into(),
                reason: "finished".into(),
            },
        ];
        for kind in kinds {
            let draft: EventDraft = kind.clone().into();
            assert_eq!(draft.kind, kind.name());
        }
    }

    #[test]
    fn name_matches_serde_tag() {
        let kind = EventKind::NetworkBlocked {
            host: "evil.test".into(),
            port: 443,
            reason: "blocked-by-allowlist".into(),
            rule: None,
            node_id: Some("probe".into()),
            secret: None,
        };
        let draft: EventDraft = kind.clone().into();
        assert_eq!(draft.kind, kind.name());
    }
}
