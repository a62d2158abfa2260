//! The record of a workspace copy: every entry copied in, with what the
//! archive said of it (so the export can tell a member the run left
//! untouched) and what the host's inode looked like (so the export can
//! tell a host file changed during the run, and never overwrite or delete
//! it). Written by the copy as it goes, into a private file of the run's
//! state dir (never in the workspace, never in the sandbox); read once at
//! teardown. Memory at the export is bounded by [`MAX_ENTRIES`].
//!
//! Format, version 1: a first line `iterion-workspace-manifest 1`, then
//! one line per entry, space-separated: kind letter, permission bits
//! (octal), size, mtime s, mtime ns, ctime s, ctime ns, dev, ino, link
//! target (hex, `-` for none), path relative to the root (hex: names are
//! bytes, and may hold spaces or newlines).

use std::collections::HashMap;
use std::io::{self, BufRead, Write};

use super::hostfs::{HostStat, Kind};

const MAGIC: &str = "iterion-workspace-manifest 1";

/// Entries read at most; a larger record is read as incomplete (the export
/// then deletes nothing).
pub(crate) const MAX_ENTRIES: usize = 2_000_000;

/// One copied entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) stat: HostStat,
    pub(crate) link: Option<Vec<u8>>,
}

impl Entry {
    /// Whether an exported member is what was copied in: same kind, size,
    /// permission bits, mtime (seconds, as the archive carries it) and link.
    pub(crate) fn matches_member(
        &self,
        kind: Kind,
        size: u64,
        perm: u32,
        mtime: u64,
        link: Option<&[u8]>,
    ) -> bool {
        self.stat.kind == kind
            && (kind != Kind::File || self.stat.size == size)
            && (kind == Kind::Symlink || self.stat.perm & 0o777 == perm & 0o777)
            && (kind == Kind::Dir || i64::try_from(mtime).ok() == Some(self.stat.mtime.0))
            && self.link.as_deref() == link
    }
}

/// The record, loaded.
#[derive(Debug, Default)]
pub(crate) struct Manifest {
    pub(crate) entries: HashMap<Vec<u8>, Entry>,
    /// Paths in copy order (parents before children).
    pub(crate) order: Vec<Vec<u8>>,
    /// Every entry of the copy was read.
    pub(crate) complete: bool,
}

/// Appends entries as the copy makes them.
pub(crate) struct ManifestWriter<W: Write> {
    out: W,
}

impl<W: Write> ManifestWriter<W> {
    pub(crate) fn new(mut out: W) -> io::Result<Self> {
        writeln!(out, "{MAGIC}")?;
        Ok(Self { out })
    }

    pub(crate) fn entry(
        &mut self,
        path: &[u8],
        stat: &HostStat,
        link: Option<&[u8]>,
    ) -> io::Result<()> {
        writeln!(
            self.out,
            "{} {:o} {} {} {} {} {} {} {} {} {}",
            stat.kind.letter(),
            stat.perm,
            stat.size,
            stat.mtime.0,
            stat.mtime.1,
            stat.ctime.0,
            stat.ctime.1,
            stat.dev,
            stat.ino,
            link.map_or_else(|| "-".to_owned(), hex::encode),
            hex::encode(path),
        )
    }

    pub(crate) fn finish(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Read a record; a record that is missing its header, malformed or too
/// long is returned incomplete with what could be read (never an error:
/// the export then only adds and overwrites, and deletes nothing).
pub(crate) fn read(mut input: impl BufRead) -> Manifest {
    let mut manifest = Manifest::default();
    match next_line(&mut input) {
        Some(Some(first)) if first == MAGIC => {}
        _ => return manifest,
    }
    loop {
        let text = match next_line(&mut input) {
            None => break,
            Some(Some(text)) => text,
            Some(None) => return manifest,
        };
        if manifest.order.len() >= MAX_ENTRIES {
            return manifest;
        }
        let Some((path, entry)) = parse_line(&text) else {
            return manifest;
        };
        manifest.order.push(path.clone());
        manifest.entries.insert(path, entry);
    }
    manifest.complete = true;
    manifest
}

/// The next line: `None` at the end, `Some(None)` for a line that is not
/// whole (no newline: a record cut mid-line by a copy that died while
/// writing it is incomplete, never a shorter entry) or not text.
fn next_line(input: &mut impl BufRead) -> Option<Option<String>> {
    let mut line = Vec::new();
    match input.read_until(b'\n', &mut line) {
        Ok(0) => None,
        Ok(_) if line.last() == Some(&b'\n') => {
            line.pop();
            Some(String::from_utf8(line).ok())
        }
        _ => Some(None),
    }
}

fn parse_line(line: &str) -> Option<(Vec<u8>, Entry)> {
    let f: Vec<&str> = line.split(' ').collect();
    if f.len() != 11 {
        return None;
    }
    let n = |i: usize| f[i].parse::<u64>().ok();
    let s = |i: usize| f[i].parse::<i64>().ok();
    let stat = HostStat {
        kind: Kind::from_letter(f[0])?,
        perm: u32::from_str_radix(f[1], 8).ok()?,
        size: n(2)?,
        mtime: (s(3)?, n(4)?),
        ctime: (s(5)?, n(6)?),
        dev: n(7)?,
        ino: n(8)?,
        uid: 0,
        gid: 0,
    };
    let link = match f[9] {
        "-" => None,
        h => Some(hex::decode(h).ok()?),
    };
    let path = hex::decode(f[10]).ok().filter(|p| !p.is_empty())?;
    Some((path, Entry { stat, link }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(kind: Kind) -> HostStat {
        HostStat {
            kind,
            perm: 0o644,
            size: 3,
            mtime: (1_700_000_000, 5),
            ctime: (1_700_000_001, 6),
            dev: 7,
            ino: 8,
            uid: 0,
            gid: 0,
        }
    }

    #[test]
    fn round_trips_any_name_and_refuses_what_it_cannot_read() {
        let mut w = ManifestWriter::new(Vec::new()).expect("header");
        w.entry(b"a b\nc", &stat(Kind::File), None).expect("file");
        w.entry(b"l", &stat(Kind::Symlink), Some(b"../x y"))
            .expect("link");
        w.entry(b"\xff", &stat(Kind::Dir), None).expect("dir");
        let bytes = w.finish().expect("finish");
        let m = read(bytes.as_slice());
        assert!(m.complete);
        assert_eq!(
            m.order,
            vec![b"a b\nc".to_vec(), b"l".to_vec(), b"\xff".to_vec()]
        );
        assert_eq!(
            m.entries[&b"l".to_vec()].link.as_deref(),
            Some(&b"../x y"[..])
        );
        assert_eq!(m.entries[&b"a b\nc".to_vec()].stat, stat(Kind::File));
        // A cut record is incomplete, and keeps what it could read.
        let cut = &bytes[..bytes.len() - 3];
        let m = read(cut);
        assert!(!m.complete);
        assert_eq!(m.order.len(), 2);
        assert!(!read(&b"garbage\n"[..]).complete);
        assert!(!read(&b""[..]).complete);
    }

    #[test]
    fn a_member_matches_what_was_copied_only_when_untouched() {
        let e = Entry {
            stat: stat(Kind::File),
            link: None,
        };
        assert!(e.matches_member(Kind::File, 3, 0o644, 1_700_000_000, None));
        assert!(!e.matches_member(Kind::File, 4, 0o644, 1_700_000_000, None));
        assert!(!e.matches_member(Kind::File, 3, 0o755, 1_700_000_000, None));
        assert!(!e.matches_member(Kind::File, 3, 0o644, 1_700_000_009, None));
        assert!(!e.matches_member(Kind::Symlink, 3, 0o644, 1_700_000_000, None));
    }
}
