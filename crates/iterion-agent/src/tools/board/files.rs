//! The board's files, opened only beneath its root and never through a
//! link (issue 31 item 2). The root is resolved once, then every later
//! open of it refuses a symbolic link anywhere on its path, and every file
//! under it is opened relative to the root's descriptor with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`:
//! a link planted as `issues` or `events.jsonl` (by a sandbox that can
//! write there, or anyone) fails the open instead of leading to a host
//! file. Reads are regular files only (a FIFO would block: opened
//! non-blocking, refused by its type) and bounded; writes go through a
//! fresh temporary file renamed into place (a rename replaces a link, it
//! never writes through it). Linux 5.6 or later (openat2).
//!
//! It knows nothing of issues: the caller names the files.

use std::io::{Read as _, Write as _};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};

/// Every open under the root.
fn beneath() -> ResolveFlags {
    ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS
}

fn io(e: rustix::io::Errno) -> std::io::Error {
    match e {
        rustix::io::Errno::NOSYS => std::io::Error::other(
            "the board needs openat2 (Linux 5.6 or later) to open its files safely",
        ),
        rustix::io::Errno::LOOP | rustix::io::Errno::XDEV => std::io::Error::other(
            "a symbolic link or a path leaving the board's directory was refused",
        ),
        e => std::io::Error::from(e),
    }
}

/// The board's root directory, open.
#[derive(Debug)]
pub(super) struct Root {
    fd: OwnedFd,
}

/// Make `path` (and what leads to it, owner-only) and give its real path:
/// the name every later [`Root::open`] is held to.
pub(super) fn create(path: &Path) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)?;
    path.canonicalize()
}

impl Root {
    /// Open the root at its real path; a link anywhere on it now is
    /// refused.
    pub(super) fn open(real: &Path) -> std::io::Result<Self> {
        let fd = rustix::fs::openat2(
            rustix::fs::CWD,
            real,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        )
        .map_err(io)?;
        Ok(Self { fd })
    }

    /// A directory under the root as another root (made owner-only when
    /// `create` and absent).
    pub(super) fn dir(&self, name: &str, create: bool) -> std::io::Result<Option<Root>> {
        if create {
            match rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(0o700)) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(io(e)),
            }
        }
        match rustix::fs::openat2(
            &self.fd,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            beneath(),
        ) {
            Ok(fd) => Ok(Some(Root { fd })),
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(io(e)),
        }
    }

    /// A regular file's bytes, at most `cap` of them (more is an error);
    /// `None` when absent.
    pub(super) fn read(&self, name: &str, cap: usize) -> std::io::Result<Option<Vec<u8>>> {
        let fd = match rustix::fs::openat2(
            &self.fd,
            name,
            OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY,
            Mode::empty(),
            beneath(),
        ) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(e) => return Err(io(e)),
        };
        regular(&fd)?;
        let mut bytes = Vec::new();
        std::fs::File::from(fd)
            .take(cap as u64 + 1)
            .read_to_end(&mut bytes)?;
        if bytes.len() > cap {
            return Err(std::io::Error::other(format!(
                "{name} is larger than {cap} bytes"
            )));
        }
        Ok(Some(bytes))
    }

    /// Replace (or create) `name` with `bytes`: a fresh owner-only file
    /// renamed into place.
    pub(super) fn write(&self, name: &str, bytes: &[u8]) -> std::io::Result<()> {
        let tmp = format!(".{name}.{}.tmp", random());
        let fd = rustix::fs::openat2(
            &self.fd,
            tmp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
            beneath(),
        )
        .map_err(io)?;
        let written = std::fs::File::from(fd).write_all(bytes).and_then(|()| {
            rustix::fs::renameat(&self.fd, tmp.as_str(), &self.fd, name).map_err(io)
        });
        if written.is_err() {
            let _ = rustix::fs::unlinkat(&self.fd, tmp.as_str(), AtFlags::empty());
        }
        written
    }

    /// Append `line` to the regular file `name` (made owner-only when
    /// absent).
    pub(super) fn append(&self, name: &str, line: &[u8]) -> std::io::Result<()> {
        let fd = rustix::fs::openat2(
            &self.fd,
            name,
            OFlags::WRONLY
                | OFlags::APPEND
                | OFlags::CREATE
                | OFlags::CLOEXEC
                | OFlags::NONBLOCK
                | OFlags::NOCTTY,
            Mode::from_raw_mode(0o600),
            beneath(),
        )
        .map_err(io)?;
        regular(&fd)?;
        std::fs::File::from(fd).write_all(line)
    }

    /// Whether the entry `name` (one component) exists, link or not.
    pub(super) fn exists(&self, name: &str) -> std::io::Result<bool> {
        if name.contains('/') {
            return Err(std::io::Error::other("one name, not a path"));
        }
        match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(_) => Ok(true),
            Err(rustix::io::Errno::NOENT) => Ok(false),
            Err(e) => Err(io(e)),
        }
    }

    /// The names in this directory (not `.`/`..`).
    pub(super) fn names(&self) -> std::io::Result<Vec<String>> {
        let mut out = Vec::new();
        for entry in rustix::fs::Dir::read_from(&self.fd).map_err(io)? {
            let entry = entry.map_err(io)?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name != "." && name != ".." {
                out.push(name);
            }
        }
        Ok(out)
    }
}

/// Only a regular file is read or appended to.
fn regular(fd: &impl AsFd) -> std::io::Result<()> {
    let st = rustix::fs::fstat(fd).map_err(io)?;
    if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile {
        Ok(())
    } else {
        Err(std::io::Error::other("not a regular file"))
    }
}

fn random() -> String {
    use rand::RngCore as _;
    let mut b = [0u8; 8];
    rand::rng().fill_bytes(&mut b);
    hex::encode(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_fail_every_open_and_files_stay_beneath() {
        let tmp = tempfile::tempdir().expect("tmp");
        let host = tmp.path().join("host");
        std::fs::create_dir(&host).expect("mkdir");
        std::fs::write(host.join("secret.json"), "{\"id\":\"native:ab\"}").expect("w");
        std::fs::write(host.join("log"), "host\n").expect("w");
        let real = create(&tmp.path().join("board")).expect("root");
        let root = Root::open(&real).expect("open");
        std::os::unix::fs::symlink(&host, real.join("issues")).expect("ln");
        std::os::unix::fs::symlink(host.join("log"), real.join("events.jsonl")).expect("ln");
        std::os::unix::fs::symlink(host.join("secret.json"), real.join("board.json")).expect("ln");
        assert!(root.dir("issues", false).is_err(), "a linked directory");
        assert!(root.dir("issues", true).is_err(), "not made through it");
        assert!(root.read("board.json", 1024).is_err(), "a linked file");
        assert!(root.append("events.jsonl", b"x\n").is_err());
        assert!(root.read("../host/secret.json", 1024).is_err(), "beneath");
        assert!(root.read("/etc/passwd", 1024).is_err(), "beneath");
        // A write replaces the link itself, never its target.
        root.write("board.json", b"{}").expect("write");
        assert!(!real.join("board.json").is_symlink());
        assert_eq!(
            std::fs::read_to_string(host.join("secret.json")).expect("r"),
            "{\"id\":\"native:ab\"}"
        );
        assert_eq!(
            std::fs::read_to_string(host.join("log")).expect("r"),
            "host\n"
        );
        assert_eq!(
            std::fs::read_dir(&host).expect("ls").count(),
            2,
            "nothing made in the host dir"
        );
        // The root itself swapped for a link after it was resolved.
        let moved = tmp.path().join("moved");
        std::fs::rename(&real, &moved).expect("mv");
        std::os::unix::fs::symlink(&host, &real).expect("ln");
        assert!(Root::open(&real).is_err(), "the root is a link now");
    }

    #[test]
    fn reads_are_bounded_regular_files() {
        let tmp = tempfile::tempdir().expect("tmp");
        let real = create(&tmp.path().join("b")).expect("root");
        let root = Root::open(&real).expect("open");
        assert_eq!(root.read("absent", 10).expect("absent"), None);
        root.write("f", b"0123456789").expect("write");
        assert_eq!(
            root.read("f", 10).expect("fits"),
            Some(b"0123456789".to_vec())
        );
        assert!(root.read("f", 9).is_err(), "over the cap");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            real.join("fifo"),
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .expect("mkfifo");
        assert!(root.read("fifo", 10).is_err(), "no block on a FIFO");
        assert!(root.append("fifo", b"x").is_err());
        let sub = root.dir("d", true).expect("mkdir").expect("made");
        sub.append("log", b"a\n").expect("append");
        sub.append("log", b"b\n").expect("append");
        assert_eq!(sub.read("log", 10).expect("read"), Some(b"a\nb\n".to_vec()));
        assert_eq!(sub.names().expect("ls"), vec!["log".to_owned()]);
    }
}
