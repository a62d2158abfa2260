//! The blocking half of the export: the ops the reader sends, in archive
//! order, applied to the host workspace through `hostfs` only (no path
//! followed, nothing replaced that changed on the host during the run),
//! deletions last and only when the export was complete.

use std::collections::HashSet;
use std::io::{self, Write};
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::name::{self};
use crate::workspace::hostfs::{self, HostStat, HostTree, Kind, Reach};
use crate::workspace::manifest::Manifest;
use crate::workspace::reason;
use crate::workspace::root::excluded;

/// What the reader hands the sink, in archive order.
pub(super) enum Op {
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
pub(super) struct SinkReport {
    pub(super) files: u64,
    pub(super) bytes: u64,
    pub(super) links: u64,
    pub(super) deleted: u64,
    pub(super) kept: Vec<String>,
    pub(super) kept_count: u64,
    pub(super) declined: Vec<(&'static str, String)>,
    pub(super) declined_count: u64,
    pub(super) host_error: Option<String>,
}

/// The host side: the tree it writes into and what it has done.
pub(super) struct Sink {
    pub(super) tree: HostTree,
    pub(super) manifest: Arc<Manifest>,
    pub(super) exclude: Arc<Vec<Vec<String>>>,
    pub(super) seen: HashSet<Vec<u8>>,
    pub(super) links: Vec<(Vec<String>, String)>,
    pub(super) report: SinkReport,
    pub(super) max_names: usize,
    pub(super) max_links: usize,
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
    pub(super) fn run(mut self, mut rx: mpsc::Receiver<Op>) -> SinkReport {
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
