//! The walk of one exported container path (drain and workspace export
//! alike): which members an export already showed, and — once a member
//! too large to read made the reader drop the stream — which pieces are
//! exported next, from [`SandboxRun::list_dir`] listings of the
//! directories on the way to it. It owns no parser and no sink: the
//! bounded reader reads every piece, and the caller's sink stores it.

use std::collections::HashSet;
use std::io;

use iterion_core::SandboxRun;
use iterion_core::driver::DriverError;

use crate::declines::Declines;
use crate::{name, reason};

/// One export of a declared path: the path itself, or — once a member too
/// large to read was met — one entry below it, named by its components
/// relative to the declared path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Export {
    pub(crate) rel: Vec<String>,
}

/// Exports of one declared path in one drain, the first included: past
/// this, what is left is declined as a count (each export is one archive
/// request; a tree of many entries beside many oversized ones stays bounded).
pub(crate) const MAX_EXPORTS_PER_PATH: usize = 512;
/// Directory listings of one declared path in one drain.
pub(crate) const MAX_LISTINGS_PER_PATH: usize = 128;

/// What the archives of one declared path showed so far, for planning the
/// exports that follow an abort.
pub(crate) struct Walk {
    /// Every member seen (stored, declined or a directory), by its path
    /// relative to the declared path (`""` for the path itself).
    pub(crate) seen: HashSet<String>,
    /// The previous member's components (within the current export).
    pub(crate) last: Vec<String>,
    /// Directories an export has left (within the current export).
    pub(crate) closed: HashSet<String>,
    /// Whether every archive so far listed each directory's entries
    /// together (depth-first). Both engines do; if one did not, a started
    /// directory could be incomplete and is exported again.
    pub(crate) depth_first: bool,
    /// Bytes read past and not stored (declined members, repeats): bounded
    /// by the cap like stored bytes, so a declined member cannot be a
    /// terabyte read either.
    pub(crate) skipped: u64,
    pub(crate) exports: usize,
    pub(crate) listings: usize,
}

impl Walk {
    pub(crate) fn new() -> Self {
        Self {
            seen: HashSet::new(),
            last: Vec::new(),
            closed: HashSet::new(),
            depth_first: true,
            skipped: 0,
            exports: 0,
            listings: 0,
        }
    }

    /// Record one member; `true` when it was seen before (a repeat).
    pub(crate) fn visit(&mut self, rel: &[String]) -> bool {
        let common = self
            .last
            .iter()
            .zip(rel)
            .take_while(|(a, b)| a == b)
            .count();
        for j in (common + 1)..=self.last.len() {
            self.closed.insert(self.last[..j].join("/"));
        }
        // Entering a directory this export already left: not depth-first.
        if (common + 1..rel.len()).any(|j| self.closed.contains(&rel[..j].join("/"))) {
            self.depth_first = false;
        }
        self.last = rel.to_vec();
        !self.seen.insert(rel.join("/"))
    }

    pub(crate) fn start_export(&mut self) {
        self.exports += 1;
        self.last.clear();
        self.closed.clear();
    }
}

pub(crate) fn container_path_of(base: &str, rel: &[String]) -> String {
    let mut path = base.to_owned();
    for comp in rel {
        path.push('/');
        path.push_str(comp);
    }
    path
}

pub(crate) fn is_not_found(e: &DriverError) -> bool {
    matches!(e, DriverError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
}

/// After an abort at `at` inside `export`: list every directory from the
/// export's root down to the dropped member's parent, and queue each entry
/// the archive had not finished. A member whose name left the path (`at`
/// is `None`) is on no chain: the export's root alone is listed. A
/// directory that cannot be listed (a stopped container, an image without
/// `sh`) has its undrained rest declined by name, never silently lost.
pub(crate) async fn plan_rest(
    run: &dyn SandboxRun,
    base: &str,
    export: &Export,
    at: Option<&[String]>,
    walk: &mut Walk,
    queue: &mut std::collections::VecDeque<Export>,
    declines: &mut Declines,
) {
    let levels: Vec<(&[String], Option<&String>)> = match at {
        Some(at) => (export.rel.len()..at.len())
            .map(|depth| (&at[..depth], Some(&at[depth])))
            .collect(),
        None => vec![(export.rel.as_slice(), None)],
    };
    for (dir, chain_child) in levels {
        let dir_path = container_path_of(base, dir);
        if walk.listings >= MAX_LISTINGS_PER_PATH {
            declines.decline(reason::CAP_EXCEEDED, || {
                name::escaped(&format!(
                    "{dir_path}/… (not drained: more than {MAX_LISTINGS_PER_PATH} listings)"
                ))
            });
            continue;
        }
        walk.listings += 1;
        let names = match run.list_dir(&dir_path).await {
            Ok(names) => names,
            Err(e) => {
                declines.decline(reason::CAP_EXCEEDED, || {
                    name::escaped(&format!(
                        "{dir_path}/… (not drained: the directory could not be listed: {e})"
                    ))
                });
                continue;
            }
        };
        for raw in names {
            // The dropped member (or the directory holding it) is on its way.
            if chain_child.is_some_and(|c| String::from_utf8_lossy(&raw) == c.as_str()) {
                continue;
            }
            let Some(entry) = std::str::from_utf8(&raw)
                .ok()
                .filter(|n| !n.is_empty() && *n != "." && *n != ".." && !n.contains(['/', '\0']))
            else {
                declines.decline(reason::ARCHIVE_ERROR, || {
                    name::escaped(&format!("{dir_path}/{}", String::from_utf8_lossy(&raw)))
                });
                continue;
            };
            let mut rel = dir.to_vec();
            rel.push(entry.to_owned());
            // Seen and left: complete, when archives are depth-first.
            if walk.depth_first && walk.seen.contains(&rel.join("/")) {
                continue;
            }
            queue.push_back(Export { rel });
        }
    }
}
