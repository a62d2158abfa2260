//! Integration tests of the PostgreSQL store against a real server
//! (`ITERION_TEST_POSTGRES_URL`, started by scripts/test.sh): the shared
//! conformance suite in a fresh schema per test, the bad inputs, and a
//! private throwaway server killed mid-append.
#![allow(clippy::expect_used, clippy::unwrap_used)] // test code: a failed expectation is the assertion

mod bad_input;
mod conformance;
mod outage;
mod support;
