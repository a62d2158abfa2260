//! Seed step 21 for a decided sandbox: say a full run-files dir, drain the
//! declared read-back set into the run store, remove the sandbox, stop the
//! proxy, take the secret files and the run's host directories off the
//! host. Best effort: nothing here changes the run's status.

use std::collections::BTreeMap;

use iterion_core::{EventKind, RunStore};
use iterion_readback::DrainOptions;

use super::dirs::remove_run_host_dir;
use crate::boot::{BootContext, Booted};

pub(super) async fn teardown(
    store: &dyn RunStore,
    drain: &DrainOptions,
    env: &BTreeMap<String, String>,
    booted: Booted,
    ctx: &BootContext<'_>,
) {
    let Booted::Sandbox { run, keep, .. } = booted else {
        // A host run: dropping it removes its scratch dir.
        return;
    };
    let kept = keep.into_sandbox();
    if let Some(kept) = kept.as_deref()
        && let (Some(size), Some(dir)) = (kept.run_files_bound, &kept.host_dir)
        && crate::runfiles::full(&dir.join("artifact-files"), size) == Some(true)
    {
        ctx.events.emit(EventKind::SandboxLimitReached {
            limit: "run_files".to_owned(),
            bound: Some(size.0),
            detail: format!(
                "the run-files dir was full at teardown: writes past {size} failed in the sandbox"
            ),
        });
    }
    // A copy-based workspace comes back first: it is the run's work, and
    // the container must still be there to give it.
    if let Some(kept) = kept.as_deref() {
        crate::workspace_copy::export_back(run.as_ref(), &kept.plan, env, ctx.events).await;
    }
    if let Some(kept) = kept.as_deref()
        && !kept.plan.read_back.is_empty()
    {
        let report = iterion_readback::drain(
            run.as_ref(),
            store,
            ctx.run_id,
            &kept.plan.read_back,
            drain.clone(),
        )
        .await;
        for event in report.events {
            ctx.events.emit(event);
        }
    }
    let container = run.container().to_owned();
    let ok = run.cleanup().await.is_ok();
    ctx.events.emit(EventKind::SandboxCleanup {
        driver: run.driver(),
        container,
        ok,
    });
    if let Some(kept) = kept {
        if let Some(p) = kept.proxy {
            p.shutdown().await;
        }
        drop(kept.secret_files);
        // The sandbox is gone: nothing reaches the listeners any more.
        drop(kept.gateway);
        if let Some(dir) = kept.host_dir {
            remove_run_host_dir(&dir);
        }
    }
}
