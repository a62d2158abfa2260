//! One realistic value of every [`EventKind`] variant, for the tests that
//! must cover them all: the golden wire format and the round trip here,
//! the CLI's per-kind rendering and the studio's timeline. Built only for
//! tests (`cfg(test)` here, the `test-samples` feature for the crates
//! above). A test checks that the names of these samples are exactly
//! [`EventKind::NAMES`], so a new variant without a sample fails.

use serde_json::json;

use super::{DroppedBind, EventKind, FailedBranch};
use crate::driver::DriverName;
use crate::failure::{Disposition, FailureCode, RunStatus};
use crate::mode::AdmissionDecision;
use crate::mode::{Mode, Trust};
use crate::net::NetPreset;
use crate::spec::NetworkMode;

/// Every variant once (a few twice, where an optional part changes what a
/// reader shows), in declaration order.
pub fn every_kind() -> Vec<EventKind> {
    use EventKind as K;
    vec![
        K::RunStarted {
            workflow: "review".into(),
            file: "flows/review.iter".into(),
            trust: Trust::Untrusted,
        },
        K::RunAdmission {
            decision: AdmissionDecision::Admitted,
            phase: "pre_start".into(),
            code: None,
            reason: "sandbox inline from workflow".into(),
        },
        K::RunAdmission {
            decision: AdmissionDecision::Denied,
            phase: "pre_start".into(),
            code: Some("untrusted_without_sandbox".into()),
            reason: "an untrusted run needs a sandbox".into(),
        },
        K::RunFinished { duration_ms: 1234 },
        K::RunFailed {
            failure_code: FailureCode::SandboxDriverUnavailable,
            disposition: Disposition::Deterministic,
            status: RunStatus::Failed,
            error: "no container runtime".into(),
        },
        K::RunCancelled {
            reason: "SIGINT".into(),
        },
        K::RunInterrupted {
            reason: "SIGTERM".into(),
        },
        K::RunAttachmentLost {
            name: "spec".into(),
            required: true,
            reason: "bytes changed since stored".into(),
        },
        K::RunClaimed {
            runner_id: "runner-1".into(),
            delivery: 3,
            attempt: 1,
            lease_revision: 9,
        },
        K::RunReleased {
            runner_id: "runner-1".into(),
            delivery: 3,
            attempt: 1,
            action: "ack".into(),
            reason: "finished".into(),
        },
        K::HumanInputRequested {
            interaction_id: "ask-1".into(),
            questions: json!({"input": {"draft": "hello"}, "instructions": "approve?"}),
            fields: vec!["approved".into(), "comment".into()],
        },
        K::RunPaused {
            reason: "waiting for a human".into(),
        },
        K::RunResumed {
            resumed_from: RunStatus::PausedWaitingHuman,
            restart_node: Some("ask".into()),
            forced: true,
        },
        K::HumanAnswersRecorded {
            interaction_id: "ask-1".into(),
            answers: json!({"approved": true, "comment": "ok"}),
        },
        K::NodeStarted {
            kind: "tool".into(),
        },
        K::NodeFinished {
            exit_code: Some(0),
            duration_ms: 850,
            output: json!({"stdout": "ok\n"}),
        },
        K::NodeFailed {
            exit_code: Some(2),
            error: "exit status 2".into(),
            stderr_tail: "no such file\n".into(),
        },
        K::EdgeSelected {
            from: "check".into(),
            to: "fix".into(),
            condition: Some("!passed".into()),
            loop_name: Some("retry".into()),
            iteration: Some(2),
            round_robin_index: Some(1),
            foreach: Some("files".into()),
            items: Some(4),
        },
        K::BranchStarted {
            branch_id: "fan#1".into(),
            from: "fan".into(),
            to: "lint".into(),
            index: None,
        },
        K::BranchStarted {
            branch_id: "each#2".into(),
            from: "each".into(),
            to: "check".into(),
            index: Some(2),
        },
        K::BranchFinished {
            branch_id: "fan#1".into(),
            outcome: "failed".into(),
            join_node: Some("join".into()),
            error: Some("exit status 1".into()),
        },
        K::JoinReady {
            strategy: "wait_all".into(),
            branches: 2,
            failed_branches: vec![FailedBranch {
                branch_id: "fan#1".into(),
                error: "exit status 1".into(),
            }],
            terminal_join: false,
        },
        K::JoinReady {
            strategy: "best_effort".into(),
            branches: 3,
            failed_branches: vec![],
            terminal_join: true,
        },
        K::RunCheckpoint {
            version: 1,
            step: json!({"op": "node_finished", "node": "build"}),
        },
        K::SandboxSkipped {
            mode: Mode::Auto,
            source: "env".into(),
            reason: "no container runtime".into(),
            file_secrets_dropped: true,
            refused: None,
            error_code: None,
            driver: None,
        },
        K::SandboxSkipped {
            mode: Mode::Inline,
            source: "workflow".into(),
            reason: "inline sandbox without a driver".into(),
            file_secrets_dropped: false,
            refused: Some(true),
            error_code: Some(FailureCode::SandboxDriverUnavailable),
            driver: Some(DriverName::Docker),
        },
        K::SandboxDriverSelected {
            driver: DriverName::Podman,
            host: "local".into(),
        },
        K::SandboxImagePull {
            image: "alpine:3.20".into(),
            status: "downloading".into(),
            current: Some(512),
            total: Some(2048),
        },
        K::SandboxStarted {
            driver: DriverName::Docker,
            mode: Mode::Inline,
            source: "workflow".into(),
            image: "alpine:3.20".into(),
            has_post_create: false,
            container: "iterion-r1".into(),
            limits: json!({"memory": "512MiB", "cpus": "1"}),
            egress: "enforced".into(),
        },
        K::SandboxShared {
            parent_run_id: "r0".into(),
            driver: DriverName::Docker,
            container: "iterion-r0".into(),
        },
        K::SandboxHostStateMounted {
            enabled: true,
            source: "workflow".into(),
            workspace_folder: Some("/workspace".into()),
            mounts: vec!["~/.gitconfig".into()],
        },
        K::SandboxHostBindsDropped {
            driver: DriverName::Kubernetes,
            dropped: vec![DroppedBind {
                source: "/h".into(),
                target: "/c".into(),
            }],
            withdrawn_env: vec!["ITERION_ARTIFACT_FILES_DIR".into()],
        },
        K::SandboxAttachmentsCopied {
            driver: DriverName::Docker,
            count: 2,
            bytes: 4096,
        },
        K::SandboxUserRemap {
            uid: 1000,
            gid: 1000,
            reason: "rootless engine".into(),
        },
        K::SandboxUidMismatchWarning {
            spec_user: "node".into(),
            host_uid: 1001,
        },
        K::SandboxDevboxProvisioned {
            target: "/opt/devbox".into(),
            sources: vec!["devbox.json".into()],
            configs: vec!["/opt/devbox/devbox.json".into()],
            bin_dirs: vec!["/opt/devbox/bin".into()],
            path: "/opt/devbox/bin:/usr/bin".into(),
            errors: vec![],
        },
        K::SandboxEnvDenied {
            keys: vec!["AWS_SECRET_ACCESS_KEY".into()],
            source: "workflow".into(),
            run_id: "r1".into(),
        },
        K::SandboxImageEnvPlanted {
            keys: vec!["PATH".into()],
        },
        K::SandboxNetworkDefaulted {
            mode: NetworkMode::Allowlist,
            preset: NetPreset::IterionDefault,
            source: "/repo/.devcontainer.json".into(),
        },
        K::SandboxBuildStarted {
            driver: DriverName::Podman,
            dockerfile: "Dockerfile".into(),
            context: ".".into(),
        },
        K::SandboxBuildFinished {
            driver: DriverName::Podman,
            target: "iterion-build-r1".into(),
            duration_ms: 5000,
        },
        K::SandboxBuildFailed {
            driver: DriverName::Podman,
            error: "RUN exited 1".into(),
        },
        K::SandboxWorkspaceExportFailed {
            driver: DriverName::Kubernetes,
            error: "member refused".into(),
            reason: "archive_error".into(),
            declined: vec!["passwd".into()],
            kept: vec!["notes.md".into()],
        },
        K::SandboxWorkspaceExported {
            driver: DriverName::Kubernetes,
            files: 3,
            bytes: 900,
            deleted: 1,
            kept: vec![],
        },
        K::SandboxRunfilesDrained {
            driver: DriverName::Docker,
            files: 2,
            bytes: 2048,
        },
        K::SandboxRunfilesDrainFailed {
            driver: DriverName::Docker,
            reason: "cap_exceeded".into(),
            declined: vec!["out/big.bin".into()],
            stale: true,
        },
        K::SandboxCleanup {
            driver: DriverName::Docker,
            container: "iterion-r1".into(),
            ok: true,
        },
        K::SandboxReaped {
            driver: "host".into(),
            resource: "/var/lib/iterion/runs/r1".into(),
            run_id: "r1".into(),
            reason: "run finished".into(),
        },
        K::SandboxEgressUnenforced {
            driver: DriverName::Podman,
            reason: "rootless networking cannot firewall".into(),
        },
        K::NetworkBlocked {
            host: "evil.test".into(),
            port: 443,
            reason: "blocked-by-allowlist".into(),
            rule: None,
            node_id: Some("probe".into()),
            secret: None,
            authority: None,
        },
        K::NetworkBlocked {
            host: "paste.test".into(),
            port: 443,
            reason: "secret_exfiltration".into(),
            rule: Some("api.test".into()),
            node_id: None,
            secret: Some("API_TOKEN".into()),
            authority: None,
        },
        K::NetworkBlocked {
            host: "api.test".into(),
            port: 443,
            reason: "authority_mismatch".into(),
            rule: None,
            node_id: Some("probe".into()),
            secret: None,
            authority: Some("evil.test".into()),
        },
        K::SandboxSecretEgressUnavailable {
            secrets: vec!["API_TOKEN".into()],
            reason: "driver without TLS inspection".into(),
        },
        K::SandboxProviderKeys {
            delivery: "placeholder".into(),
            variables: vec!["ANTHROPIC_API_KEY".into()],
            hosts: vec!["api.anthropic.com".into()],
            reason: None,
        },
        K::SandboxLimitReached {
            limit: "memory".into(),
            bound: Some(536_870_912),
            detail: "the kernel killed a process".into(),
        },
        K::SandboxLimitUnenforced {
            limit: "writable_layer".into(),
            reason: "overlay without quota".into(),
        },
        K::LlmRequest {
            backend: "claw".into(),
            model: "anthropic/claude".into(),
            message_count: 3,
            tool_count: 5,
        },
        K::LlmStepFinished {
            step: 2,
            input_tokens: 1200,
            output_tokens: 300,
            finish_reason: "tool_use".into(),
            tool_calls: 1,
            cost_usd: Some(0.25),
        },
        K::LlmRetry {
            attempt: 1,
            delay_ms: 500,
            error: "429 too many requests".into(),
            status_code: Some(429),
        },
        K::ToolStarted {
            tool: "mcp.github.create_issue".into(),
            tool_use_id: "tu1".into(),
            input_size: 42,
            placement: "host".into(),
            server: Some("github".into()),
        },
        K::ToolCalled {
            tool: "read_file".into(),
            tool_use_id: "tu2".into(),
            input_size: 20,
            output_size: 512,
            duration_ms: 12,
            placement: "container".into(),
            server: None,
        },
        K::ToolError {
            tool: "bash".into(),
            tool_use_id: "tu3".into(),
            input_size: 8,
            duration_ms: 30,
            error: "exit status 127".into(),
            placement: "container".into(),
            server: None,
        },
        K::ToolDenied {
            tool: "mcp.github.delete_repo".into(),
            tool_use_id: "tu4".into(),
            rule: Some("!mcp.github.delete_*".into()),
            reason: "denied by tool_policy".into(),
            placement: "host".into(),
        },
        K::DelegateStarted {
            backend: "claude_code".into(),
        },
        K::DelegateFinished {
            backend: "claude_code".into(),
            duration_ms: 9000,
            tokens: 4000,
            cost_usd: Some(0.5),
            exit_code: Some(0),
            formatting_pass_used: false,
            session_id: Some("s1".into()),
        },
        K::DelegateError {
            backend: "claw".into(),
            duration_ms: 100,
            tokens: 0,
            exit_code: None,
            code: "AGENT_PROVIDER".into(),
            error: "401 unauthorized".into(),
        },
        K::SandboxClawRoutedViaRunner {
            reason: "sandbox active".into(),
            limitations_v1: vec!["no host tools".into()],
        },
        K::BudgetWarning {
            dimension: "tokens".into(),
            used: 8000.0,
            limit: 10000.0,
        },
        K::BudgetExceeded {
            dimension: "cost_usd".into(),
            used: 1.5,
            limit: 1.0,
        },
        K::WorktreeCreated {
            path: "/repo/.iterion/worktrees/r1".into(),
            repo_root: "/repo".into(),
            base_commit: "0123456789abcdef".into(),
            branch: Some("main".into()),
            dirty: false,
        },
        K::WorktreeFinalized {
            final_commit: Some("fedcba9876543210".into()),
            final_branch: Some("iterion/r1".into()),
            merge_status: "merged".into(),
            merged_into: Some("main".into()),
            merged_commit: Some("aaaaaaa1111111".into()),
            reason: None,
            removed: true,
        },
        K::WorktreeFinalized {
            final_commit: None,
            final_branch: None,
            merge_status: "skipped".into(),
            merged_into: None,
            merged_commit: None,
            reason: Some("no commits".into()),
            removed: true,
        },
        K::WorktreeBranchFailed {
            sha: "fedcba9876543210".into(),
            reason: "invalid_name".into(),
            branch: "iterion/bad..name".into(),
            error: "not a valid branch name".into(),
        },
        K::WorktreeKept {
            path: "/repo/.iterion/worktrees/r1".into(),
            reason: "uncommitted_changes".into(),
        },
    ]
}
