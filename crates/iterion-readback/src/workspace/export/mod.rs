//! The export at teardown: the sandbox's workspace, read from
//! [`SandboxRun::export`] by the bounded tar reader, judged member by
//! member, and applied to the host workspace by a blocking sink that
//! reaches it only through [`crate::workspace::hostfs`] (no path is followed). The
//! rule is the workspace module's; this module sequences it: the reader
//! (`reader`: archive → ops) and the sink (`sink`: ops → host tree) run
//! on two tasks joined by a small channel.
//!
//! Time is bounded by [`ExportOptions::timeout`]; bytes written by
//! [`ExportOptions::cap`] (a member that would pass it is declined at its
//! header, never read, and what follows it exported piece by piece, as
//! the drain does); memory by the channel between the reader and the sink
//! (a few chunks) and the record's own bound.

mod options;
mod reader;
mod sink;

use std::collections::HashSet;
use std::io::{self};
use std::sync::Arc;

use iterion_core::{DriverName, EventKind, SandboxRun, WorkspaceCopy};
use tokio::sync::mpsc;

use crate::declines::Declines;
use crate::workspace::hostfs::HostTree;
use crate::workspace::manifest::{self};
use crate::workspace::reason;
use crate::workspace::root::{WorkspaceError, exclusion_components, open_workspace};

use self::reader::{ReadError, Reader};
use self::sink::{Op, Sink, SinkReport};

pub use self::options::ExportOptions;

/// What an export did, and the one event to emit for it.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportReport {
    /// Files (and hardlink copies) written.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Symlinks placed.
    pub links: u64,
    /// Host entries deleted because the run deleted them.
    pub deleted: u64,
    /// Host files kept because they changed on the host during the run
    /// (bounded; relative to the workspace).
    pub kept: Vec<String>,
    /// Declined members by name (bounded; relative to the workspace when
    /// known).
    pub declined: Vec<String>,
    /// Every declined member, named or not.
    pub declined_count: u64,
    /// Reason token when not clean.
    pub reason: Option<&'static str>,
    /// What went wrong, in words.
    pub error: Option<String>,
    /// Every archive was read to its end and nothing was left unexported.
    pub complete: bool,
    /// `sandbox_workspace_exported` or `sandbox_workspace_export_failed`.
    pub events: Vec<EventKind>,
}

/// Write the sandbox's workspace back onto `copy.host`, once, at teardown,
/// before cleanup (see the module's rule). Never fails: every problem is
/// part of the report and its event.
pub async fn export(
    run: &dyn SandboxRun,
    copy: &WorkspaceCopy,
    options: ExportOptions,
) -> ExportReport {
    let driver = run.driver();
    let mut declines = Declines::new(options.max_declined_names);
    let host = copy.host.clone();
    let manifest_path = copy.manifest.clone();
    let opened = tokio::task::spawn_blocking(move || {
        let root = open_workspace(&host)?;
        let tree = HostTree::new(root).map_err(|source| WorkspaceError::Unreadable {
            path: host.clone(),
            source,
        })?;
        let manifest = manifest_path.and_then(|p| {
            std::fs::File::open(p)
                .ok()
                .map(|f| manifest::read(io::BufReader::new(f)))
        });
        Ok::<_, WorkspaceError>((tree, manifest))
    })
    .await;
    let (tree, manifest) = match opened {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            return failed_before(driver, reason::WORKSPACE_GONE, format!("{}: {e}", e.code()));
        }
        Err(e) => return failed_before(driver, reason::HOST_ERROR, e.to_string()),
    };
    let manifest = Arc::new(manifest.unwrap_or_default());
    let exclude = Arc::new(exclusion_components(copy));
    let (tx, rx) = mpsc::channel::<Op>(16);
    let sink = {
        let manifest = manifest.clone();
        let exclude = exclude.clone();
        let max_names = options.max_declined_names;
        let max_links = options.max_links;
        tokio::task::spawn_blocking(move || {
            Sink {
                tree,
                manifest,
                exclude,
                seen: HashSet::new(),
                links: Vec::new(),
                report: SinkReport::default(),
                max_names,
                max_links,
            }
            .run(rx)
        })
    };
    let mut reader = Reader {
        run,
        options: &options,
        manifest: &manifest,
        exclude: &exclude,
        tx: &tx,
        declines: &mut declines,
        unknown_declined: false,
        written: 0,
        members: 0,
    };
    let outcome = tokio::time::timeout(options.timeout, reader.read_all()).await;
    let unknown = reader.unknown_declined;
    let (complete, failure) = match outcome {
        Ok(Ok(complete)) => (complete, None),
        Ok(Err(e)) => (false, Some(e)),
        Err(_) => (
            false,
            Some(ReadError {
                token: reason::TIMEOUT,
                message: format!("the export timed out after {}s", options.timeout.as_secs()),
            }),
        ),
    };
    // A file cut short by the time bound ends unwritten (outside a file
    // the sink ignores it).
    let _ = tx.send(Op::End(false)).await;
    // A cut or unfinished archive, or a member of unknown name, and the
    // export cannot tell what the run deleted: it deletes nothing.
    let _ = tx
        .send(Op::Finish {
            delete: complete && !unknown && manifest.complete,
        })
        .await;
    drop(tx);
    let sink = match sink.await {
        Ok(r) => r,
        Err(e) => SinkReport {
            host_error: Some(e.to_string()),
            ..SinkReport::default()
        },
    };
    finish(driver, declines, sink, complete, failure)
}

fn failed_before(driver: DriverName, token: &'static str, message: String) -> ExportReport {
    ExportReport {
        files: 0,
        bytes: 0,
        links: 0,
        deleted: 0,
        kept: Vec::new(),
        declined: Vec::new(),
        declined_count: 0,
        reason: Some(token),
        error: Some(message.clone()),
        complete: false,
        events: vec![EventKind::SandboxWorkspaceExportFailed {
            driver,
            error: message,
            reason: token.to_owned(),
            declined: Vec::new(),
            kept: Vec::new(),
        }],
    }
}

fn finish(
    driver: DriverName,
    mut declines: Declines,
    sink: SinkReport,
    complete: bool,
    failure: Option<ReadError>,
) -> ExportReport {
    for (token, name) in &sink.declined {
        let name = name.clone();
        declines.decline(token, || name);
    }
    declines.count += sink
        .declined_count
        .saturating_sub(sink.declined.len() as u64);
    if let Some(f) = &failure {
        declines.note(f.token);
    }
    if sink.host_error.is_some() {
        declines.note(reason::HOST_ERROR);
    }
    let mut reason = declines.worst;
    if reason.is_none() && !complete {
        reason = Some(reason::ARCHIVE_ERROR);
    }
    if reason.is_none() && sink.kept_count > 0 {
        reason = Some(reason::HOST_CHANGED);
    }
    let summary = format!(
        "{} file(s) and {} link(s) written ({} bytes), {} deleted, {} declined, {} kept as the host changed them",
        sink.files, sink.links, sink.bytes, sink.deleted, declines.count, sink.kept_count
    );
    let error = reason.map(|_| {
        let mut why = Vec::new();
        if let Some(f) = &failure {
            why.push(f.message.clone());
        }
        if let Some(h) = &sink.host_error {
            why.push(format!("writing the host workspace failed: {h}"));
        }
        if !complete && failure.is_none() {
            why.push("part of the workspace was not exported".to_owned());
        }
        if !complete {
            why.push("nothing was deleted".to_owned());
        }
        why.push(summary.clone());
        why.join("; ")
    });
    let event = match (reason, &error) {
        (Some(token), Some(error)) => EventKind::SandboxWorkspaceExportFailed {
            driver,
            error: error.clone(),
            reason: token.to_owned(),
            declined: declines.names.clone(),
            kept: sink.kept.clone(),
        },
        _ => EventKind::SandboxWorkspaceExported {
            driver,
            files: sink.files,
            bytes: sink.bytes,
            deleted: sink.deleted,
            kept: Vec::new(),
        },
    };
    ExportReport {
        files: sink.files,
        bytes: sink.bytes,
        links: sink.links,
        deleted: sink.deleted,
        kept: sink.kept,
        declined: declines.names,
        declined_count: declines.count,
        reason,
        error,
        complete,
        events: vec![event],
    }
}
