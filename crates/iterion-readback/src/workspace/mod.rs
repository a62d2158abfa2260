//! Copy-based workspaces (issue 14 item 2): the host workspace copied into
//! a sandbox that has no host bind (a bindless Docker or Podman engine, a
//! Kubernetes pod) before `post_create`, and written back onto the host at
//! teardown — the host-directory sink of the same bounded tar reader the
//! ADR-143 drain uses, through the same export seam
//! ([`SandboxRun::export`]) and the same walk (an oversized member is
//! declined at its header and the rest exported piece by piece).
//!
//! It owns the copy ([`copy_in`], [`copy_into`]), its record (`manifest`:
//! what was copied, so the export can tell a run's change from a host
//! edit), and the export ([`export`]). It does not decide whether a run is
//! copy-based (`iterion_sandbox::mounts::finalize_mounts_for_driver`
//! does, from the driver's [`Capabilities::workspace_export`]) nor emit
//! events (the runtime appends the one [`ExportReport::events`] holds).
//!
//! **The export rule** (documented in docs/workspaces.md): the host workspace ends
//! as the run's final workspace, except where that would lose something.
//! - a member the run did not touch (same size, mode, mtime and link as
//!   copied) is not written;
//! - a file or link the run created or changed is written — unless the
//!   host file changed during the run too (then the host's is kept and
//!   named in `kept`);
//! - an entry the run deleted is deleted on the host only when the host
//!   still holds exactly the inode that was copied (same device, inode,
//!   size, mtime and ctime), only after a complete export, and a directory
//!   only when it is then empty: a file created or edited on the host
//!   meanwhile is never deleted;
//! - iterion's own areas (`WorkspaceCopy::exclude`: the run store, the
//!   state dirs) are neither copied, written nor deleted; nothing outside
//!   the workspace root is ever reached (see `hostfs`);
//! - declined by name and reported, never written: absolute names, `..`,
//!   names that are not UTF-8 or too long, devices, fifos, sparse members,
//!   symlinks that point outside the workspace or through another symlink,
//!   hardlinks to anything but a regular file of the workspace (those are
//!   written as copies), members under iterion's areas, members over the
//!   export cap; setuid, setgid and sticky bits are dropped.
//!
//! Without a record (`WorkspaceCopy::manifest` unset or unreadable) the
//! export only adds and overwrites, as upstream's tar extraction does.
//!
//! [`SandboxRun::export`]: iterion_core::SandboxRun::export
//! [`Capabilities::workspace_export`]: iterion_core::Capabilities::workspace_export

mod copy;
mod export;
mod hostfs;
mod manifest;
pub mod reason;
mod root;

use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::time::Duration;

use iterion_core::driver::{DriverError, WORKSPACE_COPY_TIMEOUT_ENV};
use iterion_core::{ByteStream, SandboxRun, WorkspaceCopy};
use tokio::task::JoinHandle;

pub use copy::CopyStats;
pub use export::{ExportOptions, ExportReport, export};
pub use root::WorkspaceError;
use root::{exclusion_components, open_workspace};

/// Start copying `copy.host` (the archive stream, and the task writing it
/// whose result says why the stream ended early): symlinks as symlinks,
/// never followed; `copy.exclude` left out; entries owned by `owner` in the
/// archive (the sandbox's user); the record written to `copy.manifest`
/// (created afresh, `0600`, never through a symlink). Must run inside a
/// Tokio runtime.
pub fn copy_in(
    copy: &WorkspaceCopy,
    owner: Option<(u32, u32)>,
) -> Result<(ByteStream, JoinHandle<Result<CopyStats, WorkspaceError>>), WorkspaceError> {
    let root = open_workspace(&copy.host)?;
    let manifest = match &copy.manifest {
        None => None,
        Some(path) => Some(
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc_nofollow())
                .open(path)
                .map_err(|source| WorkspaceError::Manifest { source })?,
        ),
    };
    Ok(copy::start(
        root,
        copy.host.clone(),
        exclusion_components(copy),
        manifest,
        owner,
    ))
}

fn libc_nofollow() -> i32 {
    rustix::fs::OFlags::NOFOLLOW.bits() as i32
}

/// Copy `copy.host` into the sandbox's workspace ([`SandboxRun::workdir`])
/// through [`SandboxRun::import`] (the Engine API's archive endpoint, a
/// `tar -x` over exec on Kubernetes), bounded by `timeout`
/// (`ITERION_SANDBOX_WORKSPACE_COPY_TIMEOUT`). What every copy-based driver
/// calls between its start and `post_create`.
pub async fn copy_into(
    run: &dyn SandboxRun,
    copy: &WorkspaceCopy,
    owner: Option<(u32, u32)>,
    timeout: Duration,
) -> Result<CopyStats, DriverError> {
    let (stream, writer) = copy_in(copy, owner).map_err(WorkspaceError::into_driver_error)?;
    let imported = tokio::time::timeout(timeout, run.import(run.workdir(), stream)).await;
    let written = writer.await.map_err(|e| DriverError::Io {
        operation: "copy the workspace into the sandbox".to_owned(),
        source: io::Error::other(e),
    })?;
    match imported {
        Err(_) => Err(DriverError::PhaseTimeout {
            phase: "workspace copy",
            timeout,
            variable: WORKSPACE_COPY_TIMEOUT_ENV,
        }),
        // The writer's own error says why the stream ended early — unless
        // it only saw the sandbox stop reading, which the import explains.
        Ok(imported) => match (written, imported) {
            (Ok(stats), Ok(())) => Ok(stats),
            (Err(WorkspaceError::Stream { .. }), Err(e)) | (Ok(_), Err(e)) => Err(e),
            (Err(w), _) => Err(w.into_driver_error()),
        },
    }
}
