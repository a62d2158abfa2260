//! iterion-testkit: shared test suites and fixtures. `driver` holds the
//! driver conformance suite every sandbox driver mounts.

pub mod driver;
