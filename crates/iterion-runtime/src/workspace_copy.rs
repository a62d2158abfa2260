//! The runtime's two steps of a copy-based workspace (issue 14 item 2):
//! completing the plan's [`WorkspaceCopy`] at boot — the source judged as a
//! workspace bind would be (never `/`, a home, a system area), iterion's
//! own areas inside it left out, the copy's record placed in the run's
//! private state dir — and the export at teardown, before cleanup, whose
//! one event the run appends (non-fatal: the run keeps its status).
//!
//! Whether a run is copy-based is decided by
//! `iterion_sandbox::mounts::finalize_mounts_for_driver` from the driver's
//! `Capabilities::workspace_export`; the copy itself is the driver's (it
//! happens before `post_create`), the export rule is `iterion_readback`'s.

use std::collections::BTreeMap;
use std::path::Path;

use iterion_core::{FailureCode, LaunchPlan, SandboxRun};
use iterion_readback::workspace::{ExportOptions, exclusions, export};
use iterion_sandbox::binds::{BindRole, BindScope, HostBindSettings, judge_bind};

use crate::boot::BootError;
use crate::events::Emitter;

/// Complete `plan.workspace_copy` (when the policy made the run
/// copy-based): the judged real source, the exclusions, the record's path.
pub(crate) fn complete(
    plan: &mut LaunchPlan,
    settings: &HostBindSettings,
    scope: &BindScope<'_>,
    host_dir: &Path,
) -> Result<(), BootError> {
    let Some(copy) = plan.workspace_copy.as_mut() else {
        return Ok(());
    };
    let real = judge_bind(&copy.host, BindRole::Workspace, settings, scope).map_err(|e| {
        BootError::Refused {
            code: FailureCode::SandboxSpecRefused,
            reason: e.to_string(),
        }
    })?;
    copy.exclude = exclusions(&real, settings.private.iter().map(String::as_str));
    copy.host = real;
    // The record of an earlier attempt of this run (a resume after a crash
    // left the run's private dir behind) is not this copy's: the copy
    // creates its record afresh and refuses an existing one.
    let manifest = host_dir.join("workspace-manifest");
    match std::fs::remove_file(&manifest) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(BootError::Io {
                operation: format!("remove {}", manifest.display()),
                source,
            });
        }
    }
    copy.manifest = Some(manifest.to_string_lossy().into_owned());
    Ok(())
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

    fn plan(host: &str) -> LaunchPlan {
        LaunchPlan {
            workspace_copy: Some(WorkspaceCopy {
                host: host.to_owned(),
                ..WorkspaceCopy::default()
            }),
            ..LaunchPlan::default()
        }
    }

    #[test]
    fn the_copy_is_judged_like_its_bind_and_leaves_iterions_areas_out() {
        let ws = tempfile::tempdir().expect("ws");
        let state = tempfile::tempdir().expect("state");
        let real = ws.path().canonicalize().expect("real");
        let store = real.join(".iterion").to_string_lossy().into_owned();
        let settings = HostBindSettings {
            private: vec![store, "/elsewhere/state".to_owned()],
            ..HostBindSettings::default()
        };
        let mut p = plan(&ws.path().to_string_lossy());
        complete(&mut p, &settings, &BindScope::default(), state.path()).expect("complete");
        let copy = p.workspace_copy.expect("copy");
        assert_eq!(copy.host, real.to_string_lossy());
        assert_eq!(copy.exclude, vec![".iterion".to_owned()]);
        assert_eq!(
            copy.manifest.as_deref(),
            Some(
                state
                    .path()
                    .join("workspace-manifest")
                    .to_string_lossy()
                    .as_ref()
            )
        );
        // `/` (the whole host) is never a workspace, copied or bound.
        let mut root = plan("/");
        let e = complete(&mut root, &settings, &BindScope::default(), state.path())
            .expect_err("the root is refused");
        assert_eq!(e.code(), "SANDBOX_SPEC_REFUSED", "{e}");
        // A bind-based plan is left alone.
        let mut bind = LaunchPlan::default();
        complete(&mut bind, &settings, &BindScope::default(), state.path()).expect("noop");
        assert!(bind.workspace_copy.is_none());
    }
}
