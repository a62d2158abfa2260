//! The host workspace, reached only through directory descriptors opened
//! one component at a time with `O_NOFOLLOW` (openat-style resolution):
//! no path string is ever handed to the kernel whole, so no symlink — one
//! the workspace held before the run, or one the export itself placed — is
//! followed, and nothing outside the workspace root can be named. This is
//! what makes the export safe against a time-of-check/time-of-use swap:
//! checking a path and then opening it by name would let a link planted in
//! between redirect the write; here the check *is* the open (a component
//! that is a symlink fails `ELOOP`/`ENOTDIR`), and every later call is
//! relative to the descriptor that was checked.
//!
//! Files are written into a fresh `O_EXCL` temporary in their own
//! directory and renamed over the name: a rename replaces the last
//! component without following it, and never writes through an existing
//! file — a hardlink of the host's to a file outside the workspace keeps
//! its content. It owns no policy: what to write, keep or delete is the
//! export's (`export.rs`).

use std::ffi::OsStr;
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat, Timestamps};
use rustix::io::Errno;

/// What a host entry is, as far as the export compares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HostStat {
    pub(crate) kind: Kind,
    pub(crate) perm: u32,
    pub(crate) size: u64,
    pub(crate) mtime: (i64, u64),
    pub(crate) ctime: (i64, u64),
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
}

/// Entry kinds the copy and the export know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    File,
    Dir,
    Symlink,
    /// Sockets, fifos, devices: never copied, never written.
    Other,
}

impl Kind {
    pub(crate) fn letter(self) -> char {
        match self {
            Self::File => 'f',
            Self::Dir => 'd',
            Self::Symlink => 'l',
            Self::Other => 'o',
        }
    }

    pub(crate) fn from_letter(c: &str) -> Option<Self> {
        Some(match c {
            "f" => Self::File,
            "d" => Self::Dir,
            "l" => Self::Symlink,
            "o" => Self::Other,
            _ => return None,
        })
    }
}

impl HostStat {
    pub(crate) fn of(st: &Stat) -> Self {
        let kind = match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => Kind::File,
            FileType::Directory => Kind::Dir,
            FileType::Symlink => Kind::Symlink,
            _ => Kind::Other,
        };
        Self {
            kind,
            perm: st.st_mode & 0o7777,
            size: u64::try_from(st.st_size).unwrap_or(0),
            mtime: (st.st_mtime, st.st_mtime_nsec),
            ctime: (st.st_ctime, st.st_ctime_nsec),
            dev: st.st_dev,
            ino: st.st_ino,
            uid: st.st_uid,
            gid: st.st_gid,
        }
    }

    /// The same inode, untouched since: what the copy recorded is still
    /// what the host holds (ctime moves on every write, chmod and rename
    /// and cannot be set back by a user).
    pub(crate) fn unchanged_since(&self, then: &HostStat) -> bool {
        self.kind == then.kind
            && self.dev == then.dev
            && self.ino == then.ino
            && self.size == then.size
            && self.mtime == then.mtime
            && self.ctime == then.ctime
    }
}

pub(crate) fn errno_io(e: Errno) -> io::Error {
    io::Error::from(e)
}

/// Open a directory without following a symlink at its last component.
pub(crate) fn open_dir_nofollow(dir: BorrowedFd<'_>, name: &OsStr) -> Result<OwnedFd, Errno> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// `lstat` of `name` in `dir` (`None` when it does not exist).
pub(crate) fn stat_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<Option<HostStat>> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(HostStat::of(&st))),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(errno_io(e)),
    }
}

/// Why a path of the workspace could not be reached.
#[derive(Debug)]
pub(crate) enum Reach {
    /// A component is a symlink or not a directory: never followed.
    NotADirectory(String),
    /// A component is missing (and was not to be created).
    Missing,
    /// Another error.
    Io(io::Error),
}

/// The workspace root and a cache of the directory descriptors of the
/// current path (archives are depth-first, so the common prefix is
/// reused instead of walking from the root for every member).
pub(crate) struct HostTree {
    root: OwnedFd,
    stack: Vec<(String, OwnedFd)>,
    /// `uid:gid` new entries are given (iterion running as root in a
    /// checkout that is not root's: what the export writes stays the
    /// owner's, as the sandbox's writes do on a bind run).
    owner: Option<(u32, u32)>,
}

impl HostTree {
    pub(crate) fn new(root: OwnedFd) -> io::Result<Self> {
        let root_stat = rustix::fs::fstat(&root).map_err(errno_io)?;
        let me = rustix::process::geteuid().as_raw();
        let owner =
            (me == 0 && root_stat.st_uid != 0).then_some((root_stat.st_uid, root_stat.st_gid));
        Ok(Self {
            root,
            stack: Vec::new(),
            owner,
        })
    }

    /// The descriptor of directory `rel` (components below the root),
    /// created (mode `0755`) where missing when `create` is set. A
    /// component that is a symlink, a file or a device is never followed.
    pub(crate) fn dir(&mut self, rel: &[&str], create: bool) -> Result<BorrowedFd<'_>, Reach> {
        let common = self
            .stack
            .iter()
            .zip(rel)
            .take_while(|((name, _), comp)| name == *comp)
            .count();
        self.stack.truncate(common);
        for comp in &rel[common..] {
            let parent = match self.stack.last() {
                Some((_, fd)) => fd.as_fd(),
                None => self.root.as_fd(),
            };
            let name = OsStr::new(comp);
            let fd = match open_dir_nofollow(parent, name) {
                Ok(fd) => fd,
                Err(Errno::NOENT) if create => {
                    match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o755)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => return Err(Reach::Io(errno_io(e))),
                    }
                    let fd = open_dir_nofollow(parent, name).map_err(|e| match e {
                        Errno::LOOP | Errno::NOTDIR => Reach::NotADirectory(rel_join(rel)),
                        e => Reach::Io(errno_io(e)),
                    })?;
                    if let Some((uid, gid)) = self.owner {
                        let _ = rustix::fs::fchown(
                            &fd,
                            Some(rustix::fs::Uid::from_raw(uid)),
                            Some(rustix::fs::Gid::from_raw(gid)),
                        );
                    }
                    fd
                }
                Err(Errno::NOENT) => return Err(Reach::Missing),
                Err(Errno::LOOP | Errno::NOTDIR) => {
                    return Err(Reach::NotADirectory(rel_join(rel)));
                }
                Err(e) => return Err(Reach::Io(errno_io(e))),
            };
            self.stack.push(((*comp).to_owned(), fd));
        }
        Ok(match self.stack.last() {
            Some((_, fd)) => fd.as_fd(),
            None => self.root.as_fd(),
        })
    }

    /// Write `data` as `name` in `dir`: a fresh temporary, its mode and
    /// mtime, then a rename over the name.
    pub(crate) fn write_file(
        dir: BorrowedFd<'_>,
        name: &str,
        perm: u32,
        mtime: u64,
        owner: Option<(u32, u32)>,
        data: &mut dyn FnMut(&mut dyn Write) -> io::Result<()>,
    ) -> io::Result<()> {
        let (tmp, fd) = temp_file(dir)?;
        let result = (|| {
            let mut file = std::fs::File::from(fd);
            data(&mut file)?;
            finish_entry(file.as_fd(), perm, mtime, owner)?;
            rustix::fs::renameat(dir, tmp.as_str(), dir, name).map_err(errno_io)
        })();
        if result.is_err() {
            let _ = rustix::fs::unlinkat(dir, tmp.as_str(), AtFlags::empty());
        }
        result
    }

    /// Place a symlink `name` → `target` in `dir` (created aside, renamed
    /// over the name: an existing file or link is replaced, never followed).
    pub(crate) fn place_symlink(
        dir: BorrowedFd<'_>,
        name: &str,
        target: &str,
        owner: Option<(u32, u32)>,
    ) -> io::Result<()> {
        let tmp = temp_name();
        rustix::fs::symlinkat(target, dir, tmp.as_str()).map_err(errno_io)?;
        if let Some((uid, gid)) = owner {
            let _ = rustix::fs::chownat(
                dir,
                tmp.as_str(),
                Some(rustix::fs::Uid::from_raw(uid)),
                Some(rustix::fs::Gid::from_raw(gid)),
                AtFlags::SYMLINK_NOFOLLOW,
            );
        }
        let placed = rustix::fs::renameat(dir, tmp.as_str(), dir, name).map_err(errno_io);
        if placed.is_err() {
            let _ = rustix::fs::unlinkat(dir, tmp.as_str(), AtFlags::empty());
        }
        placed
    }

    /// Open a regular file of the workspace for reading (a hardlink's
    /// target, copied rather than linked): never through a symlink.
    pub(crate) fn open_file(&mut self, rel: &[&str]) -> Result<std::fs::File, Reach> {
        let Some((name, parent)) = rel.split_last() else {
            return Err(Reach::Missing);
        };
        let dir = self.dir(parent, false)?;
        let fd = rustix::fs::openat(
            dir,
            *name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            Errno::NOENT => Reach::Missing,
            Errno::LOOP => Reach::NotADirectory(rel_join(rel)),
            e => Reach::Io(errno_io(e)),
        })?;
        let st = rustix::fs::fstat(&fd).map_err(|e| Reach::Io(errno_io(e)))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(Reach::NotADirectory(rel_join(rel)));
        }
        Ok(std::fs::File::from(fd))
    }

    pub(crate) fn owner(&self) -> Option<(u32, u32)> {
        self.owner
    }
}

/// Mode (permission bits only: never setuid, setgid or sticky from a
/// container), mtime and owner of an entry just written.
fn finish_entry(
    fd: BorrowedFd<'_>,
    perm: u32,
    mtime: u64,
    owner: Option<(u32, u32)>,
) -> io::Result<()> {
    rustix::fs::fchmod(fd, Mode::from_raw_mode(perm & 0o777)).map_err(errno_io)?;
    if let Some((uid, gid)) = owner {
        rustix::fs::fchown(
            fd,
            Some(rustix::fs::Uid::from_raw(uid)),
            Some(rustix::fs::Gid::from_raw(gid)),
        )
        .map_err(errno_io)?;
    }
    let when = rustix::fs::Timespec {
        tv_sec: i64::try_from(mtime).unwrap_or(i64::MAX),
        tv_nsec: 0,
    };
    rustix::fs::futimens(
        fd,
        &Timestamps {
            last_access: when,
            last_modification: when,
        },
    )
    .map_err(errno_io)
}

/// A name no archive member can have (members never start with this and a
/// random suffix), so a temporary never replaces a workspace file.
fn temp_name() -> String {
    format!(".iterion-export-{:016x}", rand::random::<u64>())
}

fn temp_file(dir: BorrowedFd<'_>) -> io::Result<(String, OwnedFd)> {
    for _ in 0..8 {
        let name = temp_name();
        match rustix::fs::openat(
            dir,
            name.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        ) {
            Ok(fd) => return Ok((name, fd)),
            Err(Errno::EXIST) => continue,
            Err(e) => return Err(errno_io(e)),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        "no free temporary name",
    ))
}

pub(crate) fn rel_join(rel: &[&str]) -> String {
    rel.join("/")
}

/// Open the workspace root without following a symlink at it.
pub(crate) fn open_root(path: &Path) -> Result<OwnedFd, Errno> {
    rustix::fs::openat(
        rustix::fs::CWD,
        path.as_os_str().as_bytes(),
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}
