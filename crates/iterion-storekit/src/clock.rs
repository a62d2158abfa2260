//! The clock both stores stamp records with: now, truncated to
//! microseconds, because that is what PostgreSQL's timestamps hold — so a
//! record reads back exactly as it was returned, from either store.

use time::OffsetDateTime;

/// Now, truncated to microseconds.
pub fn now() -> OffsetDateTime {
    let t = OffsetDateTime::now_utc();
    t.replace_nanosecond(t.nanosecond() / 1000 * 1000)
        .unwrap_or(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn now_has_no_sub_microsecond_part() {
        for _ in 0..100 {
            assert_eq!(now().nanosecond() % 1000, 0);
        }
    }
}
