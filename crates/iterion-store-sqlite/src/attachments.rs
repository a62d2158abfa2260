//! A run's attachments in the embedded store (issue 14 item 5): the bytes
//! under `runs/<RUN_ID>/attachments/<NAME>` through the same staged,
//! metered, never-partial writes as the run files ([`crate::files`]), the
//! record in `run_attachments`. The trait methods in `lib.rs` call these.

use rusqlite::params;

use iterion_core::attachment::{AttachmentFile, AttachmentName, AttachmentPut, AttachmentRecord};
use iterion_core::id::RunId;
use iterion_core::store::RunFilePath;
use iterion_core::{ByteStream, StoreError};
use iterion_storekit::clock::now;

use crate::clock::{from_micros, micros};
use crate::db::SqliteStore;
use crate::rows::{entry_known, run_exists};
use crate::{files, schema};

fn not_found(name: &AttachmentName) -> StoreError {
    StoreError::FileNotFound(format!("attachment {name}"))
}

pub(crate) async fn put(
    store: &SqliteStore,
    run: &RunId,
    name: &AttachmentName,
    file: &AttachmentFile,
    content: ByteStream,
    cap: u64,
) -> Result<AttachmentPut, StoreError> {
    let id = run.clone();
    if !store
        .with_conn("put attachment", move |conn, loc| {
            run_exists(conn, id.as_str(), loc)
        })
        .await?
    {
        return Err(StoreError::RunNotFound(run.clone()));
    }
    let area = files::RunArea::attachments(store.dir(), run);
    let staged = match area.stage(content, cap).await? {
        files::Staged::Over { read } => return Ok(AttachmentPut::CapExceeded { read, cap }),
        files::Staged::Ready(staged) => staged,
    };
    let _guard = store.files_lock().lock().await;
    let (size, sha256) = (staged.size, staged.sha256.clone());
    area.commit(staged, &RunFilePath::parse(name.as_str())?)
        .await?;
    let record = AttachmentRecord {
        name: name.clone(),
        file: file.clone(),
        size,
        sha256,
        stored_at: now(),
    };
    let rec = record.clone();
    let id = run.clone();
    store
        .with_conn("put attachment", move |conn, loc| {
            conn.execute(
                "INSERT INTO run_attachments (run_id, name, file, size, sha256, stored_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (run_id, name) DO UPDATE SET \
                 file = excluded.file, size = excluded.size, sha256 = excluded.sha256, \
                 stored_at = excluded.stored_at",
                params![
                    id.as_str(),
                    rec.name.as_str(),
                    rec.file.as_str(),
                    rec.size as i64,
                    rec.sha256,
                    micros(rec.stored_at)
                ],
            )
            .map_err(|e| schema::classify(e, loc))
        })
        .await?;
    Ok(AttachmentPut::Stored(record))
}

pub(crate) async fn list(
    store: &SqliteStore,
    run: &RunId,
) -> Result<Vec<AttachmentRecord>, StoreError> {
    let run = run.clone();
    store
        .with_conn("list attachments", move |conn, loc| {
            let map = |e| schema::classify(e, loc);
            if !run_exists(conn, run.as_str(), loc)? {
                return Err(StoreError::RunNotFound(run));
            }
            let mut stmt = conn
                .prepare_cached(
                    "SELECT name, file, size, sha256, stored_at FROM run_attachments \
                     WHERE run_id = ?1 ORDER BY name",
                )
                .map_err(map)?;
            let rows = stmt
                .query_map([run.as_str()], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, i64>(2)?,
                        r.get::<_, String>(3)?,
                        r.get::<_, i64>(4)?,
                    ))
                })
                .map_err(map)?
                .collect::<Result<Vec<_>, _>>()
                .map_err(map)?;
            rows.into_iter()
                .map(|(name, file, size, sha256, at)| {
                    Ok(AttachmentRecord {
                        name: AttachmentName::parse(&name)?,
                        file: AttachmentFile::parse(&file)?,
                        size: size as u64,
                        sha256,
                        stored_at: from_micros(at)?,
                    })
                })
                .collect()
        })
        .await
}

pub(crate) async fn get(
    store: &SqliteStore,
    run: &RunId,
    name: &AttachmentName,
) -> Result<ByteStream, StoreError> {
    let id = run.clone();
    let n = name.clone();
    let known = store
        .with_conn("get attachment", move |conn, loc| {
            entry_known(
                conn,
                &id,
                "SELECT 1 FROM run_attachments WHERE run_id = ?1 AND name = ?2",
                n.as_str(),
                loc,
            )
        })
        .await?;
    if !known {
        return Err(not_found(name));
    }
    let path = RunFilePath::parse(name.as_str())?;
    match files::RunArea::attachments(store.dir(), run)
        .open(&path)
        .await
    {
        // The record exists and the bytes do not: the caller sees a lost
        // attachment by name, not a run file.
        Err(StoreError::FileNotFound(_)) => Err(not_found(name)),
        other => other,
    }
}
