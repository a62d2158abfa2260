//! The run list's page contract, shared by both stores: an opaque cursor
//! `o<ord>` naming the last run of the previous page (runs are listed by
//! their insertion order, newest first), the default and the ceiling of a
//! page's size, and the cursor of the next page. A store only runs its
//! query `ord < before ORDER BY ord DESC LIMIT limit + 1` and hands the
//! rows to [`Window::finish`].

use iterion_core::StoreError;
use iterion_core::store::{Page, PageRequest};

/// Items of a page when the request says 0.
pub const DEFAULT_LIMIT: usize = 50;
/// Items of a page at most, whatever the request says.
pub const MAX_LIMIT: usize = 1000;

/// The query window of one page request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Runs strictly older than this `ord` (`i64::MAX` on the first page).
    pub before: i64,
    /// Items wanted; ask the database for one more to know whether a next
    /// page exists.
    pub limit: usize,
}

impl Window {
    /// Read a page request; a cursor this contract did not issue is
    /// [`StoreError::InvalidCursor`].
    pub fn of(page: &PageRequest) -> Result<Self, StoreError> {
        let before = match page.cursor.as_deref() {
            None => i64::MAX,
            Some(c) => c
                .strip_prefix('o')
                .and_then(|n| n.parse::<i64>().ok())
                .filter(|n| *n > 0)
                .ok_or(StoreError::InvalidCursor)?,
        };
        let limit = if page.limit == 0 {
            DEFAULT_LIMIT
        } else {
            page.limit.min(MAX_LIMIT)
        };
        Ok(Self { before, limit })
    }

    /// The `LIMIT` to send: one past the page, to see whether more exist.
    pub fn fetch(&self) -> i64 {
        i64::try_from(self.limit)
            .unwrap_or(i64::MAX)
            .saturating_add(1)
    }

    /// The page from the rows fetched (each with its `ord`, newest first):
    /// at most `limit` items, and the next cursor when more rows came.
    pub fn finish<T>(&self, rows: Vec<(i64, T)>) -> Page<T> {
        let more = rows.len() > self.limit;
        let mut last = None;
        let items = rows
            .into_iter()
            .take(self.limit)
            .map(|(ord, item)| {
                last = Some(ord);
                item
            })
            .collect();
        Page {
            items,
            next_cursor: if more {
                last.map(|o| format!("o{o}"))
            } else {
                None
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(cursor: Option<&str>, limit: usize) -> PageRequest {
        PageRequest {
            cursor: cursor.map(str::to_owned),
            limit,
        }
    }

    #[test]
    fn cursors_round_trip_and_bad_ones_are_refused() {
        let w = Window::of(&req(None, 0)).unwrap();
        assert_eq!((w.before, w.limit), (i64::MAX, DEFAULT_LIMIT));
        assert_eq!(Window::of(&req(None, 5000)).unwrap().limit, MAX_LIMIT);
        let w = Window::of(&req(None, 2)).unwrap();
        assert_eq!(w.fetch(), 3);
        let page = w.finish(vec![(9, 'a'), (7, 'b'), (4, 'c')]);
        assert_eq!(page.items, vec!['a', 'b']);
        assert_eq!(page.next_cursor.as_deref(), Some("o7"));
        assert_eq!(Window::of(&req(Some("o7"), 2)).unwrap().before, 7);
        let last = Window::of(&req(Some("o7"), 2))
            .unwrap()
            .finish(vec![(4, 'c')]);
        assert_eq!(last.next_cursor, None);
        for bad in ["7", "o", "o0", "o-3", "ox", "p7"] {
            assert!(
                matches!(
                    Window::of(&req(Some(bad), 2)),
                    Err(StoreError::InvalidCursor)
                ),
                "{bad}"
            );
        }
    }
}
