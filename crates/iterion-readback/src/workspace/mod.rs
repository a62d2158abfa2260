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
//! **The export rule** (documented in the README): the host workspace ends
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

use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Duration;

use iterion_core::driver::{DriverError, WORKSPACE_COPY_TIMEOUT_ENV};
use iterion_core::{ByteStream, SandboxRun, WorkspaceCopy};
use rustix::io::Errno;
use tokio::task::JoinHandle;

pub use copy::CopyStats;
pub use export::{ExportOptions, ExportReport, export};

/// Reason tokens of `sandbox_workspace_export_failed` beyond the drain's.
pub mod reason {
    pub use crate::reason::{ARCHIVE_ERROR, CAP_EXCEEDED, CONTAINER_GONE, TIMEOUT};
    /// Writing the host workspace failed.
    pub const HOST_ERROR: &str = "host_error";
    /// The host workspace is gone (or is no longer a directory).
    pub const WORKSPACE_GONE: &str = "workspace_gone";
    /// Only host files changed during the run were kept.
    pub const HOST_CHANGED: &str = "host_changed";
}

/// Why a workspace cannot be copied (or written back), each with a stable
/// [`WorkspaceError::code`].
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// The workspace path is a symlink: never followed.
    #[error(
        "the workspace {path} is a symlink (copy-based workspaces are never reached through one)"
    )]
    Symlink {
        /// The path.
        path: String,
    },
    /// The workspace is not a directory.
    #[error("the workspace {path} is not a directory")]
    NotADirectory {
        /// The path.
        path: String,
    },
    /// Something of the workspace cannot be read.
    #[error("{path} cannot be read: {source}")]
    Unreadable {
        /// What could not be read.
        path: String,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// The workspace does not exist (any more).
    #[error("the workspace {path} does not exist")]
    Gone {
        /// The path.
        path: String,
    },
    /// The workspace holds more entries than a copy records.
    #[error("the workspace holds more than {entries} entries")]
    TooLarge {
        /// The bound.
        entries: u64,
    },
    /// The copy's record could not be written.
    #[error("the workspace copy could not be recorded: {source}")]
    Manifest {
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// The archive stream broke (the sandbox stopped reading).
    #[error("the workspace archive stream failed: {source}")]
    Stream {
        /// Cause.
        #[source]
        source: io::Error,
    },
}

impl WorkspaceError {
    /// Stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Symlink { .. } => "WORKSPACE_IS_A_SYMLINK",
            Self::NotADirectory { .. } => "WORKSPACE_NOT_A_DIRECTORY",
            Self::Unreadable { .. } => "WORKSPACE_UNREADABLE",
            Self::Gone { .. } => "WORKSPACE_GONE",
            Self::TooLarge { .. } => "WORKSPACE_TOO_LARGE",
            Self::Manifest { .. } => "WORKSPACE_RECORD_FAILED",
            Self::Stream { .. } => "WORKSPACE_COPY_STREAM_FAILED",
        }
    }

    /// The driver error a start fails with: the workspace itself is wrong
    /// (the user fixes it: a refusal) or the copy broke (an IO failure).
    pub fn into_driver_error(self) -> DriverError {
        match self {
            Self::Symlink { .. }
            | Self::NotADirectory { .. }
            | Self::Unreadable { .. }
            | Self::Gone { .. }
            | Self::TooLarge { .. } => DriverError::SpecRefused {
                reason: format!("{}: {self}", self.code()),
            },
            Self::Manifest { source } | Self::Stream { source } => DriverError::Io {
                operation: "copy the workspace into the sandbox".to_owned(),
                source,
            },
        }
    }
}

/// Open the workspace root: a real directory, reached without following a
/// symlink at its last component.
pub(crate) fn open_workspace(path: &str) -> Result<OwnedFd, WorkspaceError> {
    let p = Path::new(path);
    if !p.is_absolute() {
        return Err(WorkspaceError::NotADirectory {
            path: path.to_owned(),
        });
    }
    // `O_DIRECTORY | O_NOFOLLOW` on a symlink fails `ENOTDIR` (or `ELOOP`):
    // which of the two it is only says what to tell the user.
    let is_link = || std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink());
    hostfs::open_root(p).map_err(|e| match e {
        Errno::LOOP | Errno::NOTDIR if is_link() => WorkspaceError::Symlink {
            path: path.to_owned(),
        },
        Errno::LOOP | Errno::NOTDIR => WorkspaceError::NotADirectory {
            path: path.to_owned(),
        },
        Errno::NOENT => WorkspaceError::Gone {
            path: path.to_owned(),
        },
        e => WorkspaceError::Unreadable {
            path: path.to_owned(),
            source: io::Error::from(e),
        },
    })
}

/// The exclusions as component lists.
pub(crate) fn exclusion_components(copy: &WorkspaceCopy) -> Vec<Vec<String>> {
    copy.exclude
        .iter()
        .map(|e| {
            e.split('/')
                .filter(|c| !c.is_empty() && *c != ".")
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .filter(|c| !c.is_empty())
        .collect()
}

/// Whether `rel` is, or lies under, one of `exclude`.
pub(crate) fn excluded<S: AsRef<str>>(exclude: &[Vec<String>], rel: &[S]) -> bool {
    exclude
        .iter()
        .any(|x| x.len() <= rel.len() && x.iter().zip(rel).all(|(a, b)| a.as_str() == b.as_ref()))
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclusions_leave_out_what_they_name_and_what_is_under_it() {
        let copy = WorkspaceCopy {
            exclude: vec![".iterion".to_owned(), "a/b".to_owned()],
            ..WorkspaceCopy::default()
        };
        let x = exclusion_components(&copy);
        assert!(excluded(&x, &[".iterion"]));
        assert!(excluded(&x, &[".iterion", "db"]));
        assert!(excluded(&x, &["a", "b", "c"]));
        assert!(!excluded(&x, &["a"]));
        assert!(!excluded(&x, &[".iterionx"]));
    }
}
