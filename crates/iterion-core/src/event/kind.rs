//! Every event the runtime emits, as a typed value: [`EventKind`], its
//! names and the small payload structs it carries. Its serde is the wire
//! format of `docs/reference/SPEC.md` §3 (`{type, data}`, adjacently
//! tagged), so what is emitted and what is read back go through this one
//! type. Where a field's values are a closed set already typed elsewhere
//! in this crate (failure codes, statuses, modes, drivers, admission
//! decisions), it holds that type, serialised to the same words as the
//! type's own `as_str`; fields whose set is owned by a crate above this
//! one (the node kind, the egress verdict, the host kind, an agent's
//! placement) stay strings, since `iterion-core` cannot name them.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::wire;
use crate::driver::DriverName;
use crate::failure::{Disposition, FailureCode, RunStatus};
use crate::mode::{AdmissionDecision, Mode, Trust};
use crate::net::NetPreset;
use crate::spec::NetworkMode;

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
        trust: Trust,
    },
    RunAdmission {
        decision: AdmissionDecision,
        phase: String,
        code: Option<String>,
        reason: String,
    },
    RunFinished {
        duration_ms: u64,
    },
    RunFailed {
        failure_code: FailureCode,
        disposition: Disposition,
        status: RunStatus,
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
        resumed_from: RunStatus,
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
        #[serde(with = "wire::mode_word")]
        mode: Mode,
        source: String,
        reason: String,
        #[serde(default)]
        file_secrets_dropped: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        refused: Option<bool>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error_code: Option<FailureCode>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        driver: Option<DriverName>,
    },
    SandboxDriverSelected {
        driver: DriverName,
        host: String,
    },
    SandboxImagePull {
        image: String,
        status: String,
        current: Option<u64>,
        total: Option<u64>,
    },
    SandboxStarted {
        driver: DriverName,
        #[serde(with = "wire::mode_word")]
        mode: Mode,
        source: String,
        image: String,
        has_post_create: bool,
        container: String,
        limits: Value,
        egress: String,
    },
    SandboxShared {
        parent_run_id: String,
        driver: DriverName,
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
        driver: DriverName,
        dropped: Vec<DroppedBind>,
        withdrawn_env: Vec<String>,
    },
    SandboxAttachmentsCopied {
        driver: DriverName,
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
        mode: NetworkMode,
        preset: NetPreset,
        source: String,
    },
    SandboxBuildStarted {
        driver: DriverName,
        dockerfile: String,
        context: String,
    },
    SandboxBuildFinished {
        driver: DriverName,
        target: String,
        duration_ms: u64,
    },
    SandboxBuildFailed {
        driver: DriverName,
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
        driver: DriverName,
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
        driver: DriverName,
        files: u64,
        bytes: u64,
        deleted: u64,
        #[serde(default)]
        kept: Vec<String>,
    },
    SandboxRunfilesDrained {
        driver: DriverName,
        files: u64,
        bytes: u64,
    },
    SandboxRunfilesDrainFailed {
        driver: DriverName,
        reason: String,
        declined: Vec<String>,
        stale: bool,
    },
    SandboxCleanup {
        driver: DriverName,
        container: String,
        ok: bool,
    },
    SandboxReaped {
        /// The driver whose leftover it was, or `host` for a run's host
        /// directories (not a driver, so this stays a word).
        driver: String,
        resource: String,
        run_id: String,
        reason: String,
    },
    SandboxEgressUnenforced {
        driver: DriverName,
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
        /// The authority a request named inside an inspected tunnel to
        /// `host:port` (reason `authority_mismatch`, issue 31 item 4), as
        /// sent: the event names both.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        authority: Option<String>,
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
    /// puts the value back there only), `partial` (some could not be
    /// bound, `reason` names them) or `plain` (with `reason`). Names and
    /// hosts only, never a value.
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

/// `name()` and [`EventKind::NAMES`] from one list, so the names a build
/// knows cannot drift from its variants: the match is exhaustive (a new
/// variant without a name does not compile) and the list is that match's.
macro_rules! event_names {
    ($($variant:ident => $name:literal,)+) => {
        impl EventKind {
            /// Every event name this build knows, in declaration order.
            pub const NAMES: &'static [&'static str] = &[$($name),+];

            /// The event's `type` string.
            pub fn name(&self) -> &'static str {
                match self {
                    $(Self::$variant { .. } => $name,)+
                }
            }
        }
    };
}

event_names! {
    RunStarted => "run_started",
    RunAdmission => "run_admission",
    RunFinished => "run_finished",
    RunFailed => "run_failed",
    RunCancelled => "run_cancelled",
    RunInterrupted => "run_interrupted",
    RunAttachmentLost => "run_attachment_lost",
    RunClaimed => "run_claimed",
    RunReleased => "run_released",
    HumanInputRequested => "human_input_requested",
    RunPaused => "run_paused",
    RunResumed => "run_resumed",
    HumanAnswersRecorded => "human_answers_recorded",
    NodeStarted => "node_started",
    NodeFinished => "node_finished",
    NodeFailed => "node_failed",
    EdgeSelected => "edge_selected",
    BranchStarted => "branch_started",
    BranchFinished => "branch_finished",
    JoinReady => "join_ready",
    RunCheckpoint => "run_checkpoint",
    SandboxSkipped => "sandbox_skipped",
    SandboxDriverSelected => "sandbox_driver_selected",
    SandboxImagePull => "sandbox_image_pull",
    SandboxStarted => "sandbox_started",
    SandboxShared => "sandbox_shared",
    SandboxHostStateMounted => "sandbox_host_state_mounted",
    SandboxHostBindsDropped => "sandbox_host_binds_dropped",
    SandboxAttachmentsCopied => "sandbox_attachments_copied",
    SandboxUserRemap => "sandbox_user_remap",
    SandboxUidMismatchWarning => "sandbox_uid_mismatch_warning",
    SandboxDevboxProvisioned => "sandbox_devbox_provisioned",
    SandboxEnvDenied => "sandbox_env_denied",
    SandboxImageEnvPlanted => "sandbox_image_env_planted",
    SandboxNetworkDefaulted => "sandbox_network_defaulted",
    SandboxBuildStarted => "sandbox_build_started",
    SandboxBuildFinished => "sandbox_build_finished",
    SandboxBuildFailed => "sandbox_build_failed",
    SandboxWorkspaceExportFailed => "sandbox_workspace_export_failed",
    SandboxWorkspaceExported => "sandbox_workspace_exported",
    SandboxRunfilesDrained => "sandbox_runfiles_drained",
    SandboxRunfilesDrainFailed => "sandbox_runfiles_drain_failed",
    SandboxCleanup => "sandbox_cleanup",
    SandboxReaped => "sandbox_reaped",
    SandboxEgressUnenforced => "sandbox_egress_unenforced",
    NetworkBlocked => "network_blocked",
    SandboxSecretEgressUnavailable => "sandbox_secret_egress_unavailable",
    SandboxProviderKeys => "sandbox_provider_keys",
    SandboxLimitReached => "sandbox_limit_reached",
    SandboxLimitUnenforced => "sandbox_limit_unenforced",
    LlmRequest => "llm_request",
    LlmStepFinished => "llm_step_finished",
    LlmRetry => "llm_retry",
    ToolStarted => "tool_started",
    ToolCalled => "tool_called",
    ToolError => "tool_error",
    ToolDenied => "tool_denied",
    DelegateStarted => "delegate_started",
    DelegateFinished => "delegate_finished",
    DelegateError => "delegate_error",
    SandboxClawRoutedViaRunner => "sandbox_claw_routed_via_runner",
    BudgetWarning => "budget_warning",
    BudgetExceeded => "budget_exceeded",
    WorktreeCreated => "worktree_created",
    WorktreeFinalized => "worktree_finalized",
    WorktreeBranchFailed => "worktree_branch_failed",
    WorktreeKept => "worktree_kept",
}
