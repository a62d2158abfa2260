//! The async half of the export: every piece of the sandbox's workspace
//! read through the bounded tar reader, each member judged by name and
//! type, metered against the cap, and handed to the sink as ops.

use iterion_core::SandboxRun;
use tokio::sync::mpsc;

use crate::declines::Declines;
use crate::error::ReadbackError;
use crate::name::{self, NameFault};
use crate::tar::{Member, MemberKind, MetaLimits, TarStream};
use crate::walk::{Export, Walk, container_path_of, is_not_found, plan_rest};
use crate::workspace::hostfs::Kind;
use crate::workspace::manifest::Manifest;
use crate::workspace::reason;
use crate::workspace::root::excluded;

use super::options::ExportOptions;
use super::sink::Op;

/// Why the reading stopped.
pub(super) struct ReadError {
    pub(super) token: &'static str,
    pub(super) message: String,
}

impl From<ReadbackError> for ReadError {
    fn from(e: ReadbackError) -> Self {
        Self {
            token: e.reason(),
            message: e.to_string(),
        }
    }
}

pub(super) struct Reader<'a> {
    pub(super) run: &'a dyn SandboxRun,
    pub(super) options: &'a ExportOptions,
    pub(super) manifest: &'a Manifest,
    pub(super) exclude: &'a [Vec<String>],
    pub(super) tx: &'a mpsc::Sender<Op>,
    pub(super) declines: &'a mut Declines,
    /// A member was declined whose path is not known (so the export cannot
    /// tell it from an entry the run deleted).
    pub(super) unknown_declined: bool,
    /// Bytes handed to the sink (or in flight): the cap's meter.
    pub(super) written: u64,
    pub(super) members: u64,
}

/// How one piece's archive ended.
enum PieceEnd {
    Finished,
    /// At an oversized member (its path below the workspace, when known).
    Aborted(Option<Vec<String>>),
}

impl Reader<'_> {
    /// Every piece of the workspace; `Ok(true)` when nothing was left out.
    pub(super) async fn read_all(&mut self) -> Result<bool, ReadError> {
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
