//! The host workspace a copy reads and an export writes: opening its root
//! (never through a symlink), the areas of iterion's own that are neither
//! copied nor written, and the errors of both directions. A leaf of
//! `workspace`: the copy and the export name it, it names neither.

use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;

use iterion_core::WorkspaceCopy;
use iterion_core::driver::DriverError;
use rustix::io::Errno;

use super::hostfs;

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
