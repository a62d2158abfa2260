//! Member names: the checks every member passes before anything is stored,
//! and the addressing of drained files in the run's file area.
//!
//! Addressing (SPEC §4 "addressed by their path relative to the declared
//! dir"): the engine's archive of a directory has the directory's basename as
//! its top-level entry (`GET /containers/{id}/archive?path=/iterion/artifact-files`
//! yields `artifact-files/report.json`). That first component is stripped, so
//! the member is addressed relative to the declared dir. Then:
//!
//! * the run-files dir (`/iterion/artifact-files`) has an empty key: its files
//!   are stored at their relative path (`report.json`);
//! * every other declared path is stored under
//!   `.iterion-readback/<container path without its leading '/'>/`, each
//!   byte outside `[A-Za-z0-9._-]` of a component percent-encoded (so
//!   `/home/iterion/out` → `.iterion-readback/home/iterion/out/<rel>`);
//! * a run-files member whose first component is `.iterion-readback` is
//!   declined as reserved, so a tool cannot impersonate another declared path;
//!   so is one under `.iterion`, the engine's own run files (the privacy vault);
//! * a declared path that is a single file (its archive holds one entry, the
//!   basename) is stored as `<key>/<basename>`.
//!
//! Names that are not valid UTF-8 are declined, never stored; the report
//! names them lossily (U+FFFD), with control characters escaped.

use iterion_core::MountOrigin;
use iterion_core::plan::{RUN_FILES_CONTAINER_DIR, ReadBackDecl};
use iterion_core::store::RunFilePath;

use crate::tar::{Member, MemberKind};

/// First component reserved for declared paths other than run-files.
pub const RESERVED_PREFIX: &str = ".iterion-readback";
/// First component reserved for the engine's own run files (the privacy
/// vault): nothing a sandbox writes is stored under it.
pub const ENGINE_PREFIX: &str = ".iterion";

/// Longest declined name kept in a report.
const MAX_REPORTED_NAME: usize = 512;

/// How one declared path is addressed in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Addressing {
    /// Top-level entry of the engine's archive (the declared basename).
    pub top: String,
    /// Store key prefix, empty or ending in `/`.
    pub prefix: String,
    /// The container directory holding the declared path (for reports).
    pub parent: String,
}

/// The store key prefix of a declared path (empty for run-files).
pub fn key_prefix(decl: &ReadBackDecl) -> String {
    let path = decl.container_path.trim_end_matches('/');
    if decl.origin == MountOrigin::RunFiles || path == RUN_FILES_CONTAINER_DIR {
        return String::new();
    }
    let mut key = String::from(RESERVED_PREFIX);
    // No `.` to drop: a declared path is an `iterion_core::ReadBackPath`
    // (normalised as written), and `check_launch_plan` runs that parser on
    // every declaration a driver prepares. Were one to arrive anyway, the
    // dots-only encoding below keys it apart instead of merging it.
    for comp in path.split('/').filter(|c| !c.is_empty()) {
        key.push('/');
        for b in comp.bytes() {
            if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') {
                key.push(char::from(b));
            } else {
                key.push_str(&format!("%{b:02X}"));
            }
        }
    }
    // A component of only dots would read as `.`/`..` to a path parser.
    let key = key
        .split('/')
        .map(|c| {
            if !c.is_empty() && c.bytes().all(|b| b == b'.') {
                c.replace('.', "%2E")
            } else {
                c.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("/");
    key + "/"
}

pub(crate) fn addressing(decl: &ReadBackDecl) -> Addressing {
    let path = decl.container_path.trim_end_matches('/');
    let (parent, top) = match path.rfind('/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("", path),
    };
    Addressing {
        top: top.to_owned(),
        prefix: key_prefix(decl),
        parent: parent.to_owned(),
    }
}

/// What to do with one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Store it at this key.
    Store(RunFilePath),
    /// A directory: nothing to store, nothing to report.
    Skip,
    /// Decline it (never followed, never created).
    Decline(&'static str),
}

/// Why a member's name is refused before its type is looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NameFault {
    /// Declined for this reason.
    Decline(&'static str),
    /// Not under the exported entry.
    Outside,
    /// Nested deeper than the bound.
    TooDeep,
}

/// The components of a member's name below the archive's top entry `top`
/// (the whole name when `top` is empty), after the checks every sink
/// shares — the run store's and the host workspace's: a name cut at its
/// bound, not UTF-8, with NUL, absolute, with a `..` component or a
/// backslash is declined; `.` and empty components are dropped. `Ok` of no
/// component is the exported entry itself.
pub(crate) fn components<'m>(
    member: &'m Member,
    top: &str,
    max_depth: usize,
) -> Result<Vec<&'m str>, NameFault> {
    use NameFault::Decline;
    if member.name_truncated {
        return Err(Decline("name longer than the bound"));
    }
    let Ok(name) = std::str::from_utf8(&member.name) else {
        return Err(Decline("name is not valid UTF-8"));
    };
    if name.contains('\0') {
        return Err(Decline("name contains NUL"));
    }
    if name.starts_with('/') {
        return Err(Decline("absolute name"));
    }
    let mut comps: Vec<&str> = Vec::new();
    let mut too_deep = false;
    for comp in name.split('/') {
        match comp {
            "" | "." => {}
            ".." => return Err(Decline("'..' component")),
            c if c.contains('\\') => return Err(Decline("backslash in name")),
            // Every component is still checked above; only the kept list is
            // bounded (a 64 KiB name is 32,000 components).
            _ if comps.len() > max_depth => too_deep = true,
            c => comps.push(c),
        }
    }
    let rel: Vec<&str> = if top.is_empty() {
        comps
    } else {
        match comps.split_first() {
            Some((first, rest)) if *first == top => rest.to_vec(),
            // The exported entry itself, as `./`.
            None if member.kind == MemberKind::Dir => Vec::new(),
            _ => return Err(NameFault::Outside),
        }
    };
    if too_deep || rel.len() > max_depth {
        return Err(NameFault::TooDeep);
    }
    Ok(rel)
}

pub(crate) fn judge(member: &Member, addr: &Addressing, max_depth: usize) -> Verdict {
    use Verdict::Decline;
    let rel = match components(member, &addr.top, max_depth) {
        Ok(rel) => rel,
        Err(NameFault::Decline(why)) => return Decline(why),
        Err(NameFault::Outside) => return Decline("outside the declared path"),
        // Directories are never stored, so depth is no reason to report
        // one; the files inside them are judged (and reported) on their own.
        Err(NameFault::TooDeep) if member.kind == MemberKind::Dir => return Verdict::Skip,
        Err(NameFault::TooDeep) => return Decline("nested deeper than the bound"),
    };
    let rel = rel.as_slice();
    match member.kind {
        MemberKind::Dir => return Verdict::Skip,
        MemberKind::File => {}
        other => return Decline(other.describe()),
    }
    let file_name: Vec<&str>;
    let rel = if rel.is_empty() {
        if addr.top.is_empty() {
            return Decline("names no file");
        }
        file_name = vec![addr.top.as_str()];
        &file_name[..]
    } else {
        rel
    };
    if addr.prefix.is_empty() && matches!(rel.first(), Some(&RESERVED_PREFIX | &ENGINE_PREFIX)) {
        return Decline("reserved name");
    }
    let key = format!("{}{}", addr.prefix, rel.join("/"));
    match RunFilePath::parse(&key) {
        Ok(path) => Verdict::Store(path),
        Err(_) => Decline("not a safe run-file path"),
    }
}

/// The container path of a member, for reports: lossy, escaped, bounded.
pub(crate) fn display(addr: &Addressing, member: &Member) -> String {
    let raw = String::from_utf8_lossy(&member.name);
    let full = if raw.starts_with('/') {
        raw.into_owned()
    } else {
        format!("{}/{}", addr.parent, raw)
    };
    let mut out = escaped(&full);
    if member.name_truncated && !out.ends_with('…') {
        out.push('…');
    }
    out
}

/// A container path for reports: control characters escaped, bounded.
pub(crate) fn escaped(full: &str) -> String {
    let mut out = String::with_capacity(full.len().min(MAX_REPORTED_NAME + 8));
    for c in full.chars() {
        if out.len() >= MAX_REPORTED_NAME {
            out.push('…');
            return out;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// A member's path relative to the declared path, as components (lossy
/// for non-UTF-8 bytes; `.` and empty ones dropped): what a drain's walk
/// tracks. `None` when the name is not under the declared path's entry.
pub(crate) fn relative(name: &[u8], addr: &Addressing) -> Option<Vec<String>> {
    let text = String::from_utf8_lossy(name);
    let mut comps = text.split('/').filter(|c| !c.is_empty() && *c != ".");
    if !addr.top.is_empty() && comps.next()? != addr.top {
        return None;
    }
    Some(comps.map(str::to_owned).collect())
}

/// Rename a member of a piecewise export — the engine names it by the
/// exported entry's basename (`c/x` for `<path>/a/b/c`) — to where the
/// whole path's archive has it (`<top>/a/b/c/x`), so every check of
/// [`judge`] sees the full name. The rest of the name is kept byte for
/// byte (a `..` in it is still declined). `None` when the member is not
/// under the exported entry.
pub(crate) fn graft(name: &[u8], top: &str, rel: &[String]) -> Option<Vec<u8>> {
    let entry = rel.last()?.as_bytes();
    let mut rest = name;
    while let Some(r) = rest.strip_prefix(b"./") {
        rest = r;
    }
    let (first, tail) = match rest.iter().position(|b| *b == b'/') {
        Some(i) => rest.split_at(i),
        None => (rest, &b""[..]),
    };
    if first != entry {
        return None;
    }
    let mut out = Vec::with_capacity(top.len() + name.len() + 64);
    out.extend_from_slice(top.as_bytes());
    for comp in rel {
        if !out.is_empty() {
            out.push(b'/');
        }
        out.extend_from_slice(comp.as_bytes());
    }
    out.extend_from_slice(tail);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use iterion_core::ByteSize;

    fn decl(path: &str, origin: MountOrigin) -> ReadBackDecl {
        ReadBackDecl {
            container_path: path.into(),
            cap: ByteSize(1),
            origin,
        }
    }

    fn member(name: &str, kind: MemberKind) -> Member {
        Member {
            name: name.as_bytes().to_vec(),
            name_truncated: false,
            kind,
            size: 0,
            claimed_size: 0,
            mode: 0,
            mtime: 0,
            link: None,
        }
    }

    #[test]
    fn prefixes_are_stable_and_safe() {
        assert_eq!(
            key_prefix(&decl(RUN_FILES_CONTAINER_DIR, MountOrigin::ReadBack)),
            ""
        );
        assert_eq!(
            key_prefix(&decl("/home/iterion/out", MountOrigin::ReadBack)),
            ".iterion-readback/home/iterion/out/"
        );
        assert_eq!(
            key_prefix(&decl("/a b/..x/...", MountOrigin::ReadBack)),
            ".iterion-readback/a%20b/..x/%2E%2E%2E/"
        );
    }

    #[test]
    fn grafts_piecewise_members_under_the_whole_name() {
        let rel = |r: &[&str]| r.iter().map(|c| (*c).to_owned()).collect::<Vec<_>>();
        let g = |name: &str, r: &[&str]| {
            graft(name.as_bytes(), "artifact-files", &rel(r))
                .map(|v| String::from_utf8(v).unwrap_or_default())
        };
        assert_eq!(
            g("c/x", &["a", "b", "c"]).as_deref(),
            Some("artifact-files/a/b/c/x")
        );
        assert_eq!(g("./c", &["c"]).as_deref(), Some("artifact-files/c"));
        assert_eq!(
            g("c/../../x", &["c"]).as_deref(),
            Some("artifact-files/c/../../x")
        );
        assert_eq!(g("d/x", &["a", "c"]), None);
        assert_eq!(g("/c/x", &["c"]), None);
        assert_eq!(g("cc/x", &["c"]), None);
        let run_files = addressing(&decl(RUN_FILES_CONTAINER_DIR, MountOrigin::RunFiles));
        assert_eq!(
            relative(b"./artifact-files//a/./b", &run_files),
            Some(rel(&["a", "b"]))
        );
        assert_eq!(relative(b"artifact-files", &run_files), Some(Vec::new()));
        assert_eq!(relative(b"other/a", &run_files), None);
    }

    #[test]
    fn judges_members() {
        let run_files = addressing(&decl(RUN_FILES_CONTAINER_DIR, MountOrigin::RunFiles));
        let other = addressing(&decl("/out", MountOrigin::ReadBack));
        let store =
            |p: &str| Verdict::Store(RunFilePath::parse(p).unwrap_or_else(|e| panic!("{e}")));
        let f = MemberKind::File;
        assert_eq!(
            judge(&member("artifact-files/a/b.txt", f), &run_files, 8),
            store("a/b.txt")
        );
        assert_eq!(
            judge(&member("./artifact-files/x", f), &run_files, 8),
            store("x")
        );
        assert_eq!(
            judge(&member("out/x", f), &other, 8),
            store(".iterion-readback/out/x")
        );
        assert_eq!(
            judge(&member("out", f), &other, 8),
            store(".iterion-readback/out/out")
        );
        assert_eq!(
            judge(&member("artifact-files/", MemberKind::Dir), &run_files, 8),
            Verdict::Skip
        );
        for (name, kind) in [
            ("/etc/passwd", f),
            ("artifact-files/../../x", f),
            ("other/x", f),
            ("artifact-files/.iterion-readback/out/x", f),
            ("artifact-files/.iterion/privacy/vault.json", f),
            ("artifact-files/a\\..\\b", f),
            ("artifact-files/l", MemberKind::Symlink),
            ("artifact-files/h", MemberKind::Hardlink),
            ("artifact-files/c", MemberKind::CharDevice),
            ("artifact-files/p", MemberKind::Fifo),
            ("artifact-files/s", MemberKind::Sparse),
            ("artifact-files/a/b/c/d/e/f/g/h/i/j", f),
        ] {
            assert!(
                matches!(
                    judge(&member(name, kind), &run_files, 8),
                    Verdict::Decline(_)
                ),
                "{name} accepted"
            );
        }
        let bad_utf8 = Member {
            name: b"artifact-files/\xff".to_vec(),
            name_truncated: false,
            kind: f,
            size: 0,
            claimed_size: 0,
            mode: 0,
            mtime: 0,
            link: None,
        };
        assert!(matches!(
            judge(&bad_utf8, &run_files, 8),
            Verdict::Decline(_)
        ));
        assert_eq!(
            display(&run_files, &bad_utf8),
            "/iterion/artifact-files/\u{fffd}"
        );
        assert_eq!(
            display(&run_files, &member("artifact-files/a\nb", f)),
            "/iterion/artifact-files/a\\nb"
        );
    }
}
