//! The workspace copy into a pod (facts §5.3 [I]: a pod has no host
//! filesystem, so the workspace is an emptyDir filled by a tar stream over
//! exec at start). The archive is written by a blocking task into a pipe
//! and streamed as it is produced; nothing is buffered whole.
//!
//! What is copied: the host workspace as it is — symlinks as symlinks
//! (never followed, so a link cannot pull a host file outside the workspace
//! into the pod), regular files and directories; sockets, fifos and devices
//! are skipped. The run store's default directory (`.iterion` at the
//! workspace root) is left out: it holds other runs' records and this
//! run's host-side state, none of which the sandbox may read.

use std::io;
use std::path::{Path, PathBuf};

use iterion_core::ByteStream;
use tokio::task::JoinHandle;
use tokio_util::io::{ReaderStream, SyncIoBridge};

/// Entries at the workspace root never copied in.
pub(crate) const EXCLUDED_AT_ROOT: &[&str] = &[".iterion"];

/// A tar stream of `root`, and the task writing it (its error, if any,
/// says why the stream ended early).
pub(crate) fn archive(root: PathBuf) -> (ByteStream, JoinHandle<io::Result<()>>) {
    let (reader, writer) = tokio::io::duplex(64 * 1024);
    let task = tokio::task::spawn_blocking(move || {
        let mut builder = tar::Builder::new(SyncIoBridge::new(writer));
        builder.follow_symlinks(false);
        append_dir(&mut builder, &root, Path::new(""), true)?;
        builder.into_inner()?.shutdown()
    });
    (Box::pin(ReaderStream::new(reader)), task)
}

fn append_dir<W: io::Write>(
    builder: &mut tar::Builder<W>,
    dir: &Path,
    rel: &Path,
    at_root: bool,
) -> io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<io::Result<_>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name();
        if at_root && EXCLUDED_AT_ROOT.iter().any(|x| name == *x) {
            continue;
        }
        let path = entry.path();
        let rel = rel.join(&name);
        let kind = entry.file_type()?;
        if kind.is_dir() {
            builder.append_path_with_name(&path, &rel)?;
            append_dir(builder, &path, &rel, false)?;
        } else if kind.is_file() || kind.is_symlink() {
            builder.append_path_with_name(&path, &rel)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;
    use std::io::Read;

    #[tokio::test]
    async fn archives_files_links_and_skips_the_store() {
        let dir = tempfile::tempdir().expect("tmp");
        let root = dir.path();
        std::fs::create_dir_all(root.join("src/deep")).expect("mkdir");
        std::fs::write(root.join("src/deep/a.txt"), b"alpha").expect("write");
        std::fs::create_dir_all(root.join(".iterion")).expect("mkdir");
        std::fs::write(root.join(".iterion/store.db"), b"secret").expect("write");
        std::os::unix::fs::symlink("/etc/passwd", root.join("link")).expect("symlink");
        let (mut stream, task) = archive(root.to_path_buf());
        let mut bytes = Vec::new();
        while let Some(c) = stream.next().await {
            bytes.extend_from_slice(&c.expect("chunk"));
        }
        task.await.expect("join").expect("archive");
        let mut names = Vec::new();
        let mut ar = tar::Archive::new(bytes.as_slice());
        for e in ar.entries().expect("entries") {
            let mut e = e.expect("entry");
            let name = e.path().expect("path").display().to_string();
            if name == "src/deep/a.txt" {
                let mut s = String::new();
                e.read_to_string(&mut s).expect("read");
                assert_eq!(s, "alpha");
            }
            if name == "link" {
                assert!(e.header().entry_type().is_symlink(), "never followed");
            }
            names.push(name);
        }
        assert!(names.contains(&"src/deep/a.txt".to_owned()), "{names:?}");
        assert!(names.contains(&"link".to_owned()));
        assert!(
            !names.iter().any(|n| n.starts_with(".iterion")),
            "{names:?}"
        );
    }
}
