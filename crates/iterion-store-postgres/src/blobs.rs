//! Stored bytes: one `file_blobs` row per stored content, its bytes in
//! 1 MiB `file_chunks`. What a run file and an attachment both hold; the
//! record that names a blob (its path or name, size and sha256) is the
//! caller's, written in the same transaction.

use bytes::{Bytes, BytesMut};
use deadpool_postgres::{Pool, Transaction};
use futures_util::StreamExt;
use sha2::{Digest, Sha256};

use iterion_core::id::RunId;
use iterion_core::{ByteStream, StoreError};

use crate::rows::{classify, get};

/// Size of one stored chunk.
const CHUNK: usize = 1 << 20;

/// What [`write`] stored.
pub(crate) enum Written {
    /// A blob of the run, whole.
    Blob {
        /// Its id.
        id: i64,
        /// Bytes.
        size: u64,
        /// Hex sha256.
        sha256: String,
    },
    /// The stream passed the cap: the caller returns and the transaction
    /// rolls back, keeping nothing.
    Over {
        /// Bytes read before stopping.
        read: u64,
    },
}

/// Stream `content` into a fresh blob of `run` inside `tx`, metering
/// against `cap`. A run that does not exist is [`StoreError::RunNotFound`].
pub(crate) async fn write(
    tx: &Transaction<'_>,
    run: &RunId,
    mut content: ByteStream,
    cap: u64,
) -> Result<Written, StoreError> {
    let map = |e| classify(e, "store bytes");
    let blob = tx
        .query_opt(
            "INSERT INTO file_blobs (run_id) SELECT id FROM runs WHERE id = $1 RETURNING id",
            &[&run.as_str()],
        )
        .await
        .map_err(map)?;
    let Some(blob) = blob else {
        return Err(StoreError::RunNotFound(run.clone()));
    };
    let blob_id: i64 = get(&blob, 0)?;
    let insert = tx
        .prepare("INSERT INTO file_chunks (blob_id, idx, data) VALUES ($1, $2, $3)")
        .await
        .map_err(map)?;
    let mut hasher = Sha256::new();
    let mut read: u64 = 0;
    let mut idx: i32 = 0;
    let mut buf = BytesMut::with_capacity(CHUNK);
    while let Some(chunk) = content.next().await {
        let chunk: Bytes = chunk.map_err(|source| StoreError::Io {
            operation: "read content to store".to_owned(),
            source,
        })?;
        read += chunk.len() as u64;
        if read > cap {
            return Ok(Written::Over { read });
        }
        hasher.update(&chunk);
        let mut rest = &chunk[..];
        while !rest.is_empty() {
            let take = (CHUNK - buf.len()).min(rest.len());
            buf.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
            if buf.len() == CHUNK {
                let data = buf.split().freeze();
                tx.execute(&insert, &[&blob_id, &idx, &&data[..]])
                    .await
                    .map_err(map)?;
                idx += 1;
            }
        }
    }
    if !buf.is_empty() {
        tx.execute(&insert, &[&blob_id, &idx, &&buf[..]])
            .await
            .map_err(map)?;
    }
    Ok(Written::Blob {
        id: blob_id,
        size: read,
        sha256: hex::encode(hasher.finalize()),
    })
}

/// Stream blob `blob_id` of `size` bytes, one chunk per query: memory stays
/// at one chunk whatever the size. A blob replaced mid-read shows as a
/// missing chunk before `size` bytes: an error, never a silently short
/// stream.
pub(crate) fn read(pool: Pool, blob_id: i64, size: u64) -> ByteStream {
    let stream = futures_util::stream::unfold(Some((0i32, size)), move |state| {
        let pool = pool.clone();
        async move {
            let (idx, remaining) = state?;
            if remaining == 0 {
                return None;
            }
            let fetched = async {
                let c = pool.get().await.map_err(std::io::Error::other)?;
                c.query_opt(
                    "SELECT data FROM file_chunks WHERE blob_id = $1 AND idx = $2",
                    &[&blob_id, &idx],
                )
                .await
                .map_err(std::io::Error::other)?
                .map(|r| r.try_get::<_, Vec<u8>>(0))
                .transpose()
                .map_err(std::io::Error::other)
            }
            .await;
            match fetched {
                Ok(Some(data)) => {
                    let left = remaining.saturating_sub(data.len() as u64);
                    Some((Ok(Bytes::from(data)), Some((idx + 1, left))))
                }
                Ok(None) => Some((
                    Err(std::io::Error::other(
                        "stored bytes were replaced or removed while being read",
                    )),
                    None,
                )),
                Err(e) => Some((Err(e), None)),
            }
        }
    });
    Box::pin(stream)
}

/// Delete the blob a put replaced (`old`: the row holding its id, selected
/// in the same transaction before the record was swapped), so a replaced
/// run file or attachment never leaves its bytes behind.
pub(crate) async fn drop_replaced(
    tx: &Transaction<'_>,
    old: Option<tokio_postgres::Row>,
) -> Result<(), StoreError> {
    if let Some(old) = old {
        let old: i64 = get(&old, 0)?;
        tx.execute("DELETE FROM file_blobs WHERE id = $1", &[&old])
            .await
            .map_err(|e| classify(e, "drop replaced bytes"))?;
    }
    Ok(())
}
