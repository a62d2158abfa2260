//! iterion-testkit: the conformance suites every backend runs and their
//! fixtures (dev-dependency only). `driver` holds `driver_conformance!`,
//! mounted by every sandbox driver; `store` holds `store_conformance!`,
//! mounted by every run store; `provider` is the scripted LLM provider
//! every agent test talks to; `agent` finds (or builds) the binaries agent
//! tests run: the static `iterion` and the real `claude` CLI.

pub mod agent;
pub mod driver;
pub mod provider;
pub mod sigv4;
pub mod store;
