//! The run file area on disk: `runs/<RUN_ID>/files/<path>`, staged through
//! `runs/<RUN_ID>/tmp/`.
//!
//! A put is metered while it streams into a temp file; over the cap the temp
//! file is removed and nothing is kept. Under the cap the temp file is
//! fsynced, renamed over the final name and the parent directory fsynced, so
//! a reader never sees a partial file and a crash leaves either the old or
//! the new content. The path is a validated [`RunFilePath`]; on top of that,
//! every directory on the way is checked to be a real directory (not a
//! symlink planted by someone else), so nothing is written outside the area.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use futures_util::StreamExt;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use iterion_core::id::RunId;
use iterion_core::store::RunFilePath;
use iterion_core::{ByteStream, StoreError};

/// Mode of every directory the store creates: the store holds other runs'
/// outputs and their sha256 records, so no other local user reads it
/// (issue 19 item 3).
pub(crate) const DIR_MODE: u32 = 0o700;
/// Mode of every file the store creates (database, run files).
pub(crate) const FILE_MODE: u32 = 0o600;

/// Create one directory, private to its owner.
pub(crate) fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().mode(DIR_MODE).create(dir)
}

/// Create a directory and its missing parents, each private to its owner
/// (existing ones are left as they are).
pub(crate) fn create_private_dir_all(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)
}

/// Create `path` empty with [`FILE_MODE`] unless it exists, so SQLite (which
/// gives its `-wal` and `-shm` files the database file's mode) never makes
/// a world-readable database.
pub(crate) fn ensure_private_file(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

fn io(operation: impl Into<String>) -> impl FnOnce(std::io::Error) -> StoreError {
    let operation = operation.into();
    move |source| StoreError::Io { operation, source }
}

/// Refuse a database file that is not SQLite before SQLite touches it (an
/// empty or missing file is a fresh store).
pub fn check_sqlite_header(db: &Path, location: &str) -> Result<(), StoreError> {
    use std::io::Read;
    let mut f = match std::fs::File::open(db) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(format!("open {}", db.display()))(e)),
    };
    let mut head = [0u8; 16];
    let mut n = 0;
    while n < head.len() {
        match f.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) => return Err(io(format!("read {}", db.display()))(e)),
        }
    }
    if n == 0 {
        return Ok(());
    }
    if head[..n] != b"SQLite format 3\0"[..n] || n < head.len() {
        return Err(StoreError::Corrupt {
            location: location.to_owned(),
            reason: format!("{} is not an SQLite database", db.display()),
        });
    }
    Ok(())
}

/// One run's file area.
pub struct RunArea {
    store: PathBuf,
    files: PathBuf,
    tmp: PathBuf,
}

/// Create `store/rel` component by component, refusing any component that
/// exists as something other than a real directory (a planted symlink would
/// otherwise carry every write out of the store).
fn real_dir_under(store: &Path, rel: &Path) -> Result<(), StoreError> {
    let mut dir = store.to_path_buf();
    for part in rel.components() {
        dir.push(part);
        match std::fs::symlink_metadata(&dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(StoreError::Corrupt {
                    location: dir.display().to_string(),
                    reason: "expected a directory of the run file area, found something else"
                        .to_owned(),
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => match create_private_dir(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io(format!("create {}", dir.display()))(e)),
            },
            Err(e) => return Err(io(format!("stat {}", dir.display()))(e)),
        }
    }
    Ok(())
}

/// Result of streaming a put into the staging area.
pub enum Staged {
    /// Under the cap, durable in a temp file.
    Ready(StagedFile),
    /// Over the cap; the temp file is gone.
    Over {
        /// Bytes read before stopping.
        read: u64,
    },
}

/// A fully written, fsynced temp file.
pub struct StagedFile {
    tmp: PathBuf,
    pub size: u64,
    pub sha256: String,
}

impl Drop for StagedFile {
    fn drop(&mut self) {
        // After a successful commit the temp name no longer exists; on any
        // failure path this removes the orphan.
        let _ = std::fs::remove_file(&self.tmp);
    }
}

impl RunArea {
    pub fn new(store_dir: &Path, run: &RunId) -> Self {
        let base = store_dir.join("runs").join(run.as_str());
        RunArea {
            store: store_dir.to_owned(),
            files: base.join("files"),
            tmp: base.join("tmp"),
        }
    }

    /// The run's attachment area, `runs/<RUN_ID>/attachments/<NAME>`: the
    /// same staging, commit and open rules as the run files, beside them.
    pub fn attachments(store_dir: &Path, run: &RunId) -> Self {
        let base = store_dir.join("runs").join(run.as_str());
        RunArea {
            store: store_dir.to_owned(),
            files: base.join("attachments"),
            tmp: base.join("tmp"),
        }
    }

    /// Stream `content` into a temp file, stopping at `cap`.
    pub async fn stage(&self, mut content: ByteStream, cap: u64) -> Result<Staged, StoreError> {
        let store = self.store.clone();
        let rel = self
            .tmp
            .strip_prefix(&self.store)
            .map(Path::to_path_buf)
            .unwrap_or_default();
        tokio::task::spawn_blocking(move || real_dir_under(&store, &rel))
            .await
            .map_err(|e| StoreError::Backend {
                operation: "create run file area",
                source: Box::new(e),
            })??;
        let name: [u8; 12] = rand::random();
        let tmp = self.tmp.join(format!("{}.part", hex::encode(name)));
        let mut file = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(FILE_MODE)
            .open(&tmp)
            .await
            .map_err(io(format!("create {}", tmp.display())))?;
        let mut staged = StagedFile {
            tmp,
            size: 0,
            sha256: String::new(),
        };
        let mut hasher = Sha256::new();
        let mut read: u64 = 0;
        while let Some(chunk) = content.next().await {
            let chunk: Bytes = chunk.map_err(io("read run-file content"))?;
            read += chunk.len() as u64;
            if read > cap {
                // `staged` drops here and removes the partial temp file.
                return Ok(Staged::Over { read });
            }
            hasher.update(&chunk);
            file.write_all(&chunk)
                .await
                .map_err(io(format!("write {}", staged.tmp.display())))?;
        }
        file.flush().await.map_err(io("flush run file"))?;
        file.sync_all().await.map_err(io("fsync run file"))?;
        staged.size = read;
        staged.sha256 = hex::encode(hasher.finalize());
        Ok(Staged::Ready(staged))
    }

    /// Rename a staged file to its final path, creating (real) parent
    /// directories, and fsync the parent so the rename is durable.
    pub async fn commit(
        &self,
        mut staged: StagedFile,
        path: &RunFilePath,
    ) -> Result<(), StoreError> {
        let files = self.files.clone();
        let store = self.store.clone();
        let path = path.clone();
        let tmp = staged.tmp.clone();
        let res = tokio::task::spawn_blocking(move || {
            let rel = files
                .strip_prefix(&store)
                .map(Path::to_path_buf)
                .unwrap_or_default();
            real_dir_under(&store, &rel)?;
            commit_blocking(&files, &tmp, &path)
        })
        .await
        .map_err(|e| StoreError::Backend {
            operation: "commit run file",
            source: Box::new(e),
        })?;
        if res.is_ok() {
            // Renamed away: nothing left for Drop to remove.
            staged.tmp = PathBuf::new();
        }
        res
    }

    /// Open a stored file for streaming.
    pub async fn open(&self, path: &RunFilePath) -> Result<ByteStream, StoreError> {
        let full = self.files.join(path.as_str());
        let meta = tokio::fs::symlink_metadata(&full)
            .await
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => StoreError::FileNotFound(path.to_string()),
                _ => StoreError::Io {
                    operation: format!("stat {}", full.display()),
                    source: e,
                },
            })?;
        if !meta.is_file() {
            return Err(StoreError::UnsafePath {
                path: path.to_string(),
                reason: "not a regular file in the run file area",
            });
        }
        let file = tokio::fs::File::open(&full)
            .await
            .map_err(io(format!("open {}", full.display())))?;
        Ok(Box::pin(tokio_util::io::ReaderStream::new(file)))
    }
}

fn fsync_dir(dir: &Path) -> Result<(), StoreError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(format!("fsync {}", dir.display())))
}

fn commit_blocking(files: &Path, tmp: &Path, path: &RunFilePath) -> Result<(), StoreError> {
    let unsafe_path = |reason| StoreError::UnsafePath {
        path: path.to_string(),
        reason,
    };
    let parts: Vec<&str> = path.as_str().split('/').collect();
    let (name, dirs) = match parts.split_last() {
        Some(x) => x,
        None => return Err(unsafe_path("names no file")),
    };
    let mut dir = files.to_path_buf();
    for part in dirs {
        let next = dir.join(part);
        match std::fs::symlink_metadata(&next) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(unsafe_path("a parent component is not a directory")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                create_private_dir(&next).map_err(io(format!("create {}", next.display())))?;
                fsync_dir(&dir)?;
            }
            Err(e) => return Err(io(format!("stat {}", next.display()))(e)),
        }
        dir = next;
    }
    let target = dir.join(name);
    match std::fs::symlink_metadata(&target) {
        Ok(m) if m.is_file() => {}
        Ok(_) => return Err(unsafe_path("the target exists and is not a regular file")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(format!("stat {}", target.display()))(e)),
    }
    std::fs::rename(tmp, &target).map_err(io(format!("rename to {}", target.display())))?;
    fsync_dir(&dir)
}
