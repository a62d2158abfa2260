//! iterion-testkit: the conformance suites every backend runs and their
//! fixtures (dev-dependency only).

pub mod store;
