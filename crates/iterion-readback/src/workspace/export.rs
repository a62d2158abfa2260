//! The export at teardown: the sandbox's workspace, read from
//! [`SandboxRun::export`] by the bounded tar reader, judged member by
//! member, and applied to the host workspace by a blocking sink that
//! reaches it only through [`super::hostfs`] (no path is followed). The
//! rule is the module's (`super`); this file sequences it.
//!
//! Time is bounded by [`ExportOptions::timeout`]; bytes written by
//! [`ExportOptions::cap`] (a member that would pass it is declined at its
//! header, never read, and what follows it exported piece by piece, as
//! the drain does); memory by the channel between the reader and the sink
//! (a few chunks) and the record's own bound.

use std::collections::HashSet;
use std::io::{self, Write};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use iterion_core::{ByteSize, EventKind, SandboxRun, WorkspaceCopy};
use tokio::sync::mpsc;

use super::hostfs::{self, HostStat, HostTree, Kind, Reach};
use super::manifest::{self, Manifest};
use super::{excluded, exclusion_components, open_workspace, reason};
use crate::name::{self, NameFault};
use crate::tar::{Member, MemberKind, MetaLimits, TarStream};
use crate::walk::{Export, Walk, container_path_of, is_not_found, plan_rest};
use crate::{Declines, ReadbackError};

/// Variable setting [`ExportOptions::cap`] (a size: `8GiB`, `512MiB`…).
pub const EXPORT_CAP_ENV: &str = "ITERION_SANDBOX_WORKSPACE_EXPORT_CAP";

/// Per-call knobs of [`export`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportOptions {
    /// Bound on the whole export.
    pub timeout: Duration,
    /// Bytes written onto the host at most; a member past it is declined.
    pub cap: u64,
    /// Members read at most; the rest are declined as a count.
    pub max_members: u64,
    /// Deepest path kept.
    pub max_depth: usize,
    /// Declined and kept names reported; the rest are counted.
    pub max_declined_names: usize,
    /// Longest GNU long name (and link target) read.
    pub max_long_name: u64,
    /// Largest PAX header read.
    pub max_pax_header: u64,
    /// Symlinks placed at most.
    pub max_links: usize,
}

impl Default for ExportOptions {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(1800),
            cap: 8 << 30,
            max_members: 2_000_000,
            max_depth: 256,
            max_declined_names: 1_000,
            max_long_name: 64 * 1024,
            max_pax_header: 1024 * 1024,
            max_links: 100_000,
        }
    }
}

impl ExportOptions {
    /// The defaults with the cap `env` sets ([`EXPORT_CAP_ENV`]); a bad
    /// value keeps the default.
    pub fn from_env(env: &std::collections::BTreeMap<String, String>) -> Self {
        let cap = env
            .get(EXPORT_CAP_ENV)
            .and_then(|v| iterion_core::parse_size(v.trim()).ok())
            .map(|ByteSize(n)| n);
        Self {
            cap: cap.unwrap_or(Self::default().cap),
            ..Self::default()
        }
    }
}

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

/// What the reader hands the sink, in archive order.
enum Op {
    /// Seen and left as the host has it (untouched by the run, declined).
    Seen(Vec<String>),
    Dir(Vec<String>),
    File {
        rel: Vec<String>,
        perm: u32,
        mtime: u64,
    },
    Chunk(Bytes),
    /// End of the current file's data; `false` when the archive was cut.
    End(bool),
    Symlink {
        rel: Vec<String>,
        target: String,
    },
    /// A hardlink, written as a copy of the workspace file it names.
    Copy {
        rel: Vec<String>,
        from: Vec<String>,
        perm: u32,
        mtime: u64,
    },
    /// No more members; deletions run when the export was complete and
    /// every declined member had a known path.
    Finish {
        delete: bool,
    },
}

/// What the sink did.
#[derive(Debug, Default)]
struct SinkReport {
    files: u64,
    bytes: u64,
    links: u64,
    deleted: u64,
    kept: Vec<String>,
    kept_count: u64,
    declined: Vec<(&'static str, String)>,
    declined_count: u64,
    host_error: Option<String>,
}

/// Write the sandbox's workspace back onto `copy.host`, once, at teardown,
/// before cleanup (see the module's rule). Never fails: every problem is
/// part of the report and its event.
pub async fn export(
    run: &dyn SandboxRun,
    copy: &WorkspaceCopy,
    options: ExportOptions,
) -> ExportReport {
    let driver = run.driver().as_str().to_owned();
    let mut declines = Declines::new(options.max_declined_names);
    let host = copy.host.clone();
    let manifest_path = copy.manifest.clone();
    let opened = tokio::task::spawn_blocking(move || {
        let root = open_workspace(&host)?;
        let tree = HostTree::new(root).map_err(|source| super::WorkspaceError::Unreadable {
            path: host.clone(),
            source,
        })?;
        let manifest = manifest_path.and_then(|p| {
            std::fs::File::open(p)
                .ok()
                .map(|f| manifest::read(io::BufReader::new(f)))
        });
        Ok::<_, super::WorkspaceError>((tree, manifest))
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

fn failed_before(driver: String, token: &'static str, message: String) -> ExportReport {
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
    driver: String,
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

/// Why the reading stopped.
struct ReadError {
    token: &'static str,
    message: String,
}

impl From<ReadbackError> for ReadError {
    fn from(e: ReadbackError) -> Self {
        Self {
            token: e.reason(),
            message: e.to_string(),
        }
    }
}

struct Reader<'a> {
    run: &'a dyn SandboxRun,
    options: &'a ExportOptions,
    manifest: &'a Manifest,
    exclude: &'a [Vec<String>],
    tx: &'a mpsc::Sender<Op>,
    declines: &'a mut Declines,
    /// A member was declined whose path is not known (so the export cannot
    /// tell it from an entry the run deleted).
    unknown_declined: bool,
    /// Bytes handed to the sink (or in flight): the cap's meter.
    written: u64,
    members: u64,
}

/// How one piece's archive ended.
enum PieceEnd {
    Finished,
    /// At an oversized member (its path below the workspace, when known).
    Aborted(Option<Vec<String>>),
}

impl Reader<'_> {
    /// Every piece of the workspace; `Ok(true)` when nothing was left out.
    async fn read_all(&mut self) -> Result<bool, ReadError> {
        let base = self.run.workdir().trim_end_matches('/').to_owned();
        let top = base.rsplit('/').next().unwrap_or_default().to_owned();
        let mut walk = Walk::new();
        let mut queue = std::collections::VecDeque::from([Export { rel: Vec::new() }]);
        let mut complete = true;
        while let Some(piece) = queue.pop_front() {
            if walk.exports >= crate::walk::MAX_EXPORTS_PER_PATH {
                let left = queue.len() as u64 + 1;
                self.declines.count += left - 1;
                self.declines.decline(reason::CAP_EXCEEDED, || {
                    format!("… ({left} entries not exported: too many pieces)")
                });
                self.unknown_declined = true;
                complete = false;
                break;
            }
            walk.start_export();
            let path = container_path_of(&base, &piece.rel);
            let stream = match self.run.export(&path).await {
                Ok(s) => s,
                Err(e) if !piece.rel.is_empty() && is_not_found(&e) => continue,
                Err(source) => return Err(ReadbackError::Export { source }.into()),
            };
            let mut tar = TarStream::new(
                stream,
                MetaLimits {
                    long_name: self.options.max_long_name,
                    pax: self.options.max_pax_header,
                },
            );
            let end = self.read_piece(&mut tar, &top, &piece, &mut walk).await;
            drop(tar);
            if let PieceEnd::Aborted(at) = end? {
                let before = self.declines.count;
                plan_rest(
                    self.run,
                    &base,
                    &piece,
                    at.as_deref(),
                    &mut walk,
                    &mut queue,
                    self.declines,
                )
                .await;
                if self.declines.count > before {
                    // A directory that could not be listed: its rest is
                    // declined by name, and unknown to the deletions.
                    self.unknown_declined = true;
                    complete = false;
                }
            }
        }
        Ok(complete)
    }

    fn decline(
        &mut self,
        token: &'static str,
        rel: Option<&[String]>,
        shown: impl FnOnce() -> String,
    ) {
        if rel.is_none() {
            self.unknown_declined = true;
        }
        self.declines.decline(token, || name::escaped(&shown()));
    }

    async fn send(&self, op: Op) -> Result<(), ReadError> {
        self.tx.send(op).await.map_err(|_| ReadError {
            token: reason::HOST_ERROR,
            message: "the host sink stopped".to_owned(),
        })
    }

    async fn read_piece(
        &mut self,
        tar: &mut TarStream,
        top: &str,
        piece: &Export,
        walk: &mut Walk,
    ) -> Result<PieceEnd, ReadError> {
        let max_depth = self.options.max_depth;
        while let Some(mut member) = tar.next_member().await? {
            self.members += 1;
            if !piece.rel.is_empty() {
                match name::graft(&member.name, top, &piece.rel) {
                    Some(full) => member.name = full,
                    None => {
                        self.decline(reason::ARCHIVE_ERROR, None, || {
                            String::from_utf8_lossy(&member.name).into_owned()
                        });
                        continue;
                    }
                }
            }
            let rel: Option<Vec<String>> = match name::components(&member, top, max_depth) {
                Ok(r) => Some(r.iter().map(|c| (*c).to_owned()).collect()),
                Err(fault) => {
                    let why = match fault {
                        NameFault::Decline(why) => why,
                        NameFault::Outside => "outside the workspace",
                        NameFault::TooDeep => "nested deeper than the bound",
                    };
                    let shown = format!("{} ({why})", String::from_utf8_lossy(&member.name));
                    // A name that did not parse still counts against the
                    // bytes read past (below).
                    if member.size > self.options.cap.saturating_sub(walk.skipped) {
                        self.decline(reason::CAP_EXCEEDED, None, || shown);
                        return Ok(PieceEnd::Aborted(None));
                    }
                    walk.skipped += member.size;
                    self.decline(reason::ARCHIVE_ERROR, None, || shown);
                    continue;
                }
            };
            let Some(rel) = rel else { continue };
            if walk.visit(&rel) {
                walk.skipped += member.size;
                continue;
            }
            if self.members > self.options.max_members {
                self.decline(reason::CAP_EXCEEDED, None, || {
                    format!("{} (past the member limit)", rel.join("/"))
                });
                walk.skipped += member.size;
                continue;
            }
            if rel.is_empty() {
                continue; // the workspace root itself
            }
            let shown = || rel.join("/");
            if excluded(self.exclude, &rel) {
                self.decline(reason::ARCHIVE_ERROR, Some(&rel), || {
                    format!("{} (iterion's own area: never written)", shown())
                });
                walk.skipped += member.size;
                continue;
            }
            let key = rel.join("/").into_bytes();
            let copied = self.manifest.entries.get(&key);
            let link = member.link.as_deref();
            match member.kind {
                MemberKind::Dir => self.send(Op::Dir(rel)).await?,
                MemberKind::File => {
                    if copied.is_some_and(|m| {
                        m.matches_member(Kind::File, member.size, member.mode, member.mtime, None)
                    }) {
                        walk.skipped += member.size;
                        self.send(Op::Seen(rel)).await?;
                        continue;
                    }
                    if member.size > self.options.cap.saturating_sub(self.written) {
                        self.decline(reason::CAP_EXCEEDED, Some(&rel), || {
                            format!("{} ({} bytes: over the export cap)", shown(), member.size)
                        });
                        self.send(Op::Seen(rel.clone())).await?;
                        return Ok(PieceEnd::Aborted(Some(rel)));
                    }
                    self.written += member.size;
                    self.send(Op::File {
                        rel,
                        perm: member.mode,
                        mtime: member.mtime,
                    })
                    .await?;
                    loop {
                        match tar.member_chunk().await {
                            Ok(Some(chunk)) => self.send(Op::Chunk(chunk)).await?,
                            Ok(None) => break,
                            Err(e) => {
                                // Never written as a shorter file.
                                let _ = self.send(Op::End(false)).await;
                                return Err(e.into());
                            }
                        }
                    }
                    self.send(Op::End(true)).await?;
                }
                MemberKind::Symlink => {
                    let target = link.and_then(|l| std::str::from_utf8(l).ok());
                    if copied
                        .is_some_and(|m| m.matches_member(Kind::Symlink, 0, 0, member.mtime, link))
                    {
                        self.send(Op::Seen(rel)).await?;
                        continue;
                    }
                    match target.map(|t| (t, link_inside(&rel, t))) {
                        Some((t, Ok(()))) => {
                            self.send(Op::Symlink {
                                rel,
                                target: t.to_owned(),
                            })
                            .await?
                        }
                        Some((t, Err(why))) => {
                            self.decline(reason::ARCHIVE_ERROR, Some(&rel), || {
                                format!("{} -> {t} ({why})", shown())
                            });
                            self.send(Op::Seen(rel)).await?;
                        }
                        None => {
                            self.decline(reason::ARCHIVE_ERROR, Some(&rel), || {
                                format!("{} (symlink target unreadable)", shown())
                            });
                            self.send(Op::Seen(rel)).await?;
                        }
                    }
                }
                MemberKind::Hardlink => {
                    let from = link.and_then(|l| {
                        let m = Member {
                            name: l.to_vec(),
                            name_truncated: false,
                            kind: MemberKind::File,
                            size: 0,
                            claimed_size: 0,
                            mode: 0,
                            mtime: 0,
                            link: None,
                        };
                        name::components(&m, top, max_depth)
                            .ok()
                            .map(|c| c.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
                    });
                    match from.filter(|f| !f.is_empty() && !excluded(self.exclude, f)) {
                        Some(from) => {
                            self.send(Op::Copy {
                                rel,
                                from,
                                perm: member.mode,
                                mtime: member.mtime,
                            })
                            .await?
                        }
                        None => {
                            self.decline(reason::ARCHIVE_ERROR, Some(&rel), || {
                                format!("{} (hardlink to something outside the workspace)", shown())
                            });
                            self.send(Op::Seen(rel)).await?;
                        }
                    }
                }
                other => {
                    let token =
                        if member.claimed_size > self.options.cap.saturating_sub(self.written) {
                            reason::CAP_EXCEEDED
                        } else {
                            reason::ARCHIVE_ERROR
                        };
                    if member.size > self.options.cap.saturating_sub(walk.skipped) {
                        self.decline(reason::CAP_EXCEEDED, Some(&rel), || {
                            format!("{} ({})", shown(), other.describe())
                        });
                        self.send(Op::Seen(rel.clone())).await?;
                        return Ok(PieceEnd::Aborted(Some(rel)));
                    }
                    walk.skipped += member.size;
                    self.decline(token, Some(&rel), || {
                        format!("{} ({})", shown(), other.describe())
                    });
                    self.send(Op::Seen(rel)).await?;
                }
            }
        }
        Ok(PieceEnd::Finished)
    }
}

/// A symlink's target may be written only when it is relative and, read
/// from the link's own directory, stays inside the workspace. The sink
/// checks again against the tree it lands in (no symlink on the way).
fn link_inside(rel: &[String], target: &str) -> Result<(), &'static str> {
    if target.is_empty() || target.contains('\0') {
        return Err("empty target");
    }
    if target.starts_with('/') {
        return Err("absolute target: points outside the workspace");
    }
    resolve(rel, target)
        .map(|_| ())
        .ok_or("points outside the workspace")
}

/// The components a relative link target names, from its link's directory,
/// `..` applied lexically; `None` when it climbs above the root.
fn resolve(rel: &[String], target: &str) -> Option<Vec<String>> {
    let mut out: Vec<String> = rel[..rel.len().saturating_sub(1)].to_vec();
    for comp in target.split('/') {
        match comp {
            "" | "." => {}
            ".." => {
                out.pop()?;
            }
            c => out.push(c.to_owned()),
        }
    }
    Some(out)
}

struct Sink {
    tree: HostTree,
    manifest: Arc<Manifest>,
    exclude: Arc<Vec<Vec<String>>>,
    seen: HashSet<Vec<u8>>,
    links: Vec<(Vec<String>, String)>,
    report: SinkReport,
    max_names: usize,
    max_links: usize,
}

/// Whether a host entry may be replaced or written: it is absent, or still
/// exactly what was copied in (or there is no record to ask).
enum Verdict {
    Write,
    /// Changed on the host during the run: kept.
    Keep,
    /// Not reachable without following a symlink, or not replaceable.
    Decline(&'static str),
}

impl Sink {
    fn run(mut self, mut rx: mpsc::Receiver<Op>) -> SinkReport {
        while let Some(op) = rx.blocking_recv() {
            match op {
                Op::Seen(rel) => {
                    self.seen.insert(rel.join("/").into_bytes());
                }
                Op::Dir(rel) => self.dir(&rel),
                Op::File { rel, perm, mtime } => {
                    let mut data = |w: &mut dyn Write| -> io::Result<()> {
                        loop {
                            match rx.blocking_recv() {
                                Some(Op::Chunk(b)) => w.write_all(&b)?,
                                Some(Op::End(true)) => return Ok(()),
                                _ => {
                                    return Err(io::Error::new(
                                        io::ErrorKind::UnexpectedEof,
                                        "the archive ended inside the file",
                                    ));
                                }
                            }
                        }
                    };
                    if !self.write(&rel, perm, mtime, &mut data) {
                        // Not written: what is left of its data is read past.
                        while let Some(Op::Chunk(_)) = rx.blocking_recv() {}
                    }
                }
                Op::Chunk(_) | Op::End(_) => {}
                Op::Symlink { rel, target } => {
                    self.seen.insert(rel.join("/").into_bytes());
                    if self.links.len() < self.max_links {
                        self.links.push((rel, target));
                    } else {
                        self.decline(
                            reason::CAP_EXCEEDED,
                            format!("{} (past the symlink limit)", rel.join("/")),
                        );
                    }
                }
                Op::Copy {
                    rel,
                    from,
                    perm,
                    mtime,
                } => self.copy(&rel, &from, perm, mtime),
                Op::Finish { delete } => {
                    self.place_links();
                    if delete {
                        self.delete();
                    }
                    break;
                }
            }
        }
        self.report
    }

    fn decline(&mut self, token: &'static str, name: String) {
        self.report.declined_count += 1;
        if self.report.declined.len() < self.max_names {
            self.report.declined.push((token, name::escaped(&name)));
        }
    }

    fn keep(&mut self, rel: &[String]) {
        self.report.kept_count += 1;
        if self.report.kept.len() < self.max_names {
            self.report.kept.push(name::escaped(&rel.join("/")));
        }
    }

    fn host_error(&mut self, rel: &[String], e: &io::Error) {
        self.decline(reason::HOST_ERROR, format!("{} ({e})", rel.join("/")));
        if self.report.host_error.is_none() {
            self.report.host_error = Some(format!("{}: {e}", rel.join("/")));
        }
    }

    fn reach_fault(&mut self, rel: &[String], reach: Reach) {
        match reach {
            Reach::NotADirectory(at) => self.decline(
                reason::ARCHIVE_ERROR,
                format!(
                    "{} (its directory {at} is a symlink or a file on the host: never followed)",
                    rel.join("/")
                ),
            ),
            Reach::Missing => self.decline(
                reason::ARCHIVE_ERROR,
                format!("{} (its directory is missing)", rel.join("/")),
            ),
            Reach::Io(e) => self.host_error(rel, &e),
        }
    }

    /// May `rel`'s host entry be written? (`now`: what the host holds.)
    fn verdict(&self, rel: &[String], now: Option<HostStat>) -> Verdict {
        let Some(now) = now else {
            return Verdict::Write;
        };
        if now.kind == Kind::Dir {
            return Verdict::Decline("a directory on the host");
        }
        if !self.manifest.complete && self.manifest.order.is_empty() {
            return Verdict::Write; // no record: add and overwrite
        }
        match self.manifest.entries.get(rel.join("/").as_bytes()) {
            Some(m) if now.unchanged_since(&m.stat) => Verdict::Write,
            _ => Verdict::Keep,
        }
    }

    fn dir(&mut self, rel: &[String]) {
        self.seen.insert(rel.join("/").into_bytes());
        let comps: Vec<&str> = rel.iter().map(String::as_str).collect();
        let (name, parent) = match comps.split_last() {
            Some(v) => v,
            None => return,
        };
        // A file or link the run turned into a directory replaces the host
        // entry only when that is still what was copied in.
        let blocked = match self.tree.dir(parent, true) {
            Ok(dir) => hostfs::stat_at(dir, std::ffi::OsStr::new(name)),
            Err(reach) => return self.reach_fault(rel, reach),
        };
        match blocked {
            Ok(Some(st)) if st.kind != Kind::Dir => match self.verdict(rel, Some(st)) {
                Verdict::Write => {
                    let removed = match self.tree.dir(parent, false) {
                        Ok(dir) => rustix::fs::unlinkat(dir, *name, rustix::fs::AtFlags::empty())
                            .map_err(hostfs::errno_io),
                        Err(reach) => return self.reach_fault(rel, reach),
                    };
                    if let Err(e) = removed {
                        return self.host_error(rel, &e);
                    }
                }
                Verdict::Keep => return self.keep(rel),
                Verdict::Decline(why) => {
                    return self
                        .decline(reason::ARCHIVE_ERROR, format!("{} ({why})", rel.join("/")));
                }
            },
            Ok(_) => {}
            Err(e) => return self.host_error(rel, &e),
        }
        if let Err(reach) = self.tree.dir(&comps, true) {
            self.reach_fault(rel, reach);
        }
    }

    /// Write one file; `false` when its data was not consumed.
    fn write(
        &mut self,
        rel: &[String],
        perm: u32,
        mtime: u64,
        data: &mut dyn FnMut(&mut dyn Write) -> io::Result<()>,
    ) -> bool {
        self.seen.insert(rel.join("/").into_bytes());
        let comps: Vec<&str> = rel.iter().map(String::as_str).collect();
        let Some((name, parent)) = comps.split_last() else {
            return false;
        };
        let owner = self.tree.owner();
        let dir = match self.tree.dir(parent, true) {
            Ok(d) => d,
            Err(reach) => {
                self.reach_fault(rel, reach);
                return false;
            }
        };
        let now = match hostfs::stat_at(dir, std::ffi::OsStr::new(name)) {
            Ok(n) => n,
            Err(e) => {
                self.host_error(rel, &e);
                return false;
            }
        };
        match self.verdict(rel, now) {
            Verdict::Write => {}
            Verdict::Keep => {
                self.keep(rel);
                return false;
            }
            Verdict::Decline(why) => {
                self.decline(reason::ARCHIVE_ERROR, format!("{} ({why})", rel.join("/")));
                return false;
            }
        }
        let dir = match self.tree.dir(parent, false) {
            Ok(d) => d,
            Err(reach) => {
                self.reach_fault(rel, reach);
                return false;
            }
        };
        let mut size = 0u64;
        let mut counted = |w: &mut dyn Write| {
            let mut meter = Meter {
                inner: w,
                n: &mut size,
            };
            data(&mut meter)
        };
        match HostTree::write_file(dir, name, perm, mtime, owner, &mut counted) {
            Ok(()) => {
                self.report.files += 1;
                self.report.bytes += size;
            }
            // A cut archive: the reader reports it; nothing was renamed.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {}
            Err(e) => self.host_error(rel, &e),
        }
        true
    }

    fn copy(&mut self, rel: &[String], from: &[String], perm: u32, mtime: u64) {
        let from_comps: Vec<&str> = from.iter().map(String::as_str).collect();
        let mut source = match self.tree.open_file(&from_comps) {
            Ok(f) => f,
            Err(_) => {
                self.seen.insert(rel.join("/").into_bytes());
                return self.decline(
                    reason::ARCHIVE_ERROR,
                    format!(
                        "{} (hardlink to {}, not a regular file of the workspace)",
                        rel.join("/"),
                        from.join("/")
                    ),
                );
            }
        };
        let mut data = |w: &mut dyn Write| io::copy(&mut source, w).map(|_| ());
        self.write(rel, perm, mtime, &mut data);
    }

    /// Place the symlinks the run created or changed, each only when, in
    /// the tree it lands in, its target stays inside the workspace without
    /// passing through another symlink (the host's, or one placed here).
    fn place_links(&mut self) {
        let staged: HashSet<Vec<u8>> = self
            .links
            .iter()
            .map(|(r, _)| r.join("/").into_bytes())
            .collect();
        for (rel, target) in std::mem::take(&mut self.links) {
            if let Err(why) = self.link_path_clean(&rel, &target, &staged) {
                self.decline(
                    reason::ARCHIVE_ERROR,
                    format!("{} -> {target} ({why})", rel.join("/")),
                );
                continue;
            }
            let comps: Vec<&str> = rel.iter().map(String::as_str).collect();
            let Some((name, parent)) = comps.split_last() else {
                continue;
            };
            let owner = self.tree.owner();
            let now = match self.tree.dir(parent, true) {
                Ok(dir) => hostfs::stat_at(dir, std::ffi::OsStr::new(name)),
                Err(reach) => {
                    self.reach_fault(&rel, reach);
                    continue;
                }
            };
            let now = match now {
                Ok(n) => n,
                Err(e) => {
                    self.host_error(&rel, &e);
                    continue;
                }
            };
            match self.verdict(&rel, now) {
                Verdict::Write => {}
                Verdict::Keep => {
                    self.keep(&rel);
                    continue;
                }
                Verdict::Decline(why) => {
                    self.decline(reason::ARCHIVE_ERROR, format!("{} ({why})", rel.join("/")));
                    continue;
                }
            }
            let placed = match self.tree.dir(parent, false) {
                Ok(dir) => HostTree::place_symlink(dir, name, &target, owner),
                Err(reach) => {
                    self.reach_fault(&rel, reach);
                    continue;
                }
            };
            match placed {
                Ok(()) => self.report.links += 1,
                Err(e) => self.host_error(&rel, &e),
            }
        }
    }

    /// Resolve `target` from `rel`'s directory the way the kernel would,
    /// one component at a time, without following anything: a component
    /// that is a symlink (the host's, or one staged here) is a refusal —
    /// checking `..` only lexically would let `s/l1 -> ..` plus
    /// `l2 -> s/l1/..` climb out through `l1`.
    fn link_path_clean(
        &mut self,
        rel: &[String],
        target: &str,
        staged: &HashSet<Vec<u8>>,
    ) -> Result<(), &'static str> {
        let mut walked: Vec<String> = rel[..rel.len().saturating_sub(1)].to_vec();
        for comp in target.split('/') {
            match comp {
                "" | "." => continue,
                ".." => {
                    walked.pop().ok_or("points outside the workspace")?;
                    continue;
                }
                _ => {}
            }
            let mut path = walked.join("/");
            if !path.is_empty() {
                path.push('/');
            }
            path.push_str(comp);
            if staged.contains(path.as_bytes()) {
                return Err("through another symlink");
            }
            let parent: Vec<&str> = walked.iter().map(String::as_str).collect();
            let at = match self.tree.dir(&parent, false) {
                Ok(dir) => hostfs::stat_at(dir, std::ffi::OsStr::new(comp)),
                // Nothing there (yet): the rest is checked lexically.
                Err(Reach::Missing) => Ok(None),
                Err(Reach::NotADirectory(_)) => return Err("through another symlink"),
                Err(Reach::Io(_)) => return Err("its target cannot be checked"),
            };
            match at {
                Ok(Some(st)) if st.kind == Kind::Symlink => return Err("through another symlink"),
                Ok(_) => walked.push(comp.to_owned()),
                Err(_) => return Err("its target cannot be checked"),
            }
        }
        if excluded(&self.exclude, &walked) {
            return Err("points into iterion's own area");
        }
        Ok(())
    }

    /// Delete what the run deleted: entries copied in, not in the export,
    /// still exactly as copied on the host; children before parents, a
    /// directory only once empty.
    fn delete(&mut self) {
        let manifest = self.manifest.clone();
        for path in manifest.order.iter().rev() {
            if self.seen.contains(path) {
                continue;
            }
            let Ok(text) = std::str::from_utf8(path) else {
                continue; // never exported by name: never judged deleted
            };
            let rel: Vec<&str> = text.split('/').collect();
            if excluded(&self.exclude, &rel) {
                continue;
            }
            let Some((name, parent)) = rel.split_last() else {
                continue;
            };
            let Some(entry) = manifest.entries.get(path) else {
                continue;
            };
            let dir = match self.tree.dir(parent, false) {
                Ok(d) => d,
                Err(_) => continue,
            };
            let now = match hostfs::stat_at(dir, std::ffi::OsStr::new(name)) {
                Ok(Some(n)) => n,
                _ => continue,
            };
            if entry.stat.kind == Kind::Dir {
                if now.kind == Kind::Dir
                    && rustix::fs::unlinkat(dir, *name, rustix::fs::AtFlags::REMOVEDIR).is_ok()
                {
                    self.report.deleted += 1;
                }
                continue;
            }
            if !now.unchanged_since(&entry.stat) {
                let owned: Vec<String> = rel.iter().map(|s| (*s).to_owned()).collect();
                self.keep(&owned);
                continue;
            }
            match rustix::fs::unlinkat(dir, *name, rustix::fs::AtFlags::empty()) {
                Ok(()) => self.report.deleted += 1,
                Err(e) => {
                    let owned: Vec<String> = rel.iter().map(|s| (*s).to_owned()).collect();
                    self.host_error(&owned, &hostfs::errno_io(e));
                }
            }
        }
    }
}

struct Meter<'a> {
    inner: &'a mut dyn Write,
    n: &'a mut u64,
}

impl Write for Meter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        *self.n += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(s: &str) -> Vec<String> {
        s.split('/').map(str::to_owned).collect()
    }

    #[test]
    fn link_targets_stay_inside_lexically() {
        assert!(link_inside(&rel("a/l"), "../b").is_ok());
        assert!(link_inside(&rel("a/l"), "x/y").is_ok());
        assert!(link_inside(&rel("l"), "..").is_err());
        assert!(link_inside(&rel("a/b/l"), "../../../x").is_err());
        assert!(link_inside(&rel("l"), "/etc/passwd").is_err());
        assert!(link_inside(&rel("l"), "").is_err());
        assert_eq!(resolve(&rel("a/b/l"), "../c/./d"), Some(rel("a/c/d")));
    }
}
