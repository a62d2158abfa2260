//! The copy in: a tar stream of the host workspace, written by a blocking
//! task into a pipe and streamed as it is produced (never held whole), and
//! the record of what it copied ([`super::manifest`]).
//!
//! The tree is walked through directory descriptors: each entry is looked
//! at with `fstatat(AT_SYMLINK_NOFOLLOW)` and opened relative to its
//! directory with `O_NOFOLLOW`, and a file is archived from the descriptor
//! that was opened (its size and identity from `fstat` of that descriptor),
//! so a symlink swapped in for a file between the look and the read is
//! never followed out of the workspace. Symlinks are copied as symlinks;
//! sockets, fifos and devices are skipped; iterion's own areas (the
//! store, the state dirs: `WorkspaceCopy::exclude`) are never read.
//! Permission bits only (no setuid, setgid or sticky bit), owned in the
//! archive by the user the sandbox runs as.

use std::ffi::OsStr;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use iterion_core::ByteStream;
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use tokio::task::JoinHandle;
use tokio_util::io::{ReaderStream, SyncIoBridge};

use super::hostfs::{self, HostStat, Kind};
use super::manifest::ManifestWriter;
use super::root::{WorkspaceError, excluded};

/// What a copy did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CopyStats {
    /// Regular files copied.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Directories and symlinks copied.
    pub others: u64,
    /// Sockets, fifos and devices left out.
    pub skipped: u64,
}

/// Entries one copy takes at most: the record of a larger workspace would
/// not fit the export's bound ([`super::manifest::MAX_ENTRIES`]).
const MAX_ENTRIES: u64 = super::manifest::MAX_ENTRIES as u64;

pub(super) struct Copier<W: Write> {
    pub(super) builder: tar::Builder<W>,
    pub(super) manifest: Option<ManifestWriter<std::io::BufWriter<std::fs::File>>>,
    pub(super) exclude: Vec<Vec<String>>,
    pub(super) owner: Option<(u32, u32)>,
    pub(super) stats: CopyStats,
    pub(super) root_path: String,
    /// Raw bytes of each component of the current path.
    pub(super) raw_stack: Vec<Vec<u8>>,
}

impl<W: Write> Copier<W> {
    fn unreadable(&self, rel: &[String], source: io::Error) -> WorkspaceError {
        WorkspaceError::Unreadable {
            path: format!("{}/{}", self.root_path, rel.join("/")),
            source,
        }
    }

    pub(super) fn walk(
        &mut self,
        dir: BorrowedFd<'_>,
        rel: &mut Vec<String>,
    ) -> Result<(), WorkspaceError> {
        let mut names: Vec<Vec<u8>> = Vec::new();
        let mut reader = rustix::fs::Dir::read_from(dir)
            .map_err(|e| self.unreadable(rel, hostfs::errno_io(e)))?;
        while let Some(entry) = reader.read() {
            let entry = entry.map_err(|e| self.unreadable(rel, hostfs::errno_io(e)))?;
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." {
                names.push(name.to_vec());
            }
        }
        names.sort();
        for name in names {
            let os = OsStr::from_bytes(&name);
            rel.push(String::from_utf8_lossy(&name).into_owned());
            self.raw_stack.push(name.clone());
            let result = self.entry(dir, os, rel);
            self.raw_stack.pop();
            rel.pop();
            result?;
        }
        Ok(())
    }

    fn entry(
        &mut self,
        dir: BorrowedFd<'_>,
        os: &OsStr,
        rel: &mut Vec<String>,
    ) -> Result<(), WorkspaceError> {
        if excluded(&self.exclude, rel) {
            return Ok(());
        }
        if self.stats.files + self.stats.others >= MAX_ENTRIES {
            return Err(WorkspaceError::TooLarge {
                entries: MAX_ENTRIES,
            });
        }
        // The archive name: the raw bytes of every component (a name that
        // is not UTF-8 is copied as it is).
        let path = self.raw_stack.join(&b'/');
        let Some(look) = hostfs::stat_at(dir, os).map_err(|e| self.unreadable(rel, e))? else {
            return Ok(()); // gone since the listing
        };
        match look.kind {
            Kind::Dir => {
                let fd = match hostfs::open_dir_nofollow(dir, os) {
                    Ok(fd) => fd,
                    // Swapped for something else since the look: not followed.
                    Err(Errno::NOENT | Errno::LOOP | Errno::NOTDIR) => return Ok(()),
                    Err(e) => return Err(self.unreadable(rel, hostfs::errno_io(e))),
                };
                let st = HostStat::of(
                    &rustix::fs::fstat(&fd)
                        .map_err(|e| self.unreadable(rel, hostfs::errno_io(e)))?,
                );
                self.header(&path, Kind::Dir, &st, None)?;
                self.record(&path, &st, None)?;
                self.stats.others += 1;
                self.walk(fd.as_fd(), rel)
            }
            Kind::File => {
                let fd = match rustix::fs::openat(
                    dir,
                    os,
                    OFlags::RDONLY
                        | OFlags::NOFOLLOW
                        | OFlags::NONBLOCK
                        | OFlags::NOCTTY
                        | OFlags::CLOEXEC,
                    Mode::empty(),
                ) {
                    Ok(fd) => fd,
                    Err(Errno::NOENT | Errno::LOOP) => return Ok(()),
                    Err(e) => return Err(self.unreadable(rel, hostfs::errno_io(e))),
                };
                let st = HostStat::of(
                    &rustix::fs::fstat(&fd)
                        .map_err(|e| self.unreadable(rel, hostfs::errno_io(e)))?,
                );
                if st.kind != Kind::File {
                    // A fifo or device swapped in since the look.
                    self.stats.skipped += 1;
                    return Ok(());
                }
                self.file(&path, &st, fd, rel)?;
                self.record(&path, &st, None)
            }
            Kind::Symlink => {
                let target = match rustix::fs::readlinkat(dir, os, Vec::new()) {
                    Ok(t) => t.into_bytes(),
                    Err(Errno::NOENT | Errno::INVAL) => return Ok(()),
                    Err(e) => return Err(self.unreadable(rel, hostfs::errno_io(e))),
                };
                self.header(&path, Kind::Symlink, &look, Some(&target))?;
                self.record(&path, &look, Some(&target))?;
                self.stats.others += 1;
                Ok(())
            }
            Kind::Other => {
                self.stats.skipped += 1;
                Ok(())
            }
        }
    }

    fn file(
        &mut self,
        path: &[u8],
        st: &HostStat,
        fd: OwnedFd,
        rel: &[String],
    ) -> Result<(), WorkspaceError> {
        let mut header = self.base_header(tar::EntryType::Regular, st);
        header.set_size(st.size);
        let mut data = Exact {
            inner: std::fs::File::from(fd),
            left: st.size,
            error: None,
        };
        self.builder
            .append_data(&mut header, Path::new(OsStr::from_bytes(path)), &mut data)
            .map_err(|source| WorkspaceError::Stream { source })?;
        if let Some(source) = data.error {
            return Err(self.unreadable(rel, source));
        }
        self.stats.files += 1;
        self.stats.bytes += st.size;
        Ok(())
    }

    fn base_header(&self, kind: tar::EntryType, st: &HostStat) -> tar::Header {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(kind);
        header.set_mode(st.perm & 0o777);
        let (uid, gid) = self.owner.unwrap_or((st.uid, st.gid));
        header.set_uid(u64::from(uid));
        header.set_gid(u64::from(gid));
        header.set_mtime(u64::try_from(st.mtime.0).unwrap_or(0));
        header.set_size(0);
        header
    }

    fn header(
        &mut self,
        path: &[u8],
        kind: Kind,
        st: &HostStat,
        link: Option<&[u8]>,
    ) -> Result<(), WorkspaceError> {
        let name = Path::new(OsStr::from_bytes(path));
        let stream = |source| WorkspaceError::Stream { source };
        match kind {
            Kind::Dir => {
                let mut header = self.base_header(tar::EntryType::Directory, st);
                let mut dir_name = path.to_vec();
                dir_name.push(b'/');
                self.builder
                    .append_data(
                        &mut header,
                        Path::new(OsStr::from_bytes(&dir_name)),
                        io::empty(),
                    )
                    .map_err(stream)
            }
            Kind::Symlink => {
                let mut header = self.base_header(tar::EntryType::Symlink, st);
                let target = Path::new(OsStr::from_bytes(link.unwrap_or_default()));
                self.builder
                    .append_link(&mut header, name, target)
                    .map_err(stream)
            }
            Kind::File | Kind::Other => Ok(()),
        }
    }

    fn record(
        &mut self,
        path: &[u8],
        st: &HostStat,
        link: Option<&[u8]>,
    ) -> Result<(), WorkspaceError> {
        if let Some(m) = self.manifest.as_mut() {
            m.entry(path, st, link)
                .map_err(|source| WorkspaceError::Manifest { source })?;
        }
        Ok(())
    }
}

/// Exactly `left` bytes of a file whose size was taken from its
/// descriptor: a file that shrank while it was read is padded (the
/// archive stays well-formed; the error says so), one that grew is cut.
struct Exact {
    inner: std::fs::File,
    left: u64,
    error: Option<io::Error>,
}

impl Read for Exact {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            return Ok(0);
        }
        let want = usize::try_from(self.left)
            .unwrap_or(usize::MAX)
            .min(buf.len());
        let n = if self.error.is_some() {
            0
        } else {
            match self.inner.read(&mut buf[..want]) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => return self.read(buf),
                Err(e) => {
                    self.error = Some(e);
                    0
                }
            }
        };
        if n == 0 {
            if self.error.is_none() {
                self.error = Some(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the file shrank while it was copied",
                ));
            }
            buf[..want].fill(0);
            self.left -= want as u64;
            return Ok(want);
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// Start the copy of `root` (already opened and checked): the stream, and
/// the task writing it, whose result says why a stream ended early.
pub(super) fn start(
    root: OwnedFd,
    root_path: String,
    exclude: Vec<Vec<String>>,
    manifest: Option<std::fs::File>,
    owner: Option<(u32, u32)>,
) -> (ByteStream, JoinHandle<Result<CopyStats, WorkspaceError>>) {
    let (reader, writer) = tokio::io::duplex(256 * 1024);
    let task = tokio::task::spawn_blocking(move || {
        let manifest = match manifest {
            Some(f) => Some(
                ManifestWriter::new(std::io::BufWriter::new(f))
                    .map_err(|source| WorkspaceError::Manifest { source })?,
            ),
            None => None,
        };
        let mut copier = Copier {
            builder: tar::Builder::new(SyncIoBridge::new(writer)),
            manifest,
            exclude,
            owner,
            stats: CopyStats::default(),
            root_path,
            raw_stack: Vec::new(),
        };
        copier.walk(root.as_fd(), &mut Vec::new())?;
        if let Some(m) = copier.manifest.take() {
            m.finish()
                .map_err(|source| WorkspaceError::Manifest { source })?;
        }
        let stats = copier.stats.clone();
        let mut out = copier
            .builder
            .into_inner()
            .map_err(|source| WorkspaceError::Stream { source })?;
        out.shutdown()
            .map_err(|source| WorkspaceError::Stream { source })?;
        Ok(stats)
    });
    (Box::pin(ReaderStream::new(reader)), task)
}
