//! A run's attachments in PostgreSQL (issue 14 item 5): the bytes in a blob
//! ([`crate::blobs`], as a run file's), the record in `run_attachments`,
//! both in one transaction so a put is whole or absent. The trait methods
//! in `lib.rs` call these.

use iterion_core::attachment::{AttachmentFile, AttachmentName, AttachmentPut, AttachmentRecord};
use iterion_core::id::RunId;
use iterion_core::{ByteStream, StoreError};
use iterion_storekit::clock::now;

use crate::blobs;
use crate::db::PostgresStore;
use crate::rows::{classify, get};

pub(crate) async fn put(
    store: &PostgresStore,
    run: &RunId,
    name: &AttachmentName,
    file: &AttachmentFile,
    content: ByteStream,
    cap: u64,
) -> Result<AttachmentPut, StoreError> {
    let map = |e| classify(e, "put attachment");
    let mut c = store.client().await?;
    let tx = c.transaction().await.map_err(map)?;
    let (blob_id, size, sha256) = match blobs::write(&tx, run, content, cap).await? {
        blobs::Written::Over { read } => return Ok(AttachmentPut::CapExceeded { read, cap }),
        blobs::Written::Blob { id, size, sha256 } => (id, size, sha256),
    };
    let stored_at = now();
    let old = tx
        .query_opt(
            "SELECT blob_id FROM run_attachments WHERE run_id = $1 AND name = $2 FOR UPDATE",
            &[&run.as_str(), &name.as_str()],
        )
        .await
        .map_err(map)?;
    tx.execute(
        "INSERT INTO run_attachments (run_id, name, file, size, sha256, stored_at, blob_id) \
         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (run_id, name) DO UPDATE SET \
         file = excluded.file, size = excluded.size, sha256 = excluded.sha256, \
         stored_at = excluded.stored_at, blob_id = excluded.blob_id",
        &[
            &run.as_str(),
            &name.as_str(),
            &file.as_str(),
            &(size as i64),
            &sha256,
            &stored_at,
            &blob_id,
        ],
    )
    .await
    .map_err(map)?;
    blobs::drop_replaced(&tx, old).await?;
    tx.commit().await.map_err(map)?;
    Ok(AttachmentPut::Stored(AttachmentRecord {
        name: name.clone(),
        file: file.clone(),
        size,
        sha256,
        stored_at,
    }))
}

pub(crate) async fn list(
    store: &PostgresStore,
    run: &RunId,
) -> Result<Vec<AttachmentRecord>, StoreError> {
    let rows = {
        let c = store.client().await?;
        c.query(
            "SELECT name, file, size, sha256, stored_at FROM run_attachments \
             WHERE run_id = $1 ORDER BY name COLLATE \"C\"",
            &[&run.as_str()],
        )
        .await
        .map_err(|e| classify(e, "list attachments"))?
    };
    if rows.is_empty() && !store.run_exists(run).await? {
        return Err(StoreError::RunNotFound(run.clone()));
    }
    rows.iter()
        .map(|r| {
            Ok(AttachmentRecord {
                name: AttachmentName::parse(&get::<String>(r, 0)?)?,
                file: AttachmentFile::parse(&get::<String>(r, 1)?)?,
                size: get::<i64>(r, 2)? as u64,
                sha256: get(r, 3)?,
                stored_at: get(r, 4)?,
            })
        })
        .collect()
}

pub(crate) async fn get_bytes(
    store: &PostgresStore,
    run: &RunId,
    name: &AttachmentName,
) -> Result<ByteStream, StoreError> {
    let row = {
        let c = store.client().await?;
        c.query_opt(
            "SELECT blob_id, size FROM run_attachments WHERE run_id = $1 AND name = $2",
            &[&run.as_str(), &name.as_str()],
        )
        .await
        .map_err(|e| classify(e, "get attachment"))?
    };
    let Some(row) = row else {
        if !store.run_exists(run).await? {
            return Err(StoreError::RunNotFound(run.clone()));
        }
        return Err(StoreError::FileNotFound(format!("attachment {name}")));
    };
    let blob_id: i64 = get(&row, 0)?;
    let size = get::<i64>(&row, 1)? as u64;
    Ok(blobs::read(store.pool().clone(), blob_id, size))
}
