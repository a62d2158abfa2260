//! Run attachments (issue 14 item 5), the runtime's half: the check of what
//! `iterion run --attach NAME=PATH` names (one home: the CLI calls it for
//! an early exit 2, the engine again when it stores the bytes, so a file
//! swapped in between is caught), storing them in the run store at launch,
//! and providing them to each boot (fresh or resumed) from the store
//! ([`provide`]).
//!
//! A source is read, never bound: its bytes are copied into the store (so
//! `iterion resume` and a PostgreSQL store see the same content), and the
//! sandbox gets the run's own copy — bound read-only at
//! `/run/iterion/attachments` from a managed per-run directory the sandbox
//! decision plans and judges (`iterion_sandbox::binds`), or copied in
//! through the archive API on a driver without host binds. A source must be
//! a regular file reached without a symlink at its last component (a
//! directory, device, fifo or socket is refused), at most
//! [`ATTACHMENT_CAP`] bytes; together at most [`ATTACHMENTS_TOTAL_CAP`] and
//! [`MAX_ATTACHMENTS`]; each name declared by the workflow, once; of a
//! type its `accept_mime:` accepts (judged by the file name's extension).

mod provide;

use std::collections::BTreeSet;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use iterion_core::attachment::{
    ATTACHMENT_CAP, ATTACHMENTS_TOTAL_CAP, AttachmentFile, AttachmentName, AttachmentPut,
    AttachmentRecord, MAX_ATTACHMENTS,
};
use iterion_core::{RunId, RunStore, StoreError};
use iterion_dsl::ir;

pub(crate) use provide::provide;

/// One `--attach NAME=PATH`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchAttachment {
    /// The declared name.
    pub name: AttachmentName,
    /// The host file.
    pub path: PathBuf,
}

impl LaunchAttachment {
    /// Parse `NAME=PATH` (the path as given; it is checked by
    /// [`check_launch`]).
    pub fn parse(arg: &str) -> Result<Self, AttachmentError> {
        let Some((name, path)) = arg.split_once('=') else {
            return Err(AttachmentError::Syntax {
                arg: arg.to_owned(),
            });
        };
        if path.is_empty() {
            return Err(AttachmentError::Syntax {
                arg: arg.to_owned(),
            });
        }
        let name = AttachmentName::parse(name.trim()).map_err(|_| AttachmentError::BadName {
            name: name.to_owned(),
        })?;
        Ok(Self {
            name,
            path: PathBuf::from(path),
        })
    }
}

/// Why an attachment cannot be taken, each with a stable
/// [`AttachmentError::code`].
#[derive(Debug, thiserror::Error)]
pub enum AttachmentError {
    /// Not `NAME=PATH`.
    #[error("--attach {arg:?}: expected NAME=PATH")]
    Syntax {
        /// The argument.
        arg: String,
    },
    /// The name is not an identifier.
    #[error("--attach {name:?}: an attachment name is an identifier ([A-Za-z_][A-Za-z0-9_]*)")]
    BadName {
        /// The name.
        name: String,
    },
    /// The workflow declares no attachment of that name.
    #[error("--attach {name}: the workflow declares no such attachment (declared: {declared})")]
    Undeclared {
        /// The name.
        name: String,
        /// What it declares, comma-separated (`none`).
        declared: String,
    },
    /// The name is given twice.
    #[error("--attach {name}: given more than once")]
    Duplicate {
        /// The name.
        name: String,
    },
    /// More attachments than a run may have.
    #[error("{count} attachments given; a run takes at most {max}")]
    TooMany {
        /// Given.
        count: usize,
        /// The bound.
        max: usize,
    },
    /// A `required: true` attachment is not given.
    #[error("attachment {name} is required by the workflow: pass --attach {name}=PATH")]
    RequiredMissing {
        /// The name.
        name: String,
    },
    /// The path does not exist.
    #[error("--attach {name}: {path} does not exist")]
    NotFound {
        /// The name.
        name: String,
        /// The path.
        path: String,
    },
    /// The path is a symlink (never followed).
    #[error("--attach {name}: {path} is a symlink; attach the file it points to")]
    Symlink {
        /// The name.
        name: String,
        /// The path.
        path: String,
    },
    /// A directory, device, fifo or socket.
    #[error("--attach {name}: {path} is {kind}, not a regular file")]
    NotAFile {
        /// The name.
        name: String,
        /// The path.
        path: String,
        /// What it is.
        kind: &'static str,
    },
    /// The file cannot be read.
    #[error("--attach {name}: {path} cannot be read: {source}")]
    Unreadable {
        /// The name.
        name: String,
        /// The path.
        path: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Its base name cannot be kept (control characters, too long).
    #[error("--attach {name}: the file name of {path} cannot be kept: {reason}")]
    BadFileName {
        /// The name.
        name: String,
        /// The path.
        path: String,
        /// Why.
        reason: String,
    },
    /// Over the per-attachment cap.
    #[error("--attach {name}: {path} holds {size} bytes, over the {cap}-byte attachment cap")]
    TooLarge {
        /// The name.
        name: String,
        /// The path.
        path: String,
        /// Its size (or what was read before the cap).
        size: u64,
        /// The cap.
        cap: u64,
    },
    /// Its type (by file name) is not one the declaration accepts.
    #[error("--attach {name}: {path} is {mime}, which accept_mime ({accepted}) does not accept")]
    MimeRefused {
        /// The name.
        name: String,
        /// The path.
        path: String,
        /// Its type.
        mime: &'static str,
        /// The declared patterns.
        accepted: String,
    },
    /// Over the per-run cap.
    #[error("the attachments hold {size} bytes together, over the {cap}-byte cap of a run")]
    TotalTooLarge {
        /// Their size.
        size: u64,
        /// The cap.
        cap: u64,
    },
    /// The store refused or failed.
    #[error("storing attachment {name}: {source}")]
    Store {
        /// The name.
        name: String,
        /// Cause.
        #[source]
        source: StoreError,
    },
}

impl AttachmentError {
    /// Stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Syntax { .. } | Self::BadName { .. } => "ATTACHMENT_BAD_ARGUMENT",
            Self::Undeclared { .. } => "ATTACHMENT_UNDECLARED",
            Self::Duplicate { .. } => "ATTACHMENT_DUPLICATE",
            Self::TooMany { .. } => "ATTACHMENT_TOO_MANY",
            Self::RequiredMissing { .. } => "ATTACHMENT_REQUIRED",
            Self::NotFound { .. } => "ATTACHMENT_NOT_FOUND",
            Self::Symlink { .. } => "ATTACHMENT_IS_A_SYMLINK",
            Self::NotAFile { .. } => "ATTACHMENT_NOT_A_FILE",
            Self::Unreadable { .. } => "ATTACHMENT_UNREADABLE",
            Self::BadFileName { .. } => "ATTACHMENT_BAD_FILE_NAME",
            Self::TooLarge { .. } => "ATTACHMENT_TOO_LARGE",
            Self::MimeRefused { .. } => "ATTACHMENT_TYPE_REFUSED",
            Self::TotalTooLarge { .. } => "ATTACHMENTS_TOO_LARGE",
            Self::Store { source, .. } => source.code(),
        }
    }

    /// Whether the user's input is at fault (the CLI's exit 2), rather than
    /// the store.
    pub fn is_user_input(&self) -> bool {
        !matches!(self, Self::Store { .. })
    }
}

/// An opened, checked source.
#[derive(Debug)]
pub struct OpenedSource {
    /// The file, open for reading.
    pub file: std::fs::File,
    /// The name it keeps.
    pub file_name: AttachmentFile,
    /// Its size when opened.
    pub size: u64,
}

fn kind_of(t: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a fifo"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() || t.is_char_device() {
        "a device"
    } else {
        "not a regular file"
    }
}

/// Open one source: it exists, its last component is not a symlink, it is
/// a regular file (judged on the opened descriptor, so a swap between the
/// look and the open cannot hand over a fifo or a directory), its base name
/// can be kept, and it is under [`ATTACHMENT_CAP`].
pub fn open_source(name: &AttachmentName, path: &Path) -> Result<OpenedSource, AttachmentError> {
    let shown = path.display().to_string();
    let name_s = name.to_string();
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(AttachmentError::NotFound {
                name: name_s,
                path: shown,
            });
        }
        Err(source) => {
            return Err(AttachmentError::Unreadable {
                name: name_s,
                path: shown,
                source,
            });
        }
    };
    if meta.file_type().is_symlink() {
        return Err(AttachmentError::Symlink {
            name: name_s,
            path: shown,
        });
    }
    if !meta.is_file() {
        return Err(AttachmentError::NotAFile {
            name: name_s,
            path: shown,
            kind: kind_of(meta.file_type()),
        });
    }
    // O_NOFOLLOW: a symlink swapped in fails; O_NONBLOCK: a fifo swapped in
    // does not block the open (it is refused below).
    let flags = (rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits() as i32;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .map_err(|source| AttachmentError::Unreadable {
            name: name_s.clone(),
            path: shown.clone(),
            source,
        })?;
    let meta = file
        .metadata()
        .map_err(|source| AttachmentError::Unreadable {
            name: name_s.clone(),
            path: shown.clone(),
            source,
        })?;
    if !meta.is_file() {
        return Err(AttachmentError::NotAFile {
            name: name_s,
            path: shown,
            kind: kind_of(meta.file_type()),
        });
    }
    if meta.len() > ATTACHMENT_CAP {
        return Err(AttachmentError::TooLarge {
            name: name_s,
            path: shown,
            size: meta.len(),
            cap: ATTACHMENT_CAP,
        });
    }
    let base = path
        .file_name()
        .map(|b| b.to_string_lossy().into_owned())
        .unwrap_or_default();
    let file_name = AttachmentFile::parse(&base).map_err(|e| AttachmentError::BadFileName {
        name: name_s,
        path: shown,
        reason: e.to_string(),
    })?;
    Ok(OpenedSource {
        file,
        file_name,
        size: meta.len(),
    })
}

/// Check a launch's attachments against the workflow: every name declared
/// and given once, every `required: true` one given, at most
/// [`MAX_ATTACHMENTS`], each source openable ([`open_source`]), together
/// under [`ATTACHMENTS_TOTAL_CAP`].
pub fn check_launch(
    workflow: &ir::Workflow,
    given: &[LaunchAttachment],
) -> Result<(), AttachmentError> {
    let mut seen = BTreeSet::new();
    for a in given {
        if !workflow.attachments.contains_key(a.name.as_str()) {
            let declared: Vec<&str> = workflow.attachments.keys().map(String::as_str).collect();
            return Err(AttachmentError::Undeclared {
                name: a.name.to_string(),
                declared: if declared.is_empty() {
                    "none".to_owned()
                } else {
                    declared.join(", ")
                },
            });
        }
        if !seen.insert(a.name.as_str()) {
            return Err(AttachmentError::Duplicate {
                name: a.name.to_string(),
            });
        }
    }
    if given.len() > MAX_ATTACHMENTS {
        return Err(AttachmentError::TooMany {
            count: given.len(),
            max: MAX_ATTACHMENTS,
        });
    }
    for (name, decl) in &workflow.attachments {
        if decl.required && !seen.contains(name.as_str()) {
            return Err(AttachmentError::RequiredMissing { name: name.clone() });
        }
    }
    let mut total = 0u64;
    for a in given {
        let opened = open_source(&a.name, &a.path)?;
        let accepted = workflow
            .attachments
            .get(a.name.as_str())
            .map(|d| d.accept_mime.as_slice())
            .unwrap_or_default();
        let mime = provide::mime_of(opened.file_name.as_str());
        if !accepted.is_empty() && !accepted.iter().any(|p| mime_matches(p, mime)) {
            return Err(AttachmentError::MimeRefused {
                name: a.name.to_string(),
                path: a.path.display().to_string(),
                mime,
                accepted: accepted.join(", "),
            });
        }
        total += opened.size;
    }
    if total > ATTACHMENTS_TOTAL_CAP {
        return Err(AttachmentError::TotalTooLarge {
            size: total,
            cap: ATTACHMENTS_TOTAL_CAP,
        });
    }
    Ok(())
}

/// Whether `mime` matches an `accept_mime` pattern (`type/subtype`, with
/// `*` for either part, case-insensitive).
fn mime_matches(pattern: &str, mime: &str) -> bool {
    let (Some((pt, ps)), Some((mt, ms))) = (pattern.split_once('/'), mime.split_once('/')) else {
        return false;
    };
    let part = |p: &str, m: &str| p == "*" || p.eq_ignore_ascii_case(m);
    part(pt, mt) && part(ps, ms)
}

/// Store a launch's attachments in the run store (checked again: the
/// source is re-opened and metered while it streams).
pub(crate) async fn store_launch(
    store: &dyn RunStore,
    run: &RunId,
    workflow: &ir::Workflow,
    given: &[LaunchAttachment],
) -> Result<Vec<AttachmentRecord>, AttachmentError> {
    check_launch(workflow, given)?;
    let mut out = Vec::new();
    for a in given {
        let opened = open_source(&a.name, &a.path)?;
        let content: iterion_core::ByteStream = Box::pin(tokio_util::io::ReaderStream::new(
            tokio::fs::File::from_std(opened.file),
        ));
        let put = store
            .put_attachment(run, &a.name, &opened.file_name, content, ATTACHMENT_CAP)
            .await
            .map_err(|source| AttachmentError::Store {
                name: a.name.to_string(),
                source,
            })?;
        match put {
            AttachmentPut::Stored(rec) => out.push(rec),
            // It grew past the cap after it was checked.
            AttachmentPut::CapExceeded { read, cap } => {
                return Err(AttachmentError::TooLarge {
                    name: a.name.to_string(),
                    path: a.path.display().to_string(),
                    size: read,
                    cap,
                });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
