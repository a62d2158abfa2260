//! Machinery shared by the run-store backends (`iterion-store-sqlite`,
//! `iterion-store-postgres`) so that both follow the same contract with
//! the same code: the follow stream (read what is there, wait for more,
//! end once the run is terminal and drained), the run list's page
//! contract (cursor, limits, next cursor), JSON columns, the deepest event
//! payload a store accepts, and the clock both keep timestamps by. It owns no
//! storage.

pub mod clock;
pub mod follow;
pub mod json;
pub mod page;
pub mod payload;
