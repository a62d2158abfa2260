//! Timestamps as both stores keep them: microseconds since the epoch (what
//! PostgreSQL's timestamps hold), so a value reads back exactly as written.

use iterion_core::StoreError;
use time::OffsetDateTime;

pub(crate) fn micros(t: OffsetDateTime) -> i64 {
    (t.unix_timestamp_nanos() / 1000) as i64
}

pub(crate) fn from_micros(us: i64) -> Result<OffsetDateTime, StoreError> {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(us) * 1000).map_err(|e| {
        StoreError::Backend {
            operation: "decode timestamp",
            source: Box::new(e),
        }
    })
}
