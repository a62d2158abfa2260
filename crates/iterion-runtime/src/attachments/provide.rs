//! Providing a run's stored attachments to one boot (fresh or resumed):
//! each declared attachment read back from the store, checked against its
//! record, and written where the run's commands will find it:
//!
//! - on the host (no sandbox): under the run's private scratch directory;
//!   `{{attachments.x}}` is that host path;
//! - in a sandbox whose plan kept the attachments bind: into the managed
//!   per-run directory the decision bound read-only at
//!   `/run/iterion/attachments` (a bind shows what is written after the
//!   start);
//! - in a sandbox without it (a bindless engine, a copy-based driver):
//!   copied in through the archive API, root-owned and `0444`
//!   (`sandbox_attachments_copied`).
//!
//! One that cannot be provided (its bytes gone from the store, unreadable,
//! changed since stored, or the copy refused) is `run_attachment_lost`; a
//! `required: true` one fails the run with `ATTACHMENT_LOST`.

use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use futures_util::StreamExt;
use iterion_core::attachment::AttachmentRecord;
use iterion_core::plan::ATTACHMENTS_CONTAINER_DIR;
use iterion_core::store::{Failure, FileCheck};
use iterion_core::{EventKind, FailureCode, MountOrigin, RunId, RunStore, SandboxRun};
use iterion_dsl::ir;
use serde_json::{Map, Value, json};

use crate::boot::Booted;
use crate::events::Emitter;

/// Where a boot's attachments go.
enum Target {
    /// A host directory whose files the commands read at `container`
    /// (`None`: at their host path).
    Dir {
        base: PathBuf,
        container: Option<&'static str>,
    },
    /// Copied into the sandbox.
    Copy,
}

fn target(booted: &Booted) -> Target {
    match booted {
        Booted::Host { scratch_dir, .. } => Target::Dir {
            base: Path::new(scratch_dir).join("attachments"),
            container: None,
        },
        Booted::Sandbox { keep, .. } => {
            let bound = keep.plan().and_then(|plan| {
                plan.mounts
                    .iter()
                    .find(|m| m.origin == MountOrigin::Attachments && m.is_host_bind())
                    .and_then(|m| m.source.clone())
            });
            match bound {
                Some(src) => Target::Dir {
                    base: PathBuf::from(src),
                    container: Some(ATTACHMENTS_CONTAINER_DIR),
                },
                None => Target::Copy,
            }
        }
    }
}

/// Provide the run's attachments; `Ok(None)` when the workflow declares
/// none, else the template view (`name → {path, file, size, sha256,
/// mime}`) of those provided. `Err` is the run's failure.
pub(crate) async fn provide(
    store: &dyn RunStore,
    run: &RunId,
    workflow: &ir::Workflow,
    booted: &Booted,
    events: &Emitter,
) -> Result<Option<Value>, Failure> {
    if workflow.attachments.is_empty() {
        return Ok(None);
    }
    let records = store.list_attachments(run).await.map_err(|e| {
        Failure::new(
            FailureCode::StoreError,
            format!("could not list the run's attachments: {e}"),
        )
    })?;
    let lost = |name: &str, reason: String| -> Result<(), Failure> {
        let required = workflow.attachments.get(name).is_some_and(|d| d.required);
        events.emit(EventKind::RunAttachmentLost {
            name: name.to_owned(),
            required,
            reason: reason.clone(),
        });
        if required {
            return Err(Failure::new(
                FailureCode::AttachmentLost,
                format!("required attachment {name} is lost: {reason}"),
            ));
        }
        Ok(())
    };
    for (name, decl) in &workflow.attachments {
        if decl.required && !records.iter().any(|r| r.name.as_str() == name) {
            lost(name, "it is not in the run store".to_owned())?;
        }
    }
    let declared: Vec<&AttachmentRecord> = records
        .iter()
        .filter(|r| workflow.attachments.contains_key(r.name.as_str()))
        .collect();
    let target = target(booted);
    // A copy is written to a private staging dir first, then archived.
    let staging = match &target {
        Target::Copy => Some(tempfile::tempdir().map_err(|e| {
            Failure::new(
                FailureCode::StoreError,
                format!("could not stage the attachments: {e}"),
            )
        })?),
        Target::Dir { .. } => None,
    };
    let base = match (&target, &staging) {
        (Target::Dir { base, .. }, _) => base.clone(),
        (Target::Copy, Some(dir)) => dir.path().to_path_buf(),
        (Target::Copy, None) => PathBuf::new(),
    };
    if let Err(e) = prepare_base(&base) {
        for r in &declared {
            lost(
                r.name.as_str(),
                format!("its directory cannot be made: {e}"),
            )?;
        }
        return Ok(Some(Value::Object(Map::new())));
    }
    let mut written = Vec::new();
    for rec in declared {
        match materialize(store, run, rec, &base).await {
            Ok(host) => written.push((rec, host)),
            Err(reason) => lost(rec.name.as_str(), reason)?,
        }
    }
    let mut view = Map::new();
    match &target {
        Target::Dir { container, .. } => {
            for (rec, host) in &written {
                let path = match container {
                    Some(_) => rec.container_path(),
                    None => host.display().to_string(),
                };
                view.insert(rec.name.to_string(), entry(rec, path));
            }
        }
        Target::Copy => {
            let sandbox = booted.run();
            match copy_in(sandbox.as_ref(), &written).await {
                Ok(bytes) => {
                    events.emit(EventKind::SandboxAttachmentsCopied {
                        driver: sandbox.driver(),
                        count: written.len() as u64,
                        bytes,
                    });
                    for (rec, _) in &written {
                        view.insert(rec.name.to_string(), entry(rec, rec.container_path()));
                    }
                }
                Err(reason) => {
                    for (rec, _) in &written {
                        lost(
                            rec.name.as_str(),
                            format!("the copy into the sandbox failed: {reason}"),
                        )?;
                    }
                }
            }
        }
    }
    Ok(Some(Value::Object(view)))
}

fn entry(rec: &AttachmentRecord, path: String) -> Value {
    json!({
        "path": path,
        "file": rec.file.as_str(),
        "size": rec.size.to_string(),
        "sha256": rec.sha256,
        "mime": mime_of(rec.file.as_str()),
    })
}

/// The MIME type a file name suggests (upstream's allowlist), else
/// `application/octet-stream`.
pub(crate) fn mime_of(file: &str) -> &'static str {
    let ext = file
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "pdf" => "application/pdf",
        "json" => "application/json",
        "zip" => "application/zip",
        "gz" | "tgz" => "application/gzip",
        "tar" => "application/x-tar",
        "txt" => "text/plain",
        "md" | "markdown" => "text/markdown",
        "csv" => "text/csv",
        "yaml" | "yml" => "application/yaml",
        _ => "application/octet-stream",
    }
}

/// The attachments dir: a real directory (never a symlink), readable by a
/// non-root container user.
fn prepare_base(base: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(base) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{} is not a directory", base.display()),
            ));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::create_dir(base)?,
        Err(e) => return Err(e),
    }
    std::fs::set_permissions(base, std::fs::Permissions::from_mode(0o755))
}

/// Write one attachment at `base/NAME/FILE` from the store, checked
/// against its record before it takes its name; the reason it could not.
async fn materialize(
    store: &dyn RunStore,
    run: &RunId,
    rec: &AttachmentRecord,
    base: &Path,
) -> Result<PathBuf, String> {
    let dir = base.join(rec.name.as_str());
    // What an earlier attempt of the run left goes (a resume re-provides).
    match std::fs::symlink_metadata(&dir) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(&dir).map_err(|e| e.to_string())?,
        Ok(_) => std::fs::remove_file(&dir).map_err(|e| e.to_string())?,
        Err(_) => {}
    }
    std::fs::create_dir(&dir).map_err(|e| e.to_string())?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| e.to_string())?;
    let part = dir.join(".part");
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&part)
        .map_err(|e| e.to_string())?;
    let mut stream = store
        .get_attachment(run, &rec.name)
        .await
        .map_err(|e| e.to_string())?;
    let mut check = FileCheck::new();
    let mut failed = None;
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(bytes) => {
                check.update(&bytes);
                // Bounded by the record: a store serving more is not read on.
                if check.size() > rec.size {
                    failed = Some("the store serves more bytes than it recorded".to_owned());
                    break;
                }
                if let Err(e) = std::io::Write::write_all(&mut out, &bytes) {
                    failed = Some(e.to_string());
                    break;
                }
            }
            Err(e) => {
                failed = Some(e.to_string());
                break;
            }
        }
    }
    let verdict = match failed {
        Some(why) => Err(why),
        None => check.finish_attachment(rec).map_err(|e| e.to_string()),
    }
    .and_then(|()| out.sync_all().map_err(|e| e.to_string()));
    drop(out);
    let host = dir.join(rec.file.as_str());
    match verdict {
        Ok(()) => {
            std::fs::rename(&part, &host).map_err(|e| e.to_string())?;
            Ok(host)
        }
        Err(why) => {
            let _ = std::fs::remove_file(&part);
            Err(why)
        }
    }
}

/// Copy the written attachments into the sandbox under
/// `/run/iterion/attachments` (files only: the engine creates their
/// parents root-owned `0755`), root-owned and `0444`; the bytes copied.
async fn copy_in(
    run: &dyn SandboxRun,
    written: &[(&AttachmentRecord, PathBuf)],
) -> Result<u64, String> {
    let mut archive = tempfile::tempfile().map_err(|e| e.to_string())?;
    let mut bytes = 0u64;
    {
        let mut builder = tar::Builder::new(&mut archive);
        for (rec, host) in written {
            let mut file = std::fs::File::open(host).map_err(|e| e.to_string())?;
            let mut header = tar::Header::new_gnu();
            header.set_size(rec.size);
            header.set_mode(0o444);
            header.set_uid(0);
            header.set_gid(0);
            header.set_entry_type(tar::EntryType::Regular);
            let name = format!(
                "{}/{}/{}",
                ATTACHMENTS_CONTAINER_DIR.trim_start_matches('/'),
                rec.name,
                rec.file
            );
            builder
                .append_data(&mut header, name, &mut file)
                .map_err(|e| e.to_string())?;
            bytes += rec.size;
        }
        builder.finish().map_err(|e| e.to_string())?;
    }
    std::io::Seek::rewind(&mut archive).map_err(|e| e.to_string())?;
    let stream: iterion_core::ByteStream = Box::pin(tokio_util::io::ReaderStream::new(
        tokio::fs::File::from_std(archive),
    ));
    run.import("/", stream).await.map_err(|e| e.to_string())?;
    Ok(bytes)
}
