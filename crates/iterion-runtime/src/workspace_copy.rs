//! The runtime's two steps of a copy-based workspace (issue 14 item 2):
//! at start, clearing the copy's record left by an earlier attempt of the
//! run; at teardown, before the drain and cleanup, the export, whose one
//! event the run appends (non-fatal: the run keeps its status).
//!
//! Whether a run is copy-based is decided by
//! `iterion_sandbox::mounts::finalize_mounts_for_driver` from the driver's
//! `Capabilities::workspace_export`, and the copy's source is judged (and
//! iterion's own areas left out of it) by the sandbox decision; the copy
//! itself is the driver's (it happens before `post_create`), the export
//! rule is `iterion_readback`'s.

use std::collections::BTreeMap;
use std::path::Path;

use iterion_core::{LaunchPlan, SandboxRun};
use iterion_readback::workspace::{ExportOptions, export};

use crate::boot::BootError;
use crate::events::Emitter;

/// Clear the record an earlier attempt of this run left (a resume after a
/// crash left the run's private dir behind): it is not this copy's, and
/// the copy creates its record afresh, refusing an existing one.
pub(crate) fn clear_stale_record(plan: &LaunchPlan) -> Result<(), BootError> {
    let Some(manifest) = plan
        .workspace_copy
        .as_ref()
        .and_then(|c| c.manifest.as_deref())
    else {
        return Ok(());
    };
    match std::fs::remove_file(Path::new(manifest)) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(BootError::Io {
            operation: format!("remove {manifest}"),
            source,
        }),
    }
}

/// Write the sandbox's workspace back onto the host, once, and append the
/// outcome (`sandbox_workspace_exported` or
/// `sandbox_workspace_export_failed`).
pub(crate) async fn export_back(
    run: &dyn SandboxRun,
    plan: &LaunchPlan,
    env: &BTreeMap<String, String>,
    events: &Emitter,
) {
    let Some(copy) = &plan.workspace_copy else {
        return;
    };
    let report = export(run, copy, ExportOptions::from_env(env)).await;
    for event in report.events {
        events.emit(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iterion_core::WorkspaceCopy;

    #[test]
    fn an_earlier_attempts_record_is_cleared_and_a_bind_plan_left_alone() {
        let state = tempfile::tempdir().expect("state");
        let manifest = state.path().join("workspace-manifest");
        std::fs::write(&manifest, b"stale").expect("stale record");
        let plan = LaunchPlan {
            workspace_copy: Some(WorkspaceCopy {
                host: "/w".to_owned(),
                manifest: Some(manifest.to_string_lossy().into_owned()),
                ..WorkspaceCopy::default()
            }),
            ..LaunchPlan::default()
        };
        clear_stale_record(&plan).expect("cleared");
        assert!(!manifest.exists());
        // Nothing to clear is not an error, nor is a bind-based plan.
        clear_stale_record(&plan).expect("absent");
        clear_stale_record(&LaunchPlan::default()).expect("bind plan");
    }
}
