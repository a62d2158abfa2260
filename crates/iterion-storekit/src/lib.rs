//! Machinery shared by the run-store backends (`iterion-store-sqlite`,
//! `iterion-store-postgres`) so that both follow the same contract with
//! the same code: the follow stream (read what is there, wait for more,
//! end once the run is terminal and drained) and the run list's page
//! contract (cursor, limits, next cursor). It owns no storage.

pub mod follow;
pub mod page;
