//! Build context handling: containment against the workspace and a tar of
//! the context that stores symlinks as symlinks (never followed out).

use std::path::{Path, PathBuf};

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

/// A tarred context plus the Dockerfile path inside it.
pub(crate) struct ContextTar {
    pub(crate) tar: Vec<u8>,
    pub(crate) dockerfile: String,
}

/// Re-check that context and Dockerfile resolve (symlinks included) inside
/// the workspace, then tar the context without following any symlink.
pub(crate) fn tar_context(
    build: &ResolvedBuild,
    workspace: &str,
) -> Result<ContextTar, DriverError> {
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
    let mut builder = tar::Builder::new(Vec::new());
    builder.follow_symlinks(false);
    append_dir(&mut builder, &context, Path::new(""))?;
    let inside = dockerfile
        .strip_prefix(&context)
        .ok()
        .and_then(|p| p.to_str())
        .map(str::to_owned);
    let dockerfile_name = match inside {
        Some(rel) => rel,
        None => {
            let data = std::fs::read(&dockerfile).map_err(|source| DriverError::Io {
                operation: format!("read dockerfile {}", dockerfile.display()),
                source,
            })?;
            let mut header = tar::Header::new_gnu();
            header.set_size(data.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            builder
                .append_data(&mut header, OUTSIDE_DOCKERFILE, data.as_slice())
                .map_err(|source| tar_err(&dockerfile, source))?;
            OUTSIDE_DOCKERFILE.to_owned()
        }
    };
    let tar = builder
        .into_inner()
        .map_err(|source| tar_err(&context, source))?;
    Ok(ContextTar {
        tar,
        dockerfile: dockerfile_name,
    })
}

fn tar_err(path: &Path, source: std::io::Error) -> DriverError {
    DriverError::Io {
        operation: format!("tar build context entry {}", path.display()),
        source,
    }
}

fn append_dir(
    builder: &mut tar::Builder<Vec<u8>>,
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
        let out = tar_context(&build, &ws.path().display().to_string()).expect("tar");
        assert_eq!(out.dockerfile, "Dockerfile");
        let mut archive = tar::Archive::new(out.tar.as_slice());
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
            tar_context(&escaping, &ws.path().display().to_string()),
            Err(DriverError::SpecRefused { .. })
        ));
        std::os::unix::fs::symlink(outside.path(), ws.path().join("ctx2")).expect("ln");
        let via_link = ResolvedBuild {
            context: ws.path().join("ctx2").display().to_string(),
            ..build
        };
        assert!(matches!(
            tar_context(&via_link, &ws.path().display().to_string()),
            Err(DriverError::SpecRefused { .. })
        ));
    }
}
