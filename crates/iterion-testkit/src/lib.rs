//! iterion-testkit: the conformance suites every backend runs and their
//! fixtures (dev-dependency only). `driver` holds `driver_conformance!`,
//! mounted by every sandbox driver; `store` holds `store_conformance!`,
//! mounted by every run store.

pub mod driver;
pub mod store;
