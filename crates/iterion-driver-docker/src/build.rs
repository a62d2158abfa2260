//! Build context handling: containment against the workspace and a tar of
//! the context that stores symlinks as symlinks (never followed out).

use std::io::Write;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use iterion_core::DriverError;
use iterion_core::plan::ResolvedBuild;

/// Name the Dockerfile gets inside the tar when it lives outside the context.
const OUTSIDE_DOCKERFILE: &str = ".iterion.Dockerfile";

/// The tag of a run's built image (facts §6.8).
pub(crate) fn build_tag(run_id: &str) -> String {
    let mut tag: String = run_id
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c == '_' { '-' } else { c })
        .collect();
    tag.truncate(128);
    format!("iterion-sandbox-build:{tag}")
}

fn refused(reason: String) -> DriverError {
    DriverError::SpecRefused { reason }
}

fn canonical(path: &str, what: &str) -> Result<PathBuf, DriverError> {
    std::fs::canonicalize(path).map_err(|source| DriverError::Io {
        operation: format!("resolve build {what} {path}"),
        source,
    })
}

/// A build context checked against the workspace, ready to be tarred.
#[derive(Debug, Clone)]
pub(crate) struct CheckedContext {
    context: PathBuf,
    dockerfile: PathBuf,
    /// The Dockerfile's path inside the tar.
    pub(crate) dockerfile_name: String,
}

/// Re-check that context and Dockerfile resolve (symlinks included) inside
/// the workspace (facts §6.8; policy already checked the spelling).
pub(crate) fn check_context(
    build: &ResolvedBuild,
    workspace: &str,
) -> Result<CheckedContext, DriverError> {
    let ws = canonical(workspace, "workspace")?;
    let context = canonical(&build.context, "context")?;
    let dockerfile = canonical(&build.dockerfile, "dockerfile")?;
    if !context.starts_with(&ws) {
        return Err(refused(format!(
            "build context {} resolves outside the workspace {}",
            build.context, workspace
        )));
    }
    if !dockerfile.starts_with(&ws) {
        return Err(refused(format!(
            "dockerfile {} resolves outside the workspace {}",
            build.dockerfile, workspace
        )));
    }
    if !context.is_dir() {
        return Err(refused(format!(
            "build context {} is not a directory",
            build.context
        )));
    }
    let dockerfile_name = dockerfile
        .strip_prefix(&context)
        .ok()
        .and_then(|p| p.to_str())
        .map_or_else(|| OUTSIDE_DOCKERFILE.to_owned(), str::to_owned);
    Ok(CheckedContext {
        context,
        dockerfile,
        dockerfile_name,
    })
}

/// Tar a checked context into `out` without following any symlink.
pub(crate) fn write_context<W: Write>(checked: &CheckedContext, out: W) -> Result<(), DriverError> {
    let mut builder = tar::Builder::new(out);
    builder.follow_symlinks(false);
    append_dir(&mut builder, &checked.context, Path::new(""))?;
    if checked.dockerfile_name == OUTSIDE_DOCKERFILE {
        let data = std::fs::read(&checked.dockerfile).map_err(|source| DriverError::Io {
            operation: format!("read dockerfile {}", checked.dockerfile.display()),
            source,
        })?;
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        builder
            .append_data(&mut header, OUTSIDE_DOCKERFILE, data.as_slice())
            .map_err(|source| tar_err(&checked.dockerfile, source))?;
    }
    builder
        .into_inner()
        .map_err(|source| tar_err(&checked.context, source))?;
    Ok(())
}

/// A `Write` that hands 256 KiB chunks to the request body, so a large
/// context is streamed, never held whole.
pub(crate) struct ChannelWriter {
    tx: tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
    buf: Vec<u8>,
}

const CHUNK: usize = 256 * 1024;

impl ChannelWriter {
    pub(crate) fn new(tx: tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>) -> Self {
        Self {
            tx,
            buf: Vec::with_capacity(CHUNK),
        }
    }

    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK)));
        self.tx
            .blocking_send(Ok(chunk))
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "build request ended"))
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= CHUNK {
            self.send()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}

impl Drop for ChannelWriter {
    fn drop(&mut self) {
        let _ = self.send();
    }
}

fn tar_err(path: &Path, source: std::io::Error) -> DriverError {
    DriverError::Io {
        operation: format!("tar build context entry {}", path.display()),
        source,
    }
}

fn append_dir<W: Write>(
    builder: &mut tar::Builder<W>,
    dir: &Path,
    rel: &Path,
) -> Result<(), DriverError> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(|source| tar_err(dir, source))?
        .collect::<Result<_, _>>()
        .map_err(|source| tar_err(dir, source))?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let name = rel.join(entry.file_name());
        // symlink_metadata: a symlink is stored as a link, never followed.
        let meta = std::fs::symlink_metadata(&path).map_err(|source| tar_err(&path, source))?;
        if meta.is_dir() {
            builder
                .append_dir(&name, &path)
                .map_err(|source| tar_err(&path, source))?;
            append_dir(builder, &path, &name)?;
        } else if meta.is_file() || meta.file_type().is_symlink() {
            builder
                .append_path_with_name(&path, &name)
                .map_err(|source| tar_err(&path, source))?;
        }
        // Sockets, fifos and devices are skipped: a build context has no use
        // for them and reading a fifo would block.
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_is_sanitised() {
        assert_eq!(build_tag("r2026_ab"), "iterion-sandbox-build:r2026-ab");
    }

    #[test]
    fn symlinks_are_not_followed_and_escapes_refused() {
        let ws = tempfile::tempdir().expect("tmp");
        let outside = tempfile::tempdir().expect("tmp");
        std::fs::write(outside.path().join("secret"), b"s3cret").expect("w");
        let ctx = ws.path().join("ctx");
        std::fs::create_dir(&ctx).expect("mk");
        std::fs::write(ctx.join("Dockerfile"), b"FROM scratch\n").expect("w");
        std::os::unix::fs::symlink(outside.path().join("secret"), ctx.join("link")).expect("ln");
        let build = ResolvedBuild {
            dockerfile: ctx.join("Dockerfile").display().to_string(),
            context: ctx.display().to_string(),
            ..ResolvedBuild::default()
        };
        let checked = check_context(&build, &ws.path().display().to_string()).expect("check");
        assert_eq!(checked.dockerfile_name, "Dockerfile");
        let mut tar = Vec::new();
        write_context(&checked, &mut tar).expect("tar");
        let mut archive = tar::Archive::new(tar.as_slice());
        for entry in archive.entries().expect("entries") {
            let entry = entry.expect("entry");
            if entry.path().expect("p").to_str() == Some("link") {
                assert!(entry.header().entry_type().is_symlink());
            }
        }
        let escaping = ResolvedBuild {
            context: outside.path().display().to_string(),
            ..build.clone()
        };
        assert!(matches!(
            check_context(&escaping, &ws.path().display().to_string()),
            Err(DriverError::SpecRefused { .. })
        ));
        std::os::unix::fs::symlink(outside.path(), ws.path().join("ctx2")).expect("ln");
        let via_link = ResolvedBuild {
            context: ws.path().join("ctx2").display().to_string(),
            ..build
        };
        assert!(matches!(
            check_context(&via_link, &ws.path().display().to_string()),
            Err(DriverError::SpecRefused { .. })
        ));
    }
}
