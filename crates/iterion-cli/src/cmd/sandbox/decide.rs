//! The sandbox a run in this directory would get, decided exactly as the
//! run decides it (`iterion_runtime::SandboxHost::decide`, same request
//! shape): the one call both doctors (plain and `--strict`) and `sandbox
//! manifests` render. Owns no rendering and no check; it only builds the
//! run's request from what the doctor knows.

use iterion_core::RunId;
use iterion_runtime::{RunRequest, SandboxHost};
use iterion_sandbox::host::HostKind;

/// The sandbox a run of `workflow` (none: a workflow with no block and no
/// secrets) would get in this directory, decided as the run decides it.
pub(crate) fn decide_here(
    host: &SandboxHost,
    workflow: Option<&iterion_dsl::ir::Workflow>,
    flags: &iterion_sandbox::precedence::SandboxFlags,
    untrusted: bool,
    target: Option<HostKind>,
) -> anyhow::Result<iterion_runtime::Decided> {
    // The run's own workspace: the current directory, resolved (cmd/run.rs).
    let cwd = std::env::current_dir()?;
    let workspace = cwd.canonicalize().unwrap_or(cwd);
    let run_id = RunId::generate();
    Ok(host.decide(&RunRequest {
        run_id: &run_id,
        sandbox: workflow.and_then(|w| w.sandbox.as_ref().map(|d| &d.spec)),
        secrets: workflow.map(|w| w.secrets.as_slice()).unwrap_or_default(),
        trust: if untrusted {
            iterion_core::Trust::Untrusted
        } else {
            iterion_core::Trust::Trusted
        },
        workspace: &workspace,
        flags,
        target,
        attachments: workflow.is_some_and(|w| !w.attachments.is_empty()),
        // The strict doctor judges the checkout itself; a run's worktree
        // does not exist before the run.
        worktree_git_dir: None,
        worktree_admin_dir: None,
    }))
}
